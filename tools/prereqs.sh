#!/usr/bin/env bash
# What `make test` needs from Debian: the one list of those packages.
#   tools/prereqs.sh          as root: install what is missing (`make prereqs`, `make test`, .ci/run);
#                             otherwise: fail, printing the exact command to run
#   tools/prereqs.sh --check  only say what is missing (exit 1 if anything is)
# GWMS_OBS_ALLOW_SKIP=1 turns the failure into a warning: the tests needing
# what is missing then skip (tests/conftest.py lets them).
set -euo pipefail

# command that shows the package is there, and the Debian package providing it
PREREQS=(
  prometheus:prometheus                           # live tests run a real Prometheus
  promtool:prometheus                             # rule tests, config checks
  prometheus-alertmanager:prometheus-alertmanager # tests/test_alerting_live.py
  amtool:prometheus-alertmanager                  # Alertmanager config and routing tests
  systemd-nspawn:systemd-container                # tests/test_deploy_nspawn.py boots a Debian host
  debootstrap:debootstrap                         # ...built with debootstrap
  dpkg-scanpackages:dpkg-dev                      # ...whose apt sees a local mirror
  shellcheck:shellcheck                           # lints pilot/gwms-trace.sh and these scripts
  curl:curl                                       # pilot/gwms-trace.sh posts its spans with curl
  dockerd:docker.io                               # the compose stack test starts its own engine (tools/docker_engine.py)
  chromium:chromium                               # the controller's web page tests drive a headless Chromium
  chromedriver:chromium-driver                    # ...through Selenium and Debian's matching driver
  postgres:postgresql                             # the controller's PostgreSQL tests run a throwaway cluster (tools/postgres.py)
  rrdtool:rrdtool                                 # gwms-obs import-rrd reads GlideinWMS's RRDs with rrdtool dump
)

# Where to look: PATH plus the sbin dirs a non-root PATH lacks (debootstrap is
# in /usr/sbin) and Debian's versioned PostgreSQL dirs, never on PATH
# (/usr/lib/postgresql/15/bin/postgres; an unmatched glob is a harmless missing
# dir). tests/test_prereqs.py points it at an empty dir.
search=${GWMS_OBS_PREREQS_PATH:-$PATH:/usr/sbin:/sbin$(printf ':%s' /usr/lib/postgresql/*/bin)}
found() { PATH=$search command -v "$1" >/dev/null; }

missing() {
  local -A seen=()
  local p out=()
  for p in "${PREREQS[@]}"; do
    found "${p%%:*}" || [[ -n ${seen[${p#*:}]:-} ]] || { seen[${p#*:}]=1; out+=("${p#*:}"); }
  done
  # `make venv` needs the venv module's ensurepip, a separate package on Debian
  local py
  if ! py=$(PATH=$search command -v "${PYTHON:-python3}") || ! "$py" -c 'import ensurepip, venv' 2>/dev/null; then
    out+=(python3-venv)
  fi
  echo "${out[*]}"
}

check_only=0
case ${1:-} in
  --check) check_only=1 ;;
  '') ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

need=$(missing)
# not Debian (no apt-get): nothing to install with; the message below names the packages
if [[ -n $need && $check_only == 0 && $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  # The packages' maintainer scripts would start the Debian services (on
  # 0.0.0.0:9090/9093, PostgreSQL's main cluster on 5432); tests run their own
  # instances on 127.0.0.1 instead.
  made_policy=0
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && made_policy=1
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  echo "prereqs: installing $need"
  apt-get update -qq
  # shellcheck disable=SC2086 # $need is a list of package names
  apt-get install -y -qq --no-install-recommends $need >/dev/null
  if ((made_policy)); then rm -f /usr/sbin/policy-rc.d && trap - EXIT; fi
  need=$(missing)
  if [[ -n $need ]]; then
    echo "prereqs: still missing after apt-get install: $need" >&2
    exit 1
  fi
fi

problems=0
if [[ -n $need ]]; then
  problems=1
  cat >&2 <<MSG
prereqs: missing Debian packages: $need
  install them (their services are not started):  sudo make prereqs
  or exactly:  sudo apt-get install -y --no-install-recommends $need
MSG
fi
# tests/test_deploy_nspawn.py boots a container: make test runs it, so it needs root
if [[ $(id -u) != 0 ]]; then
  problems=1
  echo "prereqs: not root: tests/test_deploy_nspawn.py boots a Debian host with systemd-nspawn; run: sudo make test" >&2
fi
if ((problems)); then
  if [[ ${GWMS_OBS_ALLOW_SKIP:-} == 1 ]]; then
    echo "prereqs: GWMS_OBS_ALLOW_SKIP=1: the tests needing these are skipped" >&2
    exit 0
  fi
  echo "  or skip the tests needing them:  GWMS_OBS_ALLOW_SKIP=1 make test" >&2
  exit 1
fi
