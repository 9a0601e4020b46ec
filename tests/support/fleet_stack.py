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
from dashboards.gen import lint
from dashboards.gen import names as N
from gwms_obs import catalogue
from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import fleet
from tests.support.local_stack import exporter, prometheus_config, rule_files
from tests.support.servers import (
    free_port,
    http_get,
    prom_query,
    prom_value,
    prometheus,
    wait_for,
)

SITES_PER_ENTRY = 5
# Grafana's macros as the panels' queries are run here: a 2-minute dashboard, 5 s steps.
RATE_INTERVAL, RANGE, RANGE_SECONDS, STEP = "30s", "2m", 120, 5


@dataclass(frozen=True)
class FleetStack:
    prometheus: str  # base URL
    exporter: str  # /metrics URL
    entries: int


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
    (windows in seconds, config.Timing); yields once the recording rules cover every entry with pilots."""
    factory = work / "factory"
    simulate(factory, pilots_per_entry * entries, seed=seed, start=time.time() - 48 * 3600, entries=fleet(entries))
    exp_port, prom_port = free_port(), free_port()
    # 500 entries are ~32k samples: a scrape takes over a second here while the exporter scans.
    cfg = prometheus_config(rule_files(work), exp_port, prom_port, scrape_interval="5s")
    with (
        exporter(factory, work, exp_port, interval=5) as metrics,
        prometheus(work / "prom", cfg, port=prom_port) as url,
    ):
        recorded = f"count(count by (entry) ({N.RR_CPU_RATE}))"
        exported = f"count(count by (entry) ({catalogue.CPU_SECONDS.name}))"
        wait_for(
            "recording rules for every entry with pilots",
            lambda: (
                prom_value(url, exported) > 0.8 * entries and prom_value(url, recorded) == prom_value(url, exported)
            ),
            120,
        )
        yield FleetStack(url, metrics, entries)
