#!/bin/bash
# make's SHELL for benchmarks/ci.py: runs each recipe line with bash, as the Makefile's
# SHELL := /bin/bash does, and appends "start end rc recipe" to $GWMS_CI_TIMES.
start=$(date +%s.%N)
/bin/bash "$@"
rc=$?
if [[ -n ${GWMS_CI_TIMES:-} ]]; then
  line=${*: -1}
  printf '%s %s %s %s\n' "$start" "$(date +%s.%N)" "$rc" "${line//$'\n'/ }" >>"$GWMS_CI_TIMES"
fi
exit $rc
