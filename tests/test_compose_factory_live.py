"""The laptop stack with its own simulated factory, as `make compose-up` starts it (issue 31).

tests/test_compose_stack_live.py replaces the exporter's factory with a
scenario's; here the exporter runs the stack's own command, so the factory is
the one `gwms-obs simulate --end now` writes when the stack starts. Only
Prometheus's scrape and evaluation intervals are shortened (1 s, the stack's
own rules): a stale entry would have its GwmsEntryInfoStale pending at the
first evaluation after the first scrape. Shown: every entry's status is fresh
and no GwmsEntryInfoStale is pending or firing at start, and Jaeger's API
holds the compose factory's pilot traces (sent by the exporter through the
collector), with the factory's times, ending when the stack started.
"""

from __future__ import annotations

import html
import http.cookiejar
import json
import re
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from gwms_obs import catalogue
from gwms_obs.config import load
from gwms_obs.outputs import pilot_traces as P
from gwms_obs.simulate.scenario import DEFAULT_ENTRIES
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import jaeger as J
from tests.support.servers import first_scan_done, prom_query
from tests.test_compose_stack_live import PORTS, _docker, engine  # noqa: F401 - engine: the fixture
from tools import compose, docker_engine, images, render
from tools.polling import http_get
from tools.polling import poll as wait_for
from tools.tracing_backends import free_port

pytestmark = pytest.mark.live
ROOT = Path(__file__).resolve().parents[1]
PROJECT = "gwms-obs-test-factory"
STALE = "GwmsEntryInfoStale"
SPAN_HOURS = 48 + 3  # simulate's default span and tail: the factory's first submission before its end


@dataclass
class Laptop:
    url: dict[str, str]
    started: float  # just before `docker compose up`


def _prometheus_override(work: Path) -> Path:
    """The stack's prometheus.yml and rules, scraped and evaluated every second."""
    stack_vars = {c.role: c.vars for c in compose.components()}
    cfg = render.render(
        "prometheus",
        "prometheus.yml.j2",
        **{**stack_vars["prometheus"], "prometheus_scrape_interval": "1s", "prometheus_evaluation_interval": "1s"},
    )
    (work / "prometheus.yml").write_text(cfg)
    (work / "prometheus.yml").chmod(0o644)
    work.chmod(0o755)
    doc = {"services": {"prometheus": {"volumes": [f"{work / 'prometheus.yml'}:/etc/prometheus/prometheus.yml:ro"]}}}
    path = work / "test-override.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def laptop(engine: docker_engine.Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Laptop]:  # noqa: F811
    from testcontainers.compose import DockerCompose

    work = tmp_path_factory.mktemp("compose-factory")
    built = images.build(work / "images.log", say=lambda s: None)
    ports = {name: free_port() for name in PORTS}
    env_file = work / "stack.env"
    env_file.write_text(
        images.env_file_text(built) + "".join(f"GWMS_OBS_PORT_{n.upper()}={p}\n" for n, p in ports.items())
    )
    override = _prometheus_override(work)
    dc = DockerCompose(
        ROOT / "compose",
        compose_file_name=[Path(compose.COMPOSE_FILE).name, Path(compose.OFFLINE_FILE).name, str(override)],
        env_file=str(env_file),
        wait=True,
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COMPOSE_PROJECT_NAME", PROJECT)  # apart from test_compose_stack_live's stack
        started = time.time()
        try:
            try:
                dc.start()
            except subprocess.CalledProcessError as e:
                pytest.fail(f"docker compose up: {(e.stderr or b'').decode(errors='replace')[-3000:]}")
            url = {n: f"http://127.0.0.1:{p}" for n, p in ports.items()}
            wait_for("the exporter's first scan", lambda: first_scan_done(http_get(f"{url['exporter']}/metrics")), 300)
            yield Laptop(url, started)
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


def _stale_rule(prometheus: str) -> dict[str, Any]:
    doc = json.loads(http_get(f"{prometheus}/api/v1/rules?type=alert"))
    rules = [r for g in doc["data"]["groups"] for r in g["rules"] if r["name"] == STALE]
    assert len(rules) == 1, [g["name"] for g in doc["data"]["groups"]]
    rule: dict[str, Any] = rules[0]
    return rule


def test_no_entry_is_stale_at_start(laptop: Laptop) -> None:
    prom = laptop.url["prometheus"]
    updated = f"max by (entry, site) ({catalogue.ENTRY_UPDATED.name})"
    n = len(DEFAULT_ENTRIES)
    wait_for("every entry's status in Prometheus", lambda: len(prom_query(prom, updated)) == n, 120)
    # Evaluated since every entry's status was scraped: a stale entry would be pending by now.
    seen = time.time()
    wait_for(
        f"{STALE} evaluated twice more",
        lambda: datetime.fromisoformat(_stale_rule(prom)["lastEvaluation"]).timestamp() > seen + 2,
        60,
        step=0.5,
    )
    rule = _stale_rule(prom)
    assert rule["health"] == "ok" and rule["state"] == "inactive", rule
    alerts = json.loads(http_get(f"{prom}/api/v1/alerts"))["data"]["alerts"]
    assert [a for a in alerts if a["labels"]["alertname"] == STALE] == []
    # Fresh because the factory's files end when the stack started, not in June 2026.
    for r in prom_query(prom, updated):
        assert laptop.started - 5 <= float(r["value"][1]) <= time.time(), r


def test_jaeger_holds_the_compose_factorys_pilot_traces(laptop: Laptop) -> None:
    jaeger = laptop.url["jaeger"]

    def traces() -> list[dict[str, Any]]:
        found = J.search(jaeger, start=laptop.started - 3 * 86400, end=time.time() + 3600, limit=200)
        return found if len(found) >= 100 else []

    found = wait_for("the factory's pilot traces in Jaeger", traces, 300, step=2.0)
    # The stack names its factory (exporter.toml's factory_name, the `factory` label of its Prometheus)
    factory = load(str(ROOT / "compose/config/exporter.toml")).factory_name
    assert factory
    first_submit = laptop.started - SPAN_HOURS * 3600 - 60
    for t in found:
        roots = [s for s in t["spans"] if s["operationName"] == C.SPAN_PILOT]
        assert len(roots) == 1, t["traceID"]
        tags = {x["key"]: x["value"] for x in t["processes"][roots[0]["processID"]]["tags"]}
        assert tags[C.FACTORY] == factory and tags[P.TRACE_SOURCE], tags
        start = roots[0]["startTime"] / 1e6
        end = start + roots[0]["duration"] / 1e6
        # The factory's times: its 51 hours, ending when the stack started
        assert first_submit <= start and end <= time.time(), (t["traceID"], start, end)
    ids = [t["traceID"] for t in found]
    assert len(set(ids)) == len(ids)

    # One pilot's page, where the README's table says (the controller reads the stack's Jaeger).
    pilot = found[0]
    root = next(s for s in pilot["spans"] if s["operationName"] == C.SPAN_PILOT)
    tags = {x["key"]: x["value"] for x in pilot["processes"][root["processID"]]["tags"]}
    page = _pilot_page(laptop.url["controller"], pilot["traceID"])
    assert tags[C.ENTRY] in page and f"{tags[C.CONDOR_CLUSTER]}.{tags[C.CONDOR_PROC]}" in page, page[:2000]


def _pilot_page(controller: str, trace_id: str) -> str:
    """/pilots/<trace id> as a browser gets it: the login page with the development operator token, then the page."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    next_path = f"/pilots/{trace_id}"
    with opener.open(f"{controller}/login?next={next_path}", timeout=10) as r:
        csrf = re.search(r'name="csrf" value="([^"]+)"', r.read().decode())
    assert csrf
    form = {"csrf": csrf.group(1), "token": compose.controller_dev_tokens()["operator"], "next": next_path}
    with opener.open(f"{controller}/login", urllib.parse.urlencode(form).encode(), timeout=30) as r:
        assert r.status == 200 and r.url.endswith(next_path), r.url  # redirected back to the pilot's page
        return html.unescape(r.read().decode())
