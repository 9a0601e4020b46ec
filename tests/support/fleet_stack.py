"""A simulated factory of many entries, its exporter and a real Prometheus with our rules.

Shared by tests/test_dashboards_scale_live.py (the series budgets) and
benchmarks/dashboards.py (what the dashboards cost at that scale).
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dashboards.gen import board as B
from dashboards.gen import lint, rules
from dashboards.gen import names as N
from gwms_obs import catalogue
from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import fleet
from tests.support import alert_scenario as S
from tests.support.servers import (
    export_command,
    first_scan_done,
    free_port,
    http_get,
    process,
    prom_query,
    prometheus,
    wait_for,
)
from tools.render import render

SITES_PER_ENTRY = 5
# Grafana's macros as the panels' queries are run here: a 2-minute dashboard, 5 s steps.
RATE_INTERVAL, RANGE, RANGE_SECONDS, STEP = "30s", "2m", 120, 5


@dataclass(frozen=True)
class FleetStack:
    prometheus: str  # base URL
    exporter: str  # /metrics URL
    entries: int


def value(url: str, expr: str) -> float:
    res: list[dict[str, Any]] = prom_query(url, expr)
    return float(res[0]["value"][1]) if res else 0.0


def range_query(url: str, expr: str, seconds: int = RANGE_SECONDS) -> list[dict[str, Any]]:
    now = time.time()
    q = urllib.parse.urlencode({"query": expr, "start": now - seconds, "end": now, "step": STEP})
    doc = json.loads(http_get(f"{url}/api/v1/query_range?{q}"))
    if doc.get("status") != "success":
        raise ValueError(doc)
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def panel_series(url: str, spec: B.PanelSpec, variables: dict[str, str]) -> int:
    """Run a panel's queries as Grafana does (range for a time series, instant otherwise);
    the number of series they return together."""
    n = 0
    for t in spec.targets:
        q = lint.substitute(t.expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__range", RANGE), variables)
        n += len(range_query(url, q) if spec.kind == "timeseries" and not t.instant else prom_query(url, q))
    return n


@contextlib.contextmanager
def fleet_stack(work: Path, entries: int, pilots_per_entry: int = 3, seed: int = 3) -> Iterator[FleetStack]:
    """Simulate ``entries`` entries (scenario.fleet), export them, and scrape them with our rules
    (windows in seconds, rules.Timing); yields once the recording rules cover every entry with pilots."""
    factory = work / "factory"
    simulate(factory, pilots_per_entry * entries, seed=seed, start=time.time() - 48 * 3600, entries=fleet(entries))
    rules_dir = work / "rules"
    rules_dir.mkdir()
    (rules_dir / "rec.yml").write_text(rules.recording_yaml(S.FAST))
    (rules_dir / "alerts.yml").write_text(rules.alerts_yaml(S.FAST))
    exp_port, prom_port = free_port(), free_port()
    cfg = render(
        "prometheus",
        "prometheus.yml.j2",
        # 500 entries are ~32k samples: a scrape takes over a second here while the exporter scans.
        prometheus_scrape_interval="5s",
        prometheus_evaluation_interval="1s",
        prometheus_rule_files=[str(rules_dir / "rec.yml"), str(rules_dir / "alerts.yml")],
        prometheus_alertmanagers=[],
        prometheus_exporter_targets=[f"127.0.0.1:{exp_port}"],
        prometheus_collector_targets=[],
        prometheus_self_targets=[f"127.0.0.1:{prom_port}"],
    )
    cmd = [
        *export_command(factory, exp_port, work / "checkpoint.json", interval=5, settle=0),
        *("--lost-after-seconds", "1e9"),  # every pilot in the tree is counted from its files
    ]
    metrics = f"http://127.0.0.1:{exp_port}/metrics"
    with process(cmd, work / "exporter.log"):
        wait_for("the first scan", lambda: first_scan_done(http_get(metrics)), 180)
        with prometheus(work / "prom", cfg, port=prom_port) as url:
            recorded = f"count(count by (entry) ({N.RR_CPU_RATE}))"
            exported = f"count(count by (entry) ({catalogue.CPU_SECONDS.name}))"
            wait_for(
                "recording rules for every entry with pilots",
                lambda: value(url, exported) > 0.8 * entries and value(url, recorded) == value(url, exported),
                120,
            )
            yield FleetStack(url, metrics, entries)
