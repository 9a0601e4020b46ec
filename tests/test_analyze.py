"""`gwms-obs analyze` in pieces: robust statistics, spans from spools and Jaeger, outliers, actions, renderings.

The spools are built by the simulator's own writer (``simulate/write/trace_spool.spool``), so
they have the shape gwms-trace.sh writes; the factory-wide, end-to-end checks are in
test_analyze_cli.py.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.analysis import actions as A
from gwms_obs.analysis import outliers as O
from gwms_obs.analysis import render
from gwms_obs.analysis import spans as S
from gwms_obs.analysis.collect import Collector, Dataset
from gwms_obs.analysis.result import Analysis, analyze
from gwms_obs.analysis.stats import MAD_TO_SIGMA, mad, median, quantile, robust_scale, robust_z
from gwms_obs.simulate.write.trace_spool import spool
from gwms_obs.tracing import conventions as C

SCRIPTS = ("main/setup_script.sh", "main/cvmfs_setup.sh", "main/singularity_setup.sh", "entry/cat_consts.sh")
T0 = 1_780_000_000


# --- stats ---------------------------------------------------------------------------------------


def test_quantiles_and_median() -> None:
    xs = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert quantile(xs, 0.5) == 3.0
    assert quantile(xs, 0.0) == 1.0 and quantile(xs, 1.0) == 10.0
    assert quantile(xs, 0.9) == pytest.approx(4 + 0.6 * 6)
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert math.isnan(quantile([], 0.5))


def test_robust_z_ignores_one_outlier_that_a_standard_z_would_absorb() -> None:
    xs = [10.0, 11.0, 9.0, 10.0, 12.0, 8.0, 10.0, 100.0]
    m, s = median(xs), robust_scale(xs)
    assert m == 10.0
    assert s == pytest.approx(MAD_TO_SIGMA * mad(xs))
    assert robust_z(100.0, m, s) > 30  # the plain z of 100 here is 2.6
    assert abs(robust_z(12.0, m, s)) < 3.5


def test_mad_zero_falls_back_to_the_mean_deviation_then_to_zero() -> None:
    xs = [5.0, 5.0, 5.0, 5.0, 9.0]  # MAD 0: more than half the values equal
    assert mad(xs) == 0.0
    s = robust_scale(xs)
    assert s == pytest.approx(1.253314 * 4 / 5)
    assert robust_z(9.0, 5.0, s) == pytest.approx(4 / s)
    assert robust_scale([3.0, 3.0, 3.0]) == 0.0
    assert robust_z(3.0, 3.0, 0.0) == 0.0
    assert robust_z(4.0, 3.0, 0.0) == math.inf


# --- spools → samples → actions ------------------------------------------------------------------


def pilot_spool(entry: str, site: str, cluster: int, proc: int, durations: dict[str, int]) -> bytes:
    start = T0 + cluster * 1000 + proc * 10
    scripts, t = [], start + 3
    for name in SCRIPTS:
        scripts.append((name, t, t + durations.get(name, 3)))
        t += durations.get(name, 3)
    resource: dict[str, str | int] = {
        C.SERVICE_NAME: C.SERVICE_PILOT, C.ENTRY: entry, C.SITE: site, C.CLIENT: "fe",
        C.CONDOR_CLUSTER: cluster, C.CONDOR_PROC: proc,
    }  # fmt: skip
    return spool(
        seed=1, cluster=cluster, proc=proc, resource=resource, startup=start, glidein_end=t + 3700,
        scripts=scripts, failed=None, main=(t + 1, t + 3600), exit_code=0,
    )  # fmt: skip


def fleet_collector(slow: dict[str, tuple[str, int]], entries: int = 6, pilots: int = 8) -> Collector:
    """``entries`` entries of ``pilots`` traced pilots; ``slow`` = entry -> (script, seconds)."""
    c = Collector()
    for e in range(entries):
        entry = f"entry{e}"
        for p in range(pilots):
            d = {n: 3 + (p + e) % 3 for n in SCRIPTS}  # 3-5 s, a little spread
            if entry in slow:
                name, secs = slow[entry]
                d[name] = secs + p % 3
            c.spool(pilot_spool(entry, f"Site{e}", 100 + e, p, d), f"/f/client/u/g/entry_{entry}/job.{100 + e}.{p}.err")
    return c


def test_a_slow_script_at_one_entry_is_the_first_action() -> None:
    an = analyze(
        fleet_collector({"entry2": ("main/cvmfs_setup.sh", 40), "entry4": ("entry/cat_consts.sh", 20)}).dataset()
    )
    assert [(a.entry, a.name) for a in an.actions] == [
        ("entry2", "main/cvmfs_setup.sh"),
        ("entry4", "entry/cat_consts.sh"),
    ]
    first = an.actions[0]
    assert first.rank == 1 and first.kind == S.KIND_SCRIPT
    assert first.fleet_median == 4.0 and first.median == 41.0
    assert first.ratio == pytest.approx(41 / 4)
    assert first.z >= A.ACTION_Z
    # share: 8 pilots x 41 s of (8 x (41 + 3 x ~4) s of scripts + init + pre_setup)
    setup = an.dists[next(k for k in an.dists if k.entry == "entry2" and k.name == C.PHASE_SETUP)]
    init_pre = sum(d.total for k, d in an.dists.items() if k.entry == "entry2" and k.name in A.ACTION_PHASES)
    assert first.share == pytest.approx(
        an.dists[next(k for k in an.dists if k.entry == "entry2" and k.name == first.name)].total
        / (setup.total + init_pre)
    )
    # no accounting: the pilots traced stand for the entry, 1 canonical unit each, over the minimum window
    per_week = 8 / an.data.weeks
    assert first.pilots_per_week == pytest.approx(per_week)
    assert first.core_hours_per_week == pytest.approx((41 - 4) * 1.0 * per_week / 3600)
    assert (
        "entry entry2: main/cvmfs_setup.sh takes" in first.sentence() and "10.2× the fleet median" in first.sentence()
    )


def test_a_fleet_without_a_slow_script_has_no_action() -> None:
    an = analyze(fleet_collector({}).dataset())
    assert an.actions == []
    assert "no actions" in render.to_table(an)


def test_an_entry_twice_as_slow_but_within_the_fleet_spread_is_no_action() -> None:
    # Half the fleet slow: the MAD is large, z small, whatever the ratio.
    slow = {f"entry{e}": ("main/cvmfs_setup.sh", 9) for e in range(3)}
    an = analyze(fleet_collector(slow).dataset())
    assert an.actions == []


def test_the_three_thresholds_all_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    # 6 s against a fleet of 3-5 s: robust z is large (a tight fleet) but the ratio is 1.5.
    an = analyze(fleet_collector({"entry1": ("main/cvmfs_setup.sh", 5)}).dataset())
    k = next(k for k in an.scores if k.entry == "entry1" and k.name == "main/cvmfs_setup.sh")
    assert an.scores[k].z >= A.ACTION_Z and an.scores[k].ratio < A.ACTION_RATIO
    assert an.actions == []
    monkeypatch.setattr(A, "ACTION_RATIO", 1.2)
    assert analyze(fleet_collector({"entry1": ("main/cvmfs_setup.sh", 5)}).dataset()).actions == []  # 2 s excess
    monkeypatch.setattr(A, "ACTION_MIN_EXCESS_SECONDS", 1.0)
    an = analyze(fleet_collector({"entry1": ("main/cvmfs_setup.sh", 5)}).dataset())
    assert [(a.entry, a.name) for a in an.actions] == [("entry1", "main/cvmfs_setup.sh")]


def test_too_few_entries_or_spans_give_no_fleet() -> None:
    an = analyze(fleet_collector({"entry1": ("main/cvmfs_setup.sh", 40)}, entries=2).dataset())
    assert an.actions == []  # two entries are no fleet (MIN_ENTRIES)
    an = analyze(fleet_collector({"entry1": ("main/cvmfs_setup.sh", 40)}, pilots=O.MIN_SAMPLES - 1).dataset())
    assert an.scores == {} and an.actions == []


def test_one_slow_pilot_is_flagged_within_its_entry_not_as_an_action() -> None:
    c = fleet_collector({})
    c.spool(
        pilot_spool("entry3", "Site3", 103, 99, {"main/singularity_setup.sh": 300}), "/f/entry_entry3/job.103.99.err"
    )
    an = analyze(c.dataset())
    assert an.actions == []
    # the script, and the setup phase it is in
    assert {(f.pilot, f.name) for f in an.flags} == {
        ("entry3/103.99", "main/singularity_setup.sh"),
        ("entry3/103.99", "setup"),
    }
    assert all(f.z >= O.PILOT_Z and f.duration >= O.PILOT_RATIO * f.entry_median for f in an.flags)


def test_a_pilot_a_few_seconds_over_a_tight_entry_is_no_outlier() -> None:
    """12 s against 3-5 s is over twice the median with a huge z, but under 10 s above it."""
    c = fleet_collector({})
    c.spool(pilot_spool("entry3", "Site3", 103, 98, {"entry/cat_consts.sh": 12}), "/f/entry_entry3/job.103.98.err")
    assert analyze(c.dataset()).flags == []
    c.spool(pilot_spool("entry3", "Site3", 103, 99, {"entry/cat_consts.sh": 20}), "/f/entry_entry3/job.103.99.err")
    assert [(f.pilot, f.name) for f in analyze(c.dataset()).flags if f.kind == "script"] == [
        ("entry3/103.99", "entry/cat_consts.sh")
    ]


def test_phases_and_scripts_are_told_apart_and_main_is_no_candidate() -> None:
    an = analyze(fleet_collector({}).dataset())
    kinds = {(k.kind, k.phase, k.name) for k in an.dists if k.entry == "entry0"}
    assert (S.KIND_PHASE, C.PHASE_SETUP, C.PHASE_SETUP) in kinds
    assert (S.KIND_SCRIPT, C.PHASE_SETUP, "main/cvmfs_setup.sh") in kinds
    assert (S.KIND_SCRIPT, C.PHASE_MAIN, "condor_startup.sh") in kinds
    assert not any(k.name == C.SPAN_PILOT for k in an.dists)
    cands = {k.name for k in an.dists if A.is_candidate(k)}
    assert "condor_startup.sh" not in cands and C.PHASE_SETUP not in cands and C.PHASE_MAIN not in cands
    assert {C.PHASE_INIT, C.PHASE_PRE_SETUP, "main/cvmfs_setup.sh"} <= cands


def test_labels_come_from_the_err_path_not_from_the_pilot() -> None:
    c = Collector()
    data = pilot_spool("someone_elses_entry", "Elsewhere", 7, 0, {})
    c.spool(data, "/f/client/u/g/entry_mine/job.7.0.err")
    c.spool(b"not a spool", "/f/client/u/g/entry_mine/job.7.1.err")
    c.spool(data, "/f/client/u/g/entry_mine/not_a_job.err")
    d = c.dataset()
    assert {s.entry for s in d.samples} == {"mine"} and {s.pilot for s in d.samples} == {"mine/7.0"}
    assert c.errors.total() >= 1


def to_jaeger(data: bytes) -> dict[str, Any]:
    """A spool as Jaeger's API returns it (one trace, one process)."""
    spans, tags = [], []
    for line in data.splitlines():
        rs = json.loads(line)["resourceSpans"][0]
        tags = [{"key": kv["key"], "value": next(iter(kv["value"].values()))} for kv in rs["resource"]["attributes"]]
        for s in rs["scopeSpans"][0]["spans"]:
            spans.append(
                {
                    "traceID": s["traceId"], "spanID": s["spanId"], "operationName": s["name"], "processID": "p1",
                    "references": [{"refType": "CHILD_OF", "spanID": s["parentSpanId"]}] if s["parentSpanId"] else [],
                    "startTime": int(s["startTimeUnixNano"]) // 1000,
                    "duration": (int(s["endTimeUnixNano"]) - int(s["startTimeUnixNano"])) // 1000,
                    "tags": [{"key": kv["key"], "value": next(iter(kv["value"].values()))} for kv in s["attributes"]],
                }
            )  # fmt: skip
    return {
        "traceID": spans[0]["traceID"],
        "spans": spans,
        "processes": {"p1": {"serviceName": "glidein", "tags": tags}},
    }


def test_jaeger_spans_are_the_spool_spans_and_count_once() -> None:
    data = pilot_spool("e", "S", 5, 1, {"main/cvmfs_setup.sh": 30})
    from_spool = S.from_otlp(json.loads(line)["resourceSpans"][0] for line in data.splitlines())
    from_jaeger = S.from_jaeger([to_jaeger(data)])
    assert sorted(from_jaeger, key=lambda s: s.span_id) == sorted(from_spool, key=lambda s: s.span_id)
    c = Collector()
    c.spool(data, "/f/entry_e/job.5.1.err")
    c.add_jaeger([to_jaeger(data)])
    d = c.dataset()
    assert d.jaeger_spans == len(from_jaeger) and len(d.samples) == len(from_spool) - 1  # no root
    cvmfs = [s for s in d.samples if s.name == "main/cvmfs_setup.sh"]
    assert [(s.duration, s.phase, s.pilot) for s in cvmfs] == [(30.0, C.PHASE_SETUP, "e/5.1")]


# --- renderings ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def slow() -> Analysis:
    return analyze(fleet_collector({"entry2": ("main/cvmfs_setup.sh", 4000)}, pilots=12).dataset())


def test_csv_is_tidy_one_row_per_entry_and_name(slow: Analysis) -> None:
    rows = list(csv.DictReader(io.StringIO(render.to_csv(slow))))
    assert tuple(rows[0]) == render.CSV_HEADER
    assert len(rows) == len(slow.dists) == len({(r["entry"], r["kind"], r["phase"], r["name"]) for r in rows})
    ranked = [r for r in rows if r["action_rank"]]
    assert [(r["entry"], r["name"], r["action_rank"]) for r in ranked] == [("entry2", "main/cvmfs_setup.sh", "1")]
    assert float(ranked[0]["excess_core_hours_per_week"]) == pytest.approx(
        slow.actions[0].core_hours_per_week, rel=1e-3
    )


def test_json_has_the_actions_thresholds_and_distributions(slow: Analysis) -> None:
    doc = json.loads(render.to_json(slow))
    assert doc["thresholds"]["action_z"] == A.ACTION_Z and doc["thresholds"]["action_ratio"] == A.ACTION_RATIO
    assert doc["actions"][0]["name"] == "main/cvmfs_setup.sh" and doc["actions"][0]["text"].startswith("entry entry2")
    assert len(doc["distributions"]) == len(slow.dists)


def test_table_aligns_and_separates_thousands(slow: Analysis) -> None:
    text = render.to_table(slow)
    assert "  1. entry entry2: main/cvmfs_setup.sh takes" in text
    assert "4,001.0" in text  # the slow median, with a thousands separator
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("#  entry"))
    assert set(lines[head + 1].replace(" ", "")) == {"-"}
    assert lines[head].index("core-h/wk") + len("core-h/wk") == len(lines[head + 2])  # numbers flush right


def test_plot_draws_the_actions_and_nothing_when_there_are_none(slow: Analysis, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    fig = render.figure(slow)
    assert fig is not None
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_yticklabels()] == ["entry2: main/cvmfs_setup.sh (1000.2×)"]
    (bar,) = ax.patches
    assert bar.get_width() == pytest.approx(slow.actions[0].core_hours_per_week)
    png = tmp_path / "a.png"
    assert render.plot(slow, str(png)) and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    empty = analyze(Dataset())
    assert not render.plot(empty, str(tmp_path / "b.png")) and not (tmp_path / "b.png").exists()
    assert render.plot_problem(empty) is not None and "no spans" in render.plot_problem(empty)  # type: ignore[operator]
