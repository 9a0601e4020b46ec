"""The factory-wide "why are glideins not running" table (issue 33), on a real Prometheus.

A simulated factory with a CE refusing the factory's token (held, auth_failed; condor_submit failing
too), a CE found down 40 minutes ago and a healthy entry, read by the real exporter and scraped by a
real Prometheus with our rules. Every column's query returns data; the refusing CE's row has its
glideins held and its submit failures, the CE down is 1 at its entry alone, and the healthy entry,
with no reason, ranks below them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dashboards import gen
from dashboards.gen import lint
from dashboards.gen.boards.common import ENTRY_HEALTH
from gwms_obs import catalogue
from gwms_obs.simulate.factory import DEFAULT_ENTRIES, simulate
from gwms_obs.simulate.scenario import OPERATOR_ENTRIES, SCHEDD
from tests.support import alert_scenario as S
from tests.support.local_stack import alerting_stack
from tests.support.servers import have, prom_query, wait_for

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        not (have("prometheus") and have("prometheus-alertmanager")), reason="Debian prometheus/alertmanager missing"
    ),
]

GOOD, AUTH, DOWN = DEFAULT_ENTRIES[0], OPERATOR_ENTRIES[0], OPERATOR_ENTRIES[1]
TITLE = "Why are glideins not running? Top $topn entries"
FAILURES = catalogue.SUBMIT_FAILURES.name
CONTACTS = {"factory_ops": ["ops@factory.test"], "sites": {}}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, Path]]:
    work = tmp_path_factory.mktemp("why")
    factory, held = work / "factory", work / "held"
    simulate(factory, 400, seed=11, end=time.time(), entries=(GOOD, AUTH, DOWN))
    # Half of the healthy entry's pilots come back after the event log is read, with their queue times
    # (a backfill counts the .out files before it reads the log; the troubled entries' pilots have none).
    assert S.hold_back(factory, held, GOOD.name) >= 20
    with alerting_stack(work, factory, CONTACTS) as st:
        yield st.prometheus, factory, held


def _refused(factory: Path) -> None:
    """One condor_submit refused at GOOD's entry now, as glideFactoryLib.executeSubmit logs it
    (ERROR 'condor_submit failed: %s', sources/factory_log.py; the line of tests/test_submit_failing_live.py)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
    n = f",{time.monotonic_ns() % 1000:03d}"  # two failures in a second are two records
    with open(factory / "server" / f"entry_{GOOD.name}" / f"{GOOD.name}.err.log", "a") as f:
        f.write(
            f"[{stamp}{n}] ERROR: glideFactoryLib:1892: condor_submit failed: Failed condor command 'condor_submit"
            f" -name {SCHEDD} entry_{GOOD.name}/job.condor'. Exit code: 1. Stdout: Submitting job(s)\n. Stderr:"
            f" ERROR: Failed to connect to queue manager {SCHEDD}\n"
        )


def _columns() -> dict[str, str]:
    board = json.loads(gen.render_all()[f"dashboards/grafana/{ENTRY_HEALTH}.json"])
    (panel,) = [p for p in board["panels"] if p.get("title") == TITLE]
    names = {
        o["matcher"]["options"]: next(p["value"] for p in o["properties"] if p["id"] == "displayName")
        for o in panel["fieldConfig"]["overrides"]
    }
    assert [t["id"] for t in panel["transformations"]][:1] == ["merge"]
    return {names[f"Value #{t['refId']}"]: t["expr"] for t in panel["targets"]}


def _query(prom: str, expr: str) -> list[dict[str, Any]]:
    vars_ = {**S.GRAFANA_VARS, "topn": "10"}
    return prom_query(prom, lint.substitute(expr.replace("$__range", "10m"), vars_))


def _by_entry(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {r["metric"]["entry"]: float(r["value"][1]) for r in rows}


def test_every_column_returns_data_a_row_per_troubled_entry(stack: tuple[str, Path, Path]) -> None:
    prom, factory, held = stack
    cols = _columns()
    assert list(cols) == [
        "held now",
        "held of the newest class",
        "CE down",
        "queue p90",
        "queue median / its week's",
        "submit failures",
        "removed",
    ]
    wait_for("the CE down", lambda: _query(prom, cols["CE down"]), 60)
    # The healthy entry gets a reason, and its row the queue times of the pilots below: a counter born
    # at its first failure has no increase yet, so a second failure once Prometheus has the first.
    _refused(factory)
    wait_for("the first failure", lambda: prom_query(prom, f'{FAILURES}{{entry="{GOOD.name}"}}'), 60)
    _refused(factory)
    grown = f'increase({FAILURES}{{entry="{GOOD.name}"}}[10m]) > 0'
    wait_for("the second failure", lambda: prom_query(prom, grown), 60)  # a row before the window's median
    S.release(held, factory)  # pilots with queue times: the last window's median exists for a while
    got: dict[str, dict[str, float]] = {}

    def every_column() -> bool:
        # Each column's first answer: a series just born needs a second scrape for increase(), and
        # the last window's median lasts one window (20 s here) after the pilots arrive.
        for name, expr in cols.items():
            rows = _by_entry(_query(prom, expr)) if name not in got else {}
            if any(not math.isnan(v) for v in rows.values()):  # NaN: histogram_quantile of no pilot yet
                got[name] = rows
        return len(got) == len(cols)

    try:
        wait_for("every column", every_column, 90)
    except TimeoutError:
        pytest.fail(f"columns without data: {sorted(set(cols) - set(got))}")
    rows = set().union(*got.values())
    assert AUTH.name in rows and DOWN.name in rows
    # (the simulated refusals are older than the range's first scrape: no increase, but a row)
    assert got["held now"][AUTH.name] >= 5 and AUTH.name in got["submit failures"]
    assert got["CE down"] == {e: (1.0 if e == DOWN.name else 0.0) for e in got["CE down"]}
    assert got["CE down"][DOWN.name] == 1.0
    top = _query(prom, cols["held of the newest class"])
    assert {r["metric"]["class"] for r in top if r["metric"]["entry"] == AUTH.name} == {"auth_failed"}
    # The entry refused once is a row with its queue, the others have no queue time to show.
    # (NaN where no pilot started: histogram_quantile's, and the ratio's for the same rows)
    assert got["submit failures"][GOOD.name] >= 1
    for column in ("queue p90", "queue median / its week's"):
        assert {e for e, v in got[column].items() if not math.isnan(v)} == {GOOD.name}, column
    assert got["queue p90"][GOOD.name] > 0
