"""`gwms-obs report`'s per-entry holds by class and time in queue (issue 33 item 6).

Without a window the report's holds are the daemon's gwms_glidein_holds_total summed over clients, and
its queue counts and sums are gwms_pilot_queue_seconds' and gwms_pilot_grid_queue_seconds' _count and
_sum; the median and p90 lie in the histogram's bucket holding that rank. With a window, the holds are the
012 events HTCondor logged in it. Real processes: the exporter daemon on 127.0.0.1 and the report command.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gwms_obs import catalogue
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.model import PilotTimes
from gwms_obs.outputs.entry_health import EntryHealth, quantile
from gwms_obs.outputs.report import Report
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import DEFAULT_ENTRIES, simulate
from gwms_obs.simulate.scenario import OPERATOR_ENTRIES
from gwms_obs.sources.hold_reasons import classify
from tests.support.servers import export_command, first_scan_done, free_port, process
from tools.polling import http_get
from tools.polling import poll as wait_for

ENTRIES = (DEFAULT_ENTRIES[0], *OPERATOR_ENTRIES)


def _factory(root: Path) -> Path:
    simulate(root, 600, seed=33, entries=ENTRIES)
    return root


def _report(factory: Path, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "gwms_obs.cli", "report", "--factory-dir", str(factory), "--format", "json", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    return {r["entry"]: r for r in json.loads(done.stdout)["entries"]}


def _served(text: str) -> tuple[dict[str, Counter[str]], dict[str, dict[str, Any]]]:
    """Holds per entry by class (summed over clients); per entry and histogram: count, sum, buckets."""
    holds: dict[str, Counter[str]] = {}
    hist: dict[str, dict[str, Any]] = {}
    names = {catalogue.PILOT_QUEUE_TIME.name: "queue", catalogue.PILOT_GRID_QUEUE_TIME.name: "grid_queue"}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            e = s.labels.get("entry", "")
            if s.name == catalogue.HOLDS.name + "_total" or s.name == catalogue.HOLDS.name:
                holds.setdefault(e, Counter())[s.labels["class"]] += int(s.value)
            base = s.name.rsplit("_", 1)[0]
            if base in names:
                h = hist.setdefault(e, {}).setdefault(names[base], {"count": 0, "sum": 0.0, "le": Counter()})
                if s.name.endswith("_count"):
                    h["count"] += int(s.value)
                elif s.name.endswith("_sum"):
                    h["sum"] += s.value
                elif s.name.endswith("_bucket"):
                    h["le"][float(s.labels["le"])] += s.value
    return holds, hist


def _in_rank_buckets(q: float, value: float, buckets: Counter[float], count: int) -> bool:
    """Whether ``value`` lies between the buckets of the two values the linear q-quantile of ``count``
    values falls between (the k-th value is in the first bucket whose cumulative count reaches k)."""
    pos = q * (count - 1)

    def bounds(k: int) -> tuple[float, float]:
        lo = 0.0
        for le in sorted(buckets):
            if buckets[le] >= k:
                return lo, le
            lo = le
        return lo, math.inf

    return bounds(math.floor(pos) + 1)[0] <= value <= bounds(math.ceil(pos) + 1)[1]


def test_the_report_without_a_window_equals_the_daemons_metrics(tmp_path: Path) -> None:
    factory = _factory(tmp_path / "factory")
    rep = _report(factory)
    auth = rep[OPERATOR_ENTRIES[0].name]
    assert auth["holds"] > 0 and next(iter(auth["holds_by_class"])) == catalogue.HoldClass.AUTH_FAILED.value
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    cmd = export_command(factory, port, tmp_path / "checkpoint.json", interval=1, settle=0)
    with process(cmd, tmp_path / "exporter.log"):
        wait_for("the first scan", lambda: first_scan_done(http_get(url)), 120)
        holds, hist = _served(http_get(url).decode())
    assert {e: dict(c) for e, c in holds.items() if sum(c.values())} == {
        e: r["holds_by_class"] for e, r in rep.items() if r["holds"]
    }
    observed = 0
    for e, r in rep.items():
        for name in ("queue", "grid_queue"):
            h = hist.get(e, {}).get(name, {"count": 0, "sum": 0.0, "le": Counter()})
            got = r[name]
            assert got["pilots"] == h["count"], (e, name)
            assert math.isclose(got["sum_seconds"], h["sum"], rel_tol=1e-9, abs_tol=1e-3), (e, name)
            if h["count"]:
                observed += 1
                assert _in_rank_buckets(0.5, got["p50_seconds"], h["le"], h["count"]), (e, name, got, h)
                assert _in_rank_buckets(0.9, got["p90_seconds"], h["le"], h["count"]), (e, name, got, h)
    assert observed >= 2  # the event log holds some pilots' queue (the ledger's own rule decides which)


def test_the_window_counts_the_holds_htcondor_logged_in_it(tmp_path: Path) -> None:
    from gwms_obs.parse_errors import ParseErrors
    from gwms_obs.sources import condor_event_log as cel

    factory = _factory(tmp_path / "factory")
    held = []
    for p in sorted(factory.glob("client/*/*/entry_*/condor_activity_*.log")):
        events, _ = cel.parse_buffer(p.read_bytes(), str(p), 0, ParseErrors())
        entry = p.parent.name.removeprefix("entry_")
        held += [(entry, e) for e in events if e.code == 12]
    assert held
    times = sorted(e.time for _, e in held)
    since, until = times[len(times) // 3], times[2 * len(times) // 3]
    want: dict[str, Counter[str]] = {}
    for entry, e in held:
        if since <= e.time < until:
            want.setdefault(entry, Counter())[classify(e.reason_code, e.reason_subcode, e.reason).value] += 1
    rep = Report(since=since, until=until)
    h = rep.health
    Ingest(IngestConfig(factory_dir=str(factory)), outlets=Outlets(holds=h.add_hold, times=h.add_times)).scan()
    assert {r["entry"]: r["holds_by_class"] for r in h.to_json() if r["holds"]} == {e: dict(c) for e, c in want.items()}
    cli = _report(factory, "--since", str(since), "--until", str(until))
    assert cli == {r["entry"]: r for r in h.to_json()}


def test_queue_time_is_to_the_first_execute_and_windowed_by_the_pilots_end() -> None:
    from gwms_obs.accounting.pilot import from_event_log

    h = EntryHealth(since=1000.0, until=2000.0)
    t = PilotTimes(1, 0, submitted=100.0, grid_submitted=160.0, started=900.0, ended=1500.0,
                   end_event="terminated", return_value=0, entry="E", client="c", first_started=400.0)  # fmt: skip
    acc = from_event_log(t, None)
    assert acc is not None
    h.add_times(acc, t)
    late = PilotTimes(2, 0, submitted=100.0, started=300.0, ended=2500.0, end_event="terminated", return_value=0,
                      entry="E", client="c")  # fmt: skip
    late_acc = from_event_log(late, None)
    assert late_acc is not None
    h.add_times(late_acc, late)  # ended after the window: not the report's pilot
    (row,) = h.rows()
    assert (row.queue.count, row.queue.p50) == (1, 300.0)  # 100 -> 400 (the first 001), not 900
    assert (row.grid_queue.count, row.grid_queue.p50) == (1, 240.0)


def test_quantile_is_linear_between_ranks() -> None:
    v = [float(x) for x in range(1, 11)]
    assert quantile(v, 0.5) == 5.5 and math.isclose(quantile(v, 0.9), 9.1) and math.isnan(quantile([], 0.5))
