"""Every dashboard panel on a 500-entry factory stays within its declared series budget.

A simulated factory of 500 entries over 100 sites (scenario.fleet) -> the
exporter -> a real Prometheus with our recording and alert rules (windows in
seconds, rules.Timing). Each panel's queries are run as Grafana runs them, a
range query for a time series and an instant query for a stat, table or bar
gauge, with every variable at "All" and Top N at its default; the series they
return together must not exceed the panel's budget (board.PanelSpec.budget).
The test also shows the budgets are not met by accident: the factory really
has 500 entries on the dashboards' own variable metric, and the ranked panels
fill their Top N.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dashboards.gen import board as B
from dashboards.gen import dashboards as D
from dashboards.gen import lint, rules
from dashboards.gen import names as N
from gwms_obs import catalogue
from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import fleet
from tests.support import alert_scenario as S
from tests.support.servers import first_scan_done, free_port, have, http_get, process, prom_query, prometheus, wait_for
from tools.render import render

pytestmark = [pytest.mark.live, pytest.mark.skipif(not have("prometheus"), reason="Debian prometheus missing")]

ENTRIES = 500
VARS = {"entry": ".*", "client": ".*", "site": ".*", B.TOPN: str(B.TOPN_DEFAULT)}
RATE_INTERVAL, RANGE, STEP = "30s", "2m", 5


def range_query(url: str, expr: str, seconds: int) -> list[dict[str, Any]]:
    now = time.time()
    q = urllib.parse.urlencode({"query": expr, "start": now - seconds, "end": now, "step": STEP})
    doc = json.loads(http_get(f"{url}/api/v1/query_range?{q}"))
    if doc.get("status") != "success":
        raise ValueError(doc)
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("scale")
    factory = work / "factory"
    simulate(factory, 3 * ENTRIES, seed=3, start=time.time() - 48 * 3600, entries=fleet(ENTRIES))
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
        sys.executable, "-m", "gwms_obs.cli", "export", "--factory-dir", str(factory),
        "--listen", f"127.0.0.1:{exp_port}", "--interval", "5", "--settle-seconds", "0",
        "--lost-after-seconds", "1e9", "--checkpoint", str(work / "checkpoint.json"),
    ]  # fmt: skip
    with process(cmd, work / "exporter.log"):
        wait_for("the first scan", lambda: first_scan_done(http_get(f"http://127.0.0.1:{exp_port}/metrics")), 180)
        with prometheus(work / "prom", cfg, port=prom_port) as url:
            # Rates over 30 s and the recording rules need a few scrapes and evaluations.
            recorded = f"count(count by (entry) ({N.RR_CPU_RATE}))"
            exported = f"count(count by (entry) ({catalogue.CPU_SECONDS.name}))"
            wait_for(
                "recording rules for every entry with pilots",
                lambda: _value(url, exported) > 0.8 * ENTRIES and _value(url, recorded) == _value(url, exported),
                120,
            )
            yield url


def _value(url: str, expr: str) -> float:
    res = prom_query(url, expr)
    return float(res[0]["value"][1]) if res else 0.0


def _series(url: str, spec: B.PanelSpec) -> int:
    n = 0
    for t in spec.targets:
        q = lint.substitute(t.expr.replace("$__rate_interval", RATE_INTERVAL).replace("$__range", RANGE), VARS)
        if spec.kind == "timeseries" and not t.instant:
            n += len(range_query(url, q, 120))
        else:
            n += len(prom_query(url, q))
    return n


def test_the_factory_is_500_entries_wide(prom: str) -> None:
    """What the dashboards would draw without Top N: one series per entry."""
    assert _value(prom, f"count(count by (entry) ({catalogue.ENTRY_DOWNTIME.name}))") == ENTRIES
    assert _value(prom, f"count(count by (site) ({catalogue.ENTRY_DOWNTIME.name}))") == ENTRIES // 5


def test_every_panel_stays_within_its_series_budget(prom: str) -> None:
    over, counts = [], {}
    for board in D.boards():
        for spec in board.specs:
            n = _series(prom, spec)
            counts[(board.uid, spec.title)] = n
            if n > spec.budget:
                over.append(f"{board.uid} {spec.title!r}: {n} series > budget {spec.budget}")
    assert not over, "\n".join(over)
    # The ranked panels are full: the budgets hold because of Top N, not for want of data.
    full = [k for k, n in counts.items() if "$topn" in k[1] and n >= B.TOPN_DEFAULT]
    assert len(full) >= 15, counts


def test_topn_is_what_bounds_a_ranked_panel(prom: str) -> None:
    """The same panel with Top N at 50 draws 50 entries: the variable, not the data, sets the count."""
    (spec,) = (s for b in D.boards() for s in b.specs if s.title.startswith("Waste by entry, top"))
    q = lint.substitute(spec.targets[0].expr.replace("$__range", RANGE), {**VARS, B.TOPN: "50"})
    res = prom_query(prom, q)
    assert len(res) == 50
    hours = [float(r["value"][1]) for r in res]
    assert hours == sorted(hours, reverse=True), "bar gauges show the largest first"


def test_json_and_specs_agree(tmp_path: Path) -> None:
    """The budgets are checked on the specs; the JSON Grafana loads must hold the same queries."""
    for board in D.boards():
        doc = board.build()
        exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]  # type: ignore[index]
        assert exprs == [t.expr for s in board.specs for t in s.targets]
