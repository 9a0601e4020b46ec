"""Many factories, one view: `ansible-playbook deploy.yml` on a factory host and a central Thanos host.

Two Debian hosts booted with systemd (systemd-nspawn -b, as in
test_deploy_nspawn.py), joined by a veth pair between their own network
namespaces (10.213.0.1 and .2; nothing else on this machine sees them), share
one FILESYSTEM bucket: a directory of this machine bind-mounted into both.
The inventory has the multi-factory shape (its group_vars copied unchanged;
hosts.yml names the two hosts): the factory host runs its whole stack
(exporter, collector, Prometheus, Alertmanager, Jaeger) and a Thanos sidecar
with mutual TLS on its StoreAPI; the central host runs the query, the store
gateway, the compactor and Grafana's provisioning (no Grafana server: no
Debian package). Ansible runs inside each host (connection local, --limit to
itself), both at once; a second run changes nothing on either.

Checked from outside: the query sees the sidecar and the store gateway
healthy, the factory's exporter metrics come through the global query with
the `factory` label (and without `replica`: deduplicated), a block written
into Prometheus's TSDB is shipped by the sidecar to the bucket and served by
the store gateway, and the sidecar's StoreAPI refuses a client without the
query's certificate.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from gwms_obs import catalogue
from gwms_obs.simulate.factory import simulate
from tests.support import nspawn, tls
from tools.polling import poll as wait_for

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE = ROOT / "ansible"
VENV = Path(sys.prefix)
PYTHON_HOME = Path(sys.base_prefix)
NETCLIENT = ROOT / "tests" / "support" / "netclient.py"

_why = nspawn.unavailable()
pytestmark = [
    pytest.mark.live,
    pytest.mark.nspawn,
    pytest.mark.slow,
    pytest.mark.skipif(_why is not None, reason=f"multi-factory deploy test needs systemd-nspawn hosts: {_why}"),
]

FACTORY, CENTRAL = "factory-a.test", "central.test"
FACTORY_IP, CENTRAL_IP = "10.213.0.1", "10.213.0.2"
GRPC_NAME = "thanos-store.test"  # gwms_thanos_grpc_server_name: the name in the StoreAPI certificate
LABELS = {catalogue.FACTORY_LABEL: "test-factory", catalogue.REPLICA_LABEL: "a"}
BUCKET = "/srv/thanos-bucket"
QUERY = "http://127.0.0.1:10904"  # thanos_query_http_address
SIDECAR_METRICS = "http://127.0.0.1:10902/metrics"  # thanos_sidecar_http_address
PILOTS = 120
UNITS = {
    FACTORY: {"prometheus": "prometheus", "thanos-sidecar": "prometheus", "gwms-obs-exporter": "gwms-obs"},
    CENTRAL: {"thanos-query": "thanos", "thanos-store": "thanos", "thanos-compact": "thanos"},
}


@dataclass
class Mesh:
    hosts: dict[str, nspawn.Container]
    work: Path
    pki: tls.Pki
    runs: dict[str, dict[str, subprocess.CompletedProcess[str]]] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def playbook(self, host: str) -> subprocess.CompletedProcess[str]:
        return self.hosts[host].exec(
            f"{VENV}/bin/ansible-playbook",
            "-i",
            "/srv/gwms-test/inv/hosts.yml",
            f"{ANSIBLE}/deploy.yml",
            "--limit",
            host,
            "-e",
            "@/srv/gwms-test/vars.yml",
            "-e",
            "@/srv/gwms-test/vault.yml",
            "--vault-password-file",
            "/srv/gwms-test/vault-pass",
            timeout=1200,
            check=False,
            env={"ANSIBLE_CONFIG": f"{ANSIBLE}/ansible.cfg", "ANSIBLE_FORCE_COLOR": "0", "HOME": "/root"},
        )

    def deploy(self, name: str) -> None:
        """Both hosts at once (each its own ansible-playbook), the run's duration recorded."""
        t = time.monotonic()
        with ThreadPoolExecutor(2) as pool:
            futures = {h: pool.submit(self.playbook, h) for h in self.hosts}
            self.runs[name] = {h: f.result() for h, f in futures.items()}
        self.timings[name] = time.monotonic() - t

    def query_api(self, path: str, **params: str) -> Any:
        url = f"{QUERY}{path}?{urllib.parse.urlencode(params)}"
        doc = json.loads(self.hosts[CENTRAL].http_get(url, timeout=15))
        assert doc["status"] == "success", doc
        return doc["data"]

    def stores(self) -> dict[str, list[dict[str, Any]]]:
        data: dict[str, list[dict[str, Any]]] = self.query_api("/api/v1/stores")
        return data


def _inventory(conf: Path) -> None:
    """The multi-factory inventory's group_vars unchanged; hosts.yml names this test's two hosts."""
    inv = conf / "inv"
    shutil.copytree(ANSIBLE / "inventories" / "multi-factory" / "group_vars", inv / "group_vars")
    (inv / "group_vars" / "all" / "vault.yml.example").unlink()
    hosts = {
        "all": {
            "children": {
                "factory": {"hosts": {FACTORY: {"prometheus_external_labels": LABELS}}},
                "monitoring": {"children": {"factory": None}},
                "thanos_central": {"hosts": {CENTRAL: None}},
            }
        }
    }
    (inv / "hosts.yml").write_text(yaml.safe_dump(hosts))


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    t0 = time.monotonic()
    work = tmp_path_factory.mktemp("deploy-multi")
    log = work / "nspawn-build.log"
    nspawn.rootfs_tarball(log)
    nspawn.deb_repo(log)
    t_cache = time.monotonic()
    arts = work / "artifacts"
    test_vars = nspawn.artifacts(arts, ("otelcol", "jaeger", "thanos"))
    t_arts = time.monotonic()

    pki = tls.make_pki(work / "pki", GRPC_NAME, FACTORY_IP)
    conf = work / "conf"
    conf.mkdir()
    (conf / "vault-pass").write_text("gwms-obs-multi-factory-test-vault-pass\n")
    seed = hashlib.sha256(str(work).encode()).hexdigest()
    (conf / "vault.yml").write_text(
        yaml.safe_dump(
            {
                "vault_grafana_admin_password": seed[:24],
                "vault_otel_collector_pilot_tokens": [seed[24:56]],
                # the inventory's S3 key pair (unused here: the test's bucket is FILESYSTEM)
                "vault_thanos_s3_access_key": "gwms-thanos-test",
                "vault_thanos_s3_secret_key": seed[:32],
                "vault_thanos_grpc_tls_ca": pki.ca,
                "vault_thanos_grpc_tls_cert": pki.server_cert,
                "vault_thanos_grpc_tls_key": pki.server_key,
                "vault_thanos_grpc_tls_client_cert": pki.client_cert,
                "vault_thanos_grpc_tls_client_key": pki.client_key,
                # Grafana's HTTPS on the central host (its server is not run here)
                "vault_gwms_central_tls_cert": pki.server_cert,
                "vault_gwms_central_tls_key": pki.server_key,
            }
        )
    )
    nspawn.encrypt(conf / "vault-pass", conf / "vault.yml")
    (conf / "vars.yml").write_text(
        yaml.safe_dump(
            {
                **test_vars,
                "ansible_connection": "local",
                "ansible_python_interpreter": "/usr/bin/python3",
                "ansible_become": False,
                "gwms_artifacts_dir": "/srv/artifacts",
                "gwms_exporter_interval": 5,
                "gwms_exporter_settle_seconds": 0,
                "prometheus_scrape_interval": "2s",
                "prometheus_evaluation_interval": "2s",
                "grafana_server_enabled": False,
                # one directory of this machine in both hosts: FILESYSTEM, one thanos gid on both
                "thanos_objstore_type": "FILESYSTEM",
                "thanos_objstore_directory": BUCKET,
                "thanos_gid": 2713,
                "thanos_store_sync_block_duration": "5s",
                "gwms_thanos_grpc_server_name": GRPC_NAME,
            }
        )
    )
    _inventory(conf)
    bucket = work / "bucket"
    bucket.mkdir()

    binds_ro = [
        (str(PYTHON_HOME), str(PYTHON_HOME)),
        (str(VENV), str(VENV)),
        (str(ROOT), str(ROOT)),
        (str(arts), "/srv/artifacts"),
        (str(conf), "/srv/gwms-test"),
    ]
    with contextlib.ExitStack() as stack:
        hosts = {
            name: stack.enter_context(nspawn.booted(work / name, binds_ro=binds_ro, binds=[(str(bucket), BUCKET)]))
            for name in (FACTORY, CENTRAL)
        }
        t_boot = time.monotonic()
        stack.enter_context(nspawn.linked(hosts[FACTORY], hosts[CENTRAL], FACTORY_IP, CENTRAL_IP))
        for ct in hosts.values():
            ct.exec("sh", "-c", f"printf '%s\\n' '{FACTORY_IP} {FACTORY}' '{CENTRAL_IP} {CENTRAL}' >> /etc/hosts")
        fct = hosts[FACTORY]
        fct.exec("apt-get", "update", "-q")  # a configured host has its package lists
        # a factory tree readable only by the factory's group
        fct.exec("groupadd", "--system", "gfactory")
        simulate(fct.root / "var/log/gwms-factory", PILOTS, seed=11)
        fct.exec("chgrp", "-R", "gfactory", "/var/log/gwms-factory")
        fct.exec("chmod", "-R", "u=rwX,g=rX,o=", "/var/log/gwms-factory")
        m = Mesh(hosts, work, pki)
        m.timings.update(cache=t_cache - t0, artifacts=t_arts - t_cache, boot=t_boot - t_arts)
        m.deploy("first_run")
        m.deploy("second_run")
        yield m
        m.timings["total"] = time.monotonic() - t0
        summary = json.dumps({k: round(v, 1) for k, v in m.timings.items()})
        print(f"\nmulti-factory deploy test timings (s): {summary}")
        (ROOT / "build").mkdir(exist_ok=True)
        (ROOT / "build" / "deploy-nspawn-multi-timings.json").write_text(summary + "\n")


def _ok(run: subprocess.CompletedProcess[str], host: str) -> dict[str, int]:
    assert run.returncode == 0, (
        f"ansible-playbook on {host} failed ({run.returncode}):\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
    )
    return nspawn.recap(run.stdout, host)


def test_both_hosts_deploy_and_a_second_run_changes_nothing(mesh: Mesh) -> None:
    for host in mesh.hosts:
        assert _ok(mesh.runs["first_run"][host], host)["changed"] > 0
        recap = _ok(mesh.runs["second_run"][host], host)
        assert recap["changed"] == 0, mesh.runs["second_run"][host].stdout[-6000:]


def test_each_host_runs_its_components_as_their_users(mesh: Mesh) -> None:
    for host, units in UNITS.items():
        ct = mesh.hosts[host]
        for unit, user in units.items():
            show = ct.exec("systemctl", "show", unit, "-p", "ActiveState", "-p", "NRestarts", "-p", "MainPID").stdout
            props = dict(line.split("=", 1) for line in show.splitlines() if "=" in line)
            journal = ct.exec("journalctl", "-u", unit, "-n", "30", check=False).stdout
            assert props["ActiveState"] == "active" and props["NRestarts"] == "0", f"{host} {unit} {props}:\n{journal}"
            assert ct.exec("stat", "-c", "%U", f"/proc/{props['MainPID']}").stdout.strip() == user, (host, unit)
    # no sidecar on the central host, no central component on the factory host
    assert not (mesh.hosts[CENTRAL].root / "etc/systemd/system/thanos-sidecar.service").exists()
    assert not (mesh.hosts[FACTORY].root / "etc/systemd/system/thanos-query.service").exists()
    # Prometheus beside the sidecar: 2h blocks, no local compaction
    pid = mesh.hosts[FACTORY].exec("systemctl", "show", "-p", "MainPID", "--value", "prometheus").stdout.strip()
    argv = mesh.hosts[FACTORY].exec("cat", f"/proc/{pid}/cmdline").stdout.split("\0")
    assert {"--storage.tsdb.min-block-duration=2h", "--storage.tsdb.max-block-duration=2h"} <= set(argv), argv


def test_the_query_sees_the_sidecar_and_the_store_gateway_healthy(mesh: Mesh) -> None:
    def healthy() -> dict[str, list[dict[str, Any]]] | None:
        s = mesh.stores()
        ok = all(any(e["lastError"] is None for e in s.get(kind) or []) for kind in ("sidecar", "store"))
        return s if ok else None

    stores = wait_for("the sidecar and the store gateway healthy in /api/v1/stores", healthy, timeout=120, step=2)
    (sidecar,) = stores["sidecar"]
    assert sidecar["name"] == f"{FACTORY}:10901"  # over mutual TLS, by the inventory's host name
    assert LABELS in sidecar["labelSets"], sidecar
    assert [e["name"] for e in stores["store"]] == ["127.0.0.1:10905"]


def test_the_global_query_returns_the_factorys_metrics_with_its_factory_label(mesh: Mesh) -> None:
    fct = mesh.hosts[FACTORY]

    def local() -> float:
        doc = json.loads(fct.http_get("http://127.0.0.1:9090/api/v1/query?query=sum(gwms_pilots_total)"))
        r = doc["data"]["result"]
        return float(r[0]["value"][1]) if r else 0.0

    pilots = wait_for("the factory's Prometheus to hold the exporter's pilots", local, timeout=120, step=1)
    expr = f"sum by ({catalogue.FACTORY_LABEL}, {catalogue.REPLICA_LABEL}) (gwms_pilots_total)"

    def through_the_query() -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = mesh.query_api("/api/v1/query", query=expr)["result"]
        return result

    got = wait_for("the exporter's metrics through the global query", through_the_query, timeout=120, step=2)
    # deduplicated: the replica label is gone, the factory label is there
    assert [r["metric"] for r in got] == [{catalogue.FACTORY_LABEL: "test-factory"}], got
    assert float(got[0]["value"][1]) == pilots
    raw = mesh.query_api("/api/v1/query", query=expr, dedup="false")["result"]
    assert [r["metric"] for r in raw] == [LABELS], raw


OPENMETRICS_PROBE = "gwms_thanos_probe"


def _probe_block(fct: nspawn.Container, t_end: int) -> None:
    """A TSDB block of one series an hour long, written beside Prometheus's (as a backfill would)."""
    lines = [f"# TYPE {OPENMETRICS_PROBE} gauge"]
    lines += [f'{OPENMETRICS_PROBE}{{probe="ship"}} 42 {t}' for t in range(t_end - 3600, t_end, 60)]
    # beside the TSDB, on its filesystem (the container's /tmp is a tmpfs): the blocks move in by a rename
    stage = "/var/lib/prometheus/gwms-probe"
    fct.exec("rm", "-rf", stage)
    fct.exec("mkdir", stage)
    (fct.root / stage.lstrip("/") / "probe.om").write_text("\n".join([*lines, "# EOF", ""]))
    fct.exec("promtool", "tsdb", "create-blocks-from", "openmetrics", f"{stage}/probe.om", f"{stage}/blocks")
    # Prometheus's own files: the sidecar (its user) hard-links them before the upload
    fct.exec("chown", "-R", "prometheus:prometheus", f"{stage}/blocks")
    fct.exec("sh", "-c", f"mv {stage}/blocks/* /var/lib/prometheus/metrics2/ && rm -rf {stage}")


def test_the_sidecar_ships_a_block_and_the_store_gateway_serves_it(mesh: Mesh) -> None:
    fct = mesh.hosts[FACTORY]
    # the shipper runs with its bucket: a sync has happened, none failed
    metrics = fct.http_get(SIDECAR_METRICS)
    assert re.search(r"^thanos_shipper_dir_sync_failures_total 0$", metrics, re.M), metrics[-2000:]
    t_end = int(time.time()) - 3 * 3600
    _probe_block(fct, t_end)

    def shipped() -> list[dict[str, Any]]:
        metas = [json.loads(p.read_text()) for p in (mesh.work / "bucket").glob("*/meta.json")]
        return [m for m in metas if m.get("thanos", {}).get("labels") == LABELS]

    metas = wait_for("the sidecar to upload the block to the shared bucket", shipped, timeout=120, step=2)
    assert all(m["thanos"]["source"] == "sidecar" for m in metas), metas
    shipper = fct.http_get(SIDECAR_METRICS)
    assert re.search(r"^thanos_shipper_uploads_total [1-9]", shipper, re.M), shipper[-2000:]

    def served_by_the_store() -> list[dict[str, Any]]:
        # storeMatch: only the store gateway answers (Prometheus may have loaded the block too)
        result: list[dict[str, Any]] = mesh.query_api(
            "/api/v1/query",
            query=OPENMETRICS_PROBE,
            time=str(t_end - 600),
            **{"storeMatch[]": '{__address__="127.0.0.1:10905"}'},
        )["result"]
        return result

    got = wait_for("the store gateway to serve the shipped block", served_by_the_store, timeout=120, step=2)
    assert [(r["metric"], r["value"][1]) for r in got] == [
        ({"__name__": OPENMETRICS_PROBE, "probe": "ship", catalogue.FACTORY_LABEL: "test-factory"}, "42")
    ], got


def test_the_sidecars_storeapi_wants_the_querys_client_certificate(mesh: Mesh) -> None:
    central = mesh.hosts[CENTRAL]

    def h2(**kw: Any) -> dict[str, Any]:
        req = {"host": FACTORY_IP, "port": 10901, "server_name": GRPC_NAME, "ca": str(mesh.pki.path("ca")), "h2": True}
        r = central.netns(sys.executable, str(NETCLIENT), json.dumps({**req, **kw}))
        assert r.returncode == 0, r.stderr
        out: dict[str, Any] = json.loads(r.stdout)
        return out

    # from the central host's network (this machine's netclient: by address, the name checked is GRPC_NAME)
    refused = h2()
    assert not refused["h2"] and "CERTIFICATE_REQUIRED" in refused["error"], refused
    rogue = h2(cert=str(mesh.pki.path("rogue_cert")), key=str(mesh.pki.path("rogue_key")))
    assert not rogue["h2"] and "UNKNOWN_CA" in rogue["error"], rogue
    ok = h2(cert=str(mesh.pki.path("client_cert")), key=str(mesh.pki.path("client_key")))
    assert ok["h2"], ok


def test_central_grafana_reads_the_global_query(mesh: Mesh) -> None:
    path = mesh.hosts[CENTRAL].root / "etc/grafana/provisioning/datasources/gwms-obs.yml"
    prom = next(d for d in yaml.safe_load(path.read_text())["datasources"] if d["type"] == "prometheus")
    assert prom["url"] == QUERY and prom["uid"] == "gwms-obs-prometheus"
    assert "basicAuth" not in prom and "secureJsonData" not in prom
