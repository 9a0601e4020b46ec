"""Every dashboard panel on a 500-entry factory stays within its declared series budget.

A simulated factory of 500 entries over 100 sites (scenario.fleet) -> the
exporter -> a real Prometheus with our recording and alert rules (windows in
seconds, config.Timing). Each panel's queries are run as Grafana runs them, a
range query for a time series and an instant query for a stat, table or bar
gauge, with every variable at "All" and Top N at its default; the series they
return together must not exceed the panel's budget (board.PanelSpec.budget).
The test also shows the budgets are not met by accident: the factory really
has 500 entries on the dashboards' own variable metric, and the ranked panels
fill their Top N.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboards.gen import board as B
from dashboards.gen import dashboards as D
from dashboards.gen import lint
from dashboards.gen import names as N
from dashboards.gen.boards.overview import THIS_FACTORY
from gwms_obs import catalogue
from tests.support.fleet_stack import RANGE, RATE_INTERVAL, SITES_PER_ENTRY, fleet_stack, panel_series
from tests.support.servers import have, prom_query, prom_value

pytestmark = [pytest.mark.live, pytest.mark.skipif(not have("prometheus"), reason="Debian prometheus missing")]

ENTRIES = 500
F = catalogue.FACTORY_LABEL
# One factory's own Prometheus, as Grafana runs the boards there: every variable at All, the
# factory's too (its series carry no factory label: only Thanos attaches it).
VARS = {F: ".*", "entry": ".*", "client": ".*", "site": ".*", B.TOPN: str(B.TOPN_DEFAULT)}


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with fleet_stack(tmp_path_factory.mktemp("scale"), ENTRIES) as stack:
        yield stack.prometheus


def test_the_factory_is_500_entries_wide(prom: str) -> None:
    """What the dashboards would draw without Top N: one series per entry."""
    assert prom_value(prom, f"count(count by (entry) ({catalogue.ENTRY_DOWNTIME.name}))") == ENTRIES
    assert prom_value(prom, f"count(count by (site) ({catalogue.ENTRY_DOWNTIME.name}))") == ENTRIES // SITES_PER_ENTRY


def test_factory_at_all_matches_a_factory_without_the_label(prom: str) -> None:
    """PromQL takes an absent label for the empty string, which the variable's All, ".*", matches;
    a factory's name (a value the label would have on Thanos) matches nothing here."""
    m = catalogue.ENTRY_DOWNTIME.name
    assert prom_query(prom, f'count by ({F}) ({m}{{{F}!=""}})') == []  # no series carries the label
    assert prom_value(prom, f'count({m}{{{F}=~".*"}})') == prom_value(prom, f"count({m})") == ENTRIES
    assert prom_query(prom, f'{m}{{{F}=~"some-factory"}}') == []
    # The variable's own query finds no factory, so Grafana keeps it at All.
    assert prom_query(prom, f'count by ({F}) ({catalogue.BUILD_INFO.name}{{{F}!=""}})') == []


def test_the_per_factory_panel_shows_one_named_series_without_the_label(prom: str) -> None:
    """Which factory provides how much, and is any silent: here, the one factory as "this factory"."""
    (spec,) = (s for b in D.boards() for s in b.specs if s.question.startswith("Which factory provides"))
    values = []
    for t in spec.targets:
        q = lint.substitute(t.expr.replace("$__rate_interval", RATE_INTERVAL), VARS)
        (series,) = prom_query(prom, q)
        assert series["metric"] == {F: THIS_FACTORY}, series
        values.append(float(series["value"][1]))
    cpu, age = values
    # the same numbers as the unnamed aggregates: label_replace only names the series
    cpu_all = prom_value(prom, f"sum({N.RR_CPU_RATE})")
    age_all = prom_value(prom, f"time() - max({catalogue.PILOT_LAST_COMPLETED.name})")
    assert abs(cpu - cpu_all) <= 1e-9 + 0.05 * abs(cpu_all), (cpu, cpu_all)
    assert abs(age - age_all) < 60, (age, age_all)  # two queries, two time()s


def test_every_panel_stays_within_its_series_budget(prom: str) -> None:
    over, counts = [], {}
    for board in D.boards():
        for spec in board.specs:
            n = panel_series(prom, spec, VARS)
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
        exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]  # type: ignore[attr-defined]
        assert exprs == [t.expr for s in board.specs for t in s.targets]
