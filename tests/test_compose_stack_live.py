"""The compose stack in containers, driven as a user drives it: `docker compose up --wait`.

Offline variant (compose/docker-compose.offline.yml, images from tools/images.py)
on a Docker engine we find or start (tools/docker_engine.py), through
testcontainers' DockerCompose (its reaper is an image too, so it is disabled
and the stack is taken down explicitly). A test override only does what the
live tests outside containers do: the scenario's factory (a bind mount the
test writes into), seconds instead of hours in the rules and Alertmanager,
the scenario's site contacts, free ports. The same checks as there: the
exporter in its container read by Prometheus in its with our rules, every
dashboard query with data, one site going bad mailing exactly its admin
(firing, then resolved) at the mail sink, a pilot's spans through the
collector into Jaeger, the collector refusing a request without the token,
and `down -v` leaving nothing behind. Grafana is not started here (no image
without a registry); tests/test_grafana_container.py covers it where one exists.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards.gen import alerting, config, rulefiles, rules
from gwms_obs import catalogue
from gwms_obs.tracing import conventions as C
from tests.support import alert_scenario as S
from tests.support.otlp_spans import complete_trace, pilot_trace
from tests.support.servers import first_scan_done, free_port, http_get, prom_query, prom_value, wait_for
from tools import compose, docker_engine, images, render, tracing_backends
from tools.mailsink import Mail

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parents[1]
PROJECT = "gwms-obs-test"
PORTS = (
    *("prometheus", "alertmanager", "mail", "exporter", "jaeger", "otlp_http", "otlp_grpc", "grafana", "controller"),
    "thanos_query",
)


@dataclass
class Stack:
    url: dict[str, str]  # service -> http://127.0.0.1:port
    factory: Path
    held: Path
    compose: Any  # testcontainers DockerCompose

    def mails(self) -> list[Mail]:
        doc = json.loads(http_get(f"{self.url['mail']}/api/v1/messages"))
        out = []
        for m in doc["messages"]:
            full = json.loads(http_get(f"{self.url['mail']}/api/v1/message/{m['ID']}"))
            out.append(Mail(tuple(a["Address"] for a in full["To"]), full["Subject"], full["Text"]))
        return out


def _docker(*args: str) -> str:
    r = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, f"docker {' '.join(args)}: {r.stderr}"
    return r.stdout


def _override(work: Path) -> Path:
    """Only what the live test outside containers also sets; everything else is the stack's own."""
    rules_dir = work / "rules"
    rules_dir.mkdir()
    (rules_dir / "rec.yml").write_text(rulefiles.recording_yaml(config.Config(timing=S.FAST)))
    (rules_dir / "alerts.yml").write_text(rulefiles.alerts_yaml(config.Config(timing=S.FAST)))
    stack_vars = {c.role: c.vars for c in compose.components()}
    prom_cfg = render.render(
        "prometheus",
        "prometheus.yml.j2",
        **{
            **stack_vars["prometheus"],
            "prometheus_scrape_interval": "1s",
            "prometheus_evaluation_interval": "1s",
            "prometheus_rule_files": ["/rules/rec.yml", "/rules/alerts.yml"],
        },
    )
    (work / "prometheus.yml").write_text(prom_cfg)
    am_cfg = render.render(
        "alertmanager",
        "alertmanager.yml.j2",
        **{**stack_vars["alertmanager"], **alerting.alertmanager_vars(S.CONTACTS), **S.FAST_ALERTMANAGER},
    )
    (work / "alertmanager.yml").write_text(am_cfg)
    for f in (work / "prometheus.yml", work / "alertmanager.yml"):
        f.chmod(0o644)  # read by the containers' unprivileged users
    for d in (work, rules_dir):
        d.chmod(0o755)
    export = [
        "gwms-obs", "export", "--factory-dir", "/factory", "--listen", "0.0.0.0:9822", "--interval", "1",
        "--settle-seconds", "0", "--lost-after-seconds", "1000000000", "--checkpoint", "/state/checkpoint.json",
    ]  # fmt: skip
    doc = {
        "services": {
            "exporter": {"command": export, "volumes": [f"{work / 'factory'}:/factory:ro"]},
            "prometheus": {
                "volumes": [f"{work / 'prometheus.yml'}:/etc/prometheus/prometheus.yml:ro", f"{rules_dir}:/rules:ro"]
            },
            "alertmanager": {"volumes": [f"{work / 'alertmanager.yml'}:/etc/alertmanager/alertmanager.yml:ro"]},
        }
    }
    path = work / "test-override.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[docker_engine.Engine]:
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    with docker_engine.engine(log) as e, pytest.MonkeyPatch.context() as mp:
        for k, v in e.env().items():
            mp.setenv(k, v)
        mp.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")  # the reaper is an image; we clean up ourselves
        mp.setenv("COMPOSE_PROJECT_NAME", PROJECT)
        r = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30, check=False)
        assert r.returncode == 0, f"docker compose v2 missing (make compose-plugin): {r.stderr}"
        yield e


@pytest.fixture(scope="module")
def stack(engine: docker_engine.Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from testcontainers.compose import DockerCompose

    work = tmp_path_factory.mktemp("compose")
    built = images.build(work / "images.log", say=lambda s: None)
    ports = {name: free_port() for name in PORTS}
    env_file = work / "stack.env"
    env_file.write_text(
        images.env_file_text(built) + "".join(f"GWMS_OBS_PORT_{n.upper()}={p}\n" for n, p in ports.items())
    )
    factory, held = S.make_factory(work)
    override = _override(work)
    dc = DockerCompose(
        ROOT / "compose",
        compose_file_name=[Path(compose.COMPOSE_FILE).name, Path(compose.OFFLINE_FILE).name, str(override)],
        env_file=str(env_file),
        wait=True,
    )
    try:
        dc.start()
        url = {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}
        url["otlp"] = f"{url.pop('otlp_http')}/v1/traces"
        wait_for("the exporter's first scan", lambda: first_scan_done(http_get(f"{url['exporter']}/metrics")), 120)
        yield Stack(url, factory, held, dc)
    finally:
        logs = subprocess.run(
            ["docker", "compose", "-p", PROJECT, "logs", "--no-color"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        (work / "compose.log").write_text(logs.stdout + logs.stderr)
        dc.stop(down=True)  # docker compose down -v
        assert _leftovers() == [], "docker compose down -v left these behind"


def _leftovers() -> list[str]:
    label = f"label=com.docker.compose.project={PROJECT}"
    out = []
    for kind in (["ps", "-a"], ["volume", "ls"], ["network", "ls"]):
        out += [f"{kind[0]} {x}" for x in _docker(*kind, "-q", "--filter", label).split()]
    return out


def test_every_service_is_healthy_unprivileged_read_only_and_on_loopback(stack: Stack) -> None:
    ids = _docker("ps", "-q", "--filter", f"label=com.docker.compose.project={PROJECT}").split()
    found = {}
    for c in json.loads(_docker("inspect", *ids)):
        name = c["Config"]["Labels"]["com.docker.compose.service"]
        found[name] = c
        assert c["State"]["Health"]["Status"] == "healthy", name
        assert c["Config"]["User"] not in ("", "0", "root", "0:0"), name
        assert c["HostConfig"]["ReadonlyRootfs"], name
        for bindings in (c["HostConfig"]["PortBindings"] or {}).values():
            assert all(b["HostIp"] == "127.0.0.1" for b in bindings), (name, bindings)
        assert not any("TOKEN" in e for e in c["Config"]["Env"] if name not in ("exporter", "otelcol")), name
    assert set(found) == {
        *("prometheus", "alertmanager", "mail", "exporter", "jaeger", "otelcol", "controller"),
        *("thanos-sidecar", "thanos-store", "thanos-query"),
    }
    # the image installs the compiled readers from its wheelhouse where they fit, as the Ansible role does
    version = _docker("exec", found["exporter"]["Id"], "gwms-obs", "--version")
    assert "(readers: native " in version, version


def test_a_pilots_spans_reach_jaeger_and_no_token_is_refused(stack: Stack) -> None:
    token = compose.DEV_TOKEN
    trace_id, body, names = pilot_trace("CMS_T2_US_Nebraska_compose")
    assert tracing_backends.post_otlp(stack.url["otlp"], body, None) == 401
    assert tracing_backends.post_otlp(stack.url["otlp"], body, "not-" + token) == 401
    assert tracing_backends.post_otlp(stack.url["otlp"], body, token) == 200
    spans = wait_for("the trace in Jaeger", lambda: complete_trace(stack.url["jaeger"], trace_id, len(names)), 60)
    assert sorted(s["operationName"] for s in spans) == sorted(names)
    # ...and its span metrics in Prometheus, remote-written by the collector (two flushes: a rate)
    calls = f'count_over_time({catalogue.SPANMETRICS_CALLS}{{service_name="{C.SERVICE_PILOT}"}}[1m]) >= 2'
    wait_for("the span metrics in Prometheus", lambda: prom_query(stack.url["prometheus"], calls), 90)


def test_bad_site_mails_exactly_its_admin_and_every_dashboard_query_has_data(stack: Stack) -> None:
    mail = S.site_fires(stack.url["prometheus"], stack.mails, stack.factory, stack.held)
    assert rules.RUNBOOK_BASE_URL.split("#")[0] in mail.body  # the stack's own runbook base
    # while it fires (the alert panels have data), with the collector's metrics expected too
    # Polled, bounded: a panel of span metrics rates them over 30 s, so it has data once the
    # collector has seen new spans of its phases in that window (the exporter sends them paced).
    empty: list[str] = []

    def all_have_data() -> bool:
        empty[:] = S.dashboard_queries_without_data(stack.url["prometheus"], collector=True)[0]
        return not empty

    with contextlib.suppress(TimeoutError):  # the assertion below names the queries still without data
        wait_for("every dashboard query with data", all_have_data, 90, 5)
    assert not empty, "queries without data:\n" + "\n".join(empty)
    S.site_resolves(stack.mails)


def test_the_thanos_query_serves_the_factory_with_its_labels(stack: Stack) -> None:
    """The laptop's factory through its sidecar and the global query: the factory label on, the replica off."""
    q = urllib.parse.urlencode({"query": f"sum by (factory, replica) ({catalogue.PILOTS.name})"})

    def answered() -> list[dict[str, Any]]:
        doc = json.loads(http_get(f"{stack.url['thanos_query']}/api/v1/query?{q}"))
        return list(doc["data"]["result"])

    res = wait_for("the exporter's pilots through the Thanos query", answered, 120, 1)
    assert [r["metric"] for r in res] == [{catalogue.FACTORY_LABEL: "laptop"}]
    local = prom_value(stack.url["prometheus"], f"sum({catalogue.PILOTS.name})")
    assert float(res[0]["value"][1]) == local > 0
    stores = json.loads(http_get(f"{stack.url['thanos_query']}/api/v1/stores"))["data"]
    assert {s["name"] for group in stores.values() for s in group if not s.get("lastError")} == {
        "thanos-sidecar:10901",
        "thanos-store:10905",
    }
