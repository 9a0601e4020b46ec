"""`ansible-playbook deploy.yml` against a real Debian host booted with systemd (systemd-nspawn -b).

The host is air-gapped like a factory host: apt sees only a local mirror of
.debs, the collector, Jaeger and the exporter's wheels come from an artifact
dir with their sha256. Ansible runs inside the container (connection local,
this machine's venv bind-mounted read-only); the secrets come from an
Ansible-Vault-encrypted file. Everything is then checked from outside: units
through systemctl in the container, HTTP from this machine's Python inside
the container's network namespace, mail through an SMTP sink in that
namespace. Grafana is the one component not deployed as a server here: it has
no Debian package and cannot be downloaded on these machines (its
datasources and dashboards are still installed, see the skip reason printed).

Order matters: check mode on the fresh host, the deployment, a second run
(changed=0), the checks, then the two tests that break things on purpose.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gwms_obs import __version__, wheelhouse
from gwms_obs.simulate.factory import simulate
from tests.support import nspawn
from tests.support.servers import wait_for

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE = ROOT / "ansible"
VENV = Path(sys.prefix)
PYTHON_HOME = Path(sys.base_prefix)

_why = nspawn.unavailable()
pytestmark = [
    pytest.mark.live,
    pytest.mark.nspawn,
    pytest.mark.slow,
    pytest.mark.skipif(_why is not None, reason=f"deploy test needs a systemd-nspawn host: {_why}"),
]

GRAFANA_SKIP = (
    "Grafana server not deployed: no Debian package exists and it cannot be downloaded here "
    "(grafana_server_enabled=false; its datasources and dashboards are installed and checked)"
)
# unit -> health URL inside the host (single-host inventory ports)
SERVICES = {
    "prometheus": "http://127.0.0.1:9090/-/ready",
    "prometheus-alertmanager": "http://127.0.0.1:9093/-/ready",
    "jaeger": "http://127.0.0.1:13134/status",
    "otelcol-gwms": "http://127.0.0.1:13133/",
    "gwms-obs-exporter": "http://127.0.0.1:9822/metrics",
}
TEST_RULES = "gwms-deploy-test.rules.yml"
OPS_MAIL = "factory-ops@factory.test"
PILOTS = 300


def _go_binary(env: str, target: str) -> Path:
    """The collector/Jaeger binary `make otelcol`/`make jaeger` built (the Makefile exports its path)."""
    path = os.environ.get(env)
    if not path or not Path(path).exists():
        out = subprocess.run(
            ["make", "-s", "--no-print-directory", target],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"make {target} failed:\n{out.stderr[-3000:]}")
        path = out.stdout.strip().splitlines()[-1]
    return Path(path)


def _recap(out: str) -> dict[str, int]:
    m = re.search(r"^\S+\s*:\s*(ok=\d+.*)$", out.split("PLAY RECAP", 1)[-1], re.M)
    if not m:
        raise AssertionError(f"no PLAY RECAP in:\n{out[-3000:]}")
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


@dataclass
class Host:
    ct: nspawn.Container
    work: Path
    rules: Path
    mails: Path
    runs: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def playbook(self, *extra: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return self.ct.exec(
            f"{VENV}/bin/ansible-playbook",
            "-i",
            f"{ANSIBLE}/inventories/single-host/hosts.yml",
            f"{ANSIBLE}/deploy.yml",
            "-e",
            "@/srv/gwms-test/vars.yml",
            "-e",
            "@/srv/gwms-test/vault.yml",
            "--vault-password-file",
            "/srv/gwms-test/vault-pass",
            *extra,
            timeout=timeout,
            check=False,
            env={"ANSIBLE_CONFIG": f"{ANSIBLE}/ansible.cfg", "ANSIBLE_FORCE_COLOR": "0", "HOME": "/root"},
        )

    def active(self, unit: str) -> str:
        return self.ct.exec("systemctl", "is-active", unit, check=False).stdout.strip()

    def query(self, expr: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"query": expr})
        doc = json.loads(self.ct.http_get(f"http://127.0.0.1:9090/api/v1/query?{q}"))
        result: list[dict[str, Any]] = doc["data"]["result"]
        return result


def _artifacts(dest: Path) -> dict[str, str]:
    """The operator's artifact dir: our collector, Jaeger, and the exporter's wheelhouse."""
    _, wheelhouse_sha = wheelhouse.build(dest)
    shutil.copy(_go_binary("GWMS_OBS_OTELCOL", "otelcol"), dest / "otelcol-gwms")
    shutil.copy(_go_binary("GWMS_OBS_JAEGER", "jaeger"), dest / "jaeger")
    return {
        "gwms_exporter_version": __version__,
        "gwms_exporter_wheelhouse_sha256": wheelhouse_sha,
        "otel_collector_binary_sha256": wheelhouse.sha256(dest / "otelcol-gwms"),
        "jaeger_binary_sha256": wheelhouse.sha256(dest / "jaeger"),
    }


SINK = """
import json, os, sys, time
from tests.support.servers import SmtpSink
out, deadline = sys.argv[1], time.monotonic() + float(sys.argv[2])
with SmtpSink() as sink:
    open(out + ".port.tmp", "w").write(str(sink.port)); os.replace(out + ".port.tmp", out + ".port")
    while time.monotonic() < deadline:
        mails = [{"rcpt_tos": list(m.rcpt_tos), "subject": m.subject} for m in sink.mails()]
        open(out + ".tmp", "w").write(json.dumps(mails)); os.replace(out + ".tmp", out)
        time.sleep(0.2)
"""


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Host]:
    t0 = time.monotonic()
    work = tmp_path_factory.mktemp("deploy")
    log = work / "nspawn-build.log"
    nspawn.rootfs_tarball(log)
    nspawn.deb_repo(log)
    t_cache = time.monotonic()
    arts = work / "artifacts"
    test_vars = _artifacts(arts)
    t_arts = time.monotonic()

    rules = work / "rules"
    shutil.copytree(ROOT / "dashboards" / "rules", rules, ignore=shutil.ignore_patterns("tests"))
    (rules / TEST_RULES).write_text(
        textwrap.dedent("""\
            groups:
              - name: gwms-deploy-test
                rules:
                  - alert: GwmsDeployTestAlwaysFiring
                    expr: vector(1)
                    labels: {severity: info, audience: factory}
                    annotations: {summary: the deploy test's alert path}
            """)
    )
    conf = work / "conf"
    conf.mkdir()
    (conf / "vault-pass").write_text("gwms-obs-deploy-test-vault-pass\n")
    (conf / "vault.yml").write_text(
        yaml.safe_dump(
            {
                "vault_grafana_admin_password": hashlib.sha256(str(work).encode()).hexdigest()[:24],
                "vault_otel_collector_pilot_tokens": [hashlib.sha256(f"{work}-pilot".encode()).hexdigest()],
            }
        )
    )
    subprocess.run(
        [
            f"{VENV}/bin/ansible-vault",
            "encrypt",
            "--vault-password-file",
            str(conf / "vault-pass"),
            str(conf / "vault.yml"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert (conf / "vault.yml").read_text().startswith("$ANSIBLE_VAULT")
    mails = work / "mails.json"

    binds_ro = [
        (str(PYTHON_HOME), str(PYTHON_HOME)),
        (str(VENV), str(VENV)),
        (str(ROOT), str(ROOT)),
        (str(arts), "/srv/artifacts"),
        (str(rules), "/srv/rules"),
        (str(conf), "/srv/gwms-test"),
    ]
    with nspawn.booted(work, binds_ro=binds_ro) as ct:
        t_boot = time.monotonic()
        sink = ct.spawn_in_netns([sys.executable, "-c", SINK, str(mails), "1800"], work / "smtp.log")
        try:
            port = wait_for("SMTP sink port", lambda: Path(f"{mails}.port").read_text().strip(), timeout=30)
            (conf / "vars.yml").write_text(
                yaml.safe_dump(
                    {
                        **test_vars,
                        "ansible_connection": "local",
                        "ansible_python_interpreter": "/usr/bin/python3",
                        "ansible_become": False,
                        "otel_collector_artifact_dir": "/srv/artifacts",
                        "jaeger_artifact_dir": "/srv/artifacts",
                        "gwms_exporter_artifact_dir": "/srv/artifacts",
                        "gwms_exporter_interval": 5,
                        "gwms_exporter_settle_seconds": 0,
                        "prometheus_rules_src_dir": "/srv/rules",
                        "prometheus_rule_files": [
                            "rules/gwms-recording.rules.yml",
                            "rules/gwms-alerts.rules.yml",
                            f"rules/{TEST_RULES}",
                        ],
                        "prometheus_scrape_interval": "2s",
                        "prometheus_evaluation_interval": "2s",
                        "prometheus_extra_flags": ["--rules.alert.resend-delay=1s"],
                        "alertmanager_smtp_smarthost": f"127.0.0.1:{port}",
                        "alertmanager_factory_ops_emails": [OPS_MAIL],
                        "alertmanager_group_wait": "1s",
                        "alertmanager_group_interval": "5s",
                        "grafana_server_enabled": False,
                    }
                )
            )
            # a factory tree readable only by the factory's group
            ct.exec("apt-get", "update", "-q")  # a configured host has its package lists
            ct.exec("groupadd", "--system", "gfactory")
            simulate(ct.root / "var/log/gwms-factory", PILOTS, seed=7)
            ct.exec("chgrp", "-R", "gfactory", "/var/log/gwms-factory")
            ct.exec("chmod", "-R", "u=rwX,g=rX,o=", "/var/log/gwms-factory")
            h = Host(ct, work, rules, mails)
            h.timings.update(cache=t_cache - t0, artifacts=t_arts - t_cache, boot=t_boot - t_arts)
            t = time.monotonic()
            h.runs["check"] = h.playbook("--check")
            h.timings["check_mode"] = time.monotonic() - t
            t = time.monotonic()
            h.runs["first"] = h.playbook()
            h.timings["first_run"] = time.monotonic() - t
            t = time.monotonic()
            h.runs["second"] = h.playbook()
            h.timings["second_run"] = time.monotonic() - t
            yield h
            h.timings["total"] = time.monotonic() - t0
            summary = json.dumps({k: round(v, 1) for k, v in h.timings.items()})
            print(f"\ndeploy test timings (s): {summary}")
            (ROOT / "build").mkdir(exist_ok=True)
            (ROOT / "build" / "deploy-nspawn-timings.json").write_text(summary + "\n")
        finally:
            nspawn.stop(sink)


def _ok(run: subprocess.CompletedProcess[str]) -> dict[str, int]:
    assert run.returncode == 0, (
        f"ansible-playbook failed ({run.returncode}):\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
    )
    return _recap(run.stdout)


def test_check_mode_on_a_fresh_host(host: Host) -> None:
    recap = _ok(host.runs["check"])
    assert recap["failed"] == 0 and recap["changed"] > 0


def test_deploys_everything(host: Host) -> None:
    recap = _ok(host.runs["first"])
    assert recap["failed"] == 0 and recap["changed"] > 0


def test_second_run_changes_nothing(host: Host) -> None:
    recap = _ok(host.runs["second"])
    assert recap["changed"] == 0, host.runs["second"].stdout[-6000:]


def test_every_service_active_and_healthy(host: Host) -> None:
    for unit, url in SERVICES.items():
        assert host.active(unit) == "active", host.ct.exec("journalctl", "-u", unit, "-n", "30", check=False).stdout
        assert host.ct.exec("systemctl", "is-enabled", unit).stdout.strip() == "enabled"
        # not a restart loop that happens to be up right now
        assert host.ct.exec("systemctl", "show", "-p", "NRestarts", "--value", unit).stdout.strip() == "0", unit
        assert host.ct.http_get(url)  # the play itself waited for it to answer


def test_grafana_server(host: Host) -> None:
    pytest.skip(GRAFANA_SKIP)  # reported, not hidden: the one component not running here


def test_services_run_as_their_own_unprivileged_users(host: Host) -> None:
    users = {}
    for unit in SERVICES:
        show = host.ct.exec("systemctl", "show", unit, "-p", "User", "-p", "MainPID", "-p", "ProtectSystem").stdout
        props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
        assert props["ProtectSystem"] == "strict", unit
        # who the running process really is (the container has no ps)
        owner = host.ct.exec("stat", "-c", "%U", f"/proc/{props['MainPID']}").stdout.strip()
        assert owner == props["User"] and owner not in ("", "root"), (unit, owner, props)
        users[unit] = props["User"]
    assert len(set(users.values())) == len(users), users


def test_exporter_reads_the_factory_and_prometheus_holds_its_metrics(host: Host) -> None:
    # the tree is o= (no access for others): the exporter reads it through the factory group
    assert host.ct.exec("stat", "-c", "%a %G", "/var/log/gwms-factory").stdout.split() == ["750", "gfactory"]
    assert "gfactory" in host.ct.exec("id", "-nG", "gwms-obs").stdout.split()

    def exported() -> float:
        text = host.ct.http_get(SERVICES["gwms-obs-exporter"])
        return sum(float(v) for v in re.findall(r"^gwms_pilots_total\{[^}]*\} (\S+)$", text, re.M))

    pilots = wait_for("the exporter's first scan", exported, timeout=60)
    assert pilots > 0

    def scraped() -> float:
        r = host.query("sum(gwms_pilots_total)")
        return float(r[0]["value"][1]) if r else 0.0

    def same() -> bool:
        return scraped() == pilots

    assert wait_for("Prometheus to hold the exporter's gwms_pilots_total", same, timeout=60)
    up = host.query('up{job="gwms-obs"}')
    assert up and up[0]["value"][1] == "1"


def test_rules_and_dashboards_in_place(host: Host) -> None:
    rules = json.loads(host.ct.http_get("http://127.0.0.1:9090/api/v1/rules"))["data"]["groups"]
    names = {g["name"] for g in rules}
    for f in (ROOT / "dashboards" / "rules").glob("*.rules.yml"):
        for g in yaml.safe_load(f.read_text())["groups"]:
            assert g["name"] in names
    for f in sorted((ROOT / "dashboards" / "grafana").glob("*.json")):
        installed = host.ct.root / "var/lib/grafana/dashboards/gwms-obs" / f.name
        assert installed.read_bytes() == f.read_bytes(), f.name
    assert (host.ct.root / "etc/grafana/provisioning/datasources/gwms-obs.yml").exists()
    assert (host.ct.root / "etc/grafana/provisioning/dashboards/gwms-obs.yml").exists()


def test_an_alert_mail_leaves_through_smtp(host: Host) -> None:
    def mail() -> list[dict[str, Any]]:
        return [m for m in json.loads(host.mails.read_text()) if "GwmsDeployTestAlwaysFiring" in m["subject"]]

    got = wait_for("the alert mail in the SMTP sink", mail, timeout=90, step=0.5)
    assert got[0]["rcpt_tos"] == [OPS_MAIL]


def test_a_stopped_service_is_brought_back(host: Host) -> None:
    for unit in ("gwms-obs-exporter", "prometheus"):
        host.ct.exec("systemctl", "stop", unit)
        assert host.active(unit) != "active"
    t = time.monotonic()
    recap = _ok(host.playbook())
    host.timings["repair_run"] = time.monotonic() - t
    assert recap["changed"] == 2
    for unit in ("gwms-obs-exporter", "prometheus"):
        assert host.active(unit) == "active"
    wait_for("Prometheus ready again", lambda: host.ct.http_get(SERVICES["prometheus"]), timeout=30)


def test_a_broken_rule_file_never_reaches_prometheus(host: Host) -> None:
    deployed = host.ct.root / "etc/prometheus/rules" / TEST_RULES
    before = deployed.read_bytes()
    pid = host.ct.exec("systemctl", "show", "-p", "MainPID", "--value", "prometheus").stdout.strip()
    src = host.rules / TEST_RULES
    good = src.read_text()
    src.write_text(good.replace("expr: vector(1)", "expr: sum(rate(x[5m])"))  # unclosed parenthesis
    try:
        run = host.playbook()
        assert run.returncode != 0
        assert "failed to validate" in run.stdout, run.stdout[-4000:]
    finally:
        src.write_text(good)
    assert deployed.read_bytes() == before
    assert host.active("prometheus") == "active"
    assert host.ct.exec("systemctl", "show", "-p", "MainPID", "--value", "prometheus").stdout.strip() == pid
    groups = json.loads(host.ct.http_get("http://127.0.0.1:9090/api/v1/rules"))["data"]["groups"]
    rule = next(r for g in groups if g["name"] == "gwms-deploy-test" for r in g["rules"])
    assert rule["query"] == "vector(1)"
