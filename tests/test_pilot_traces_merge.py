"""A pilot also traced live: its log spans go into its own trace, leaving out what its spool traced.

The live end-to-end test is tests/test_pilot_traces_merge_live.py; these build the spans
directly (outputs/pilot_traces.build with an Issued) for each shape of returned spool.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest

from gwms_obs.accounting.pilot import from_glidein
from gwms_obs.ingest.books import PilotFacts
from gwms_obs.model import PilotTimes
from gwms_obs.outputs import pilot_traces as P
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing.ledger import Issued, LedgerIndex, append_record
from tests.test_pilot_traces import FACTORY, Box, Pilot, _attrs, _build, _job, _pilot

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SUBMIT = "00f067aa0ba902b7"
GLIDEIN_SUBMITS = ["1111111111111111", "2222222222222222"]  # procs 0 and 1
OWN_ALL = {C.SPAN_PILOT: "a000000000000001", **{p: f"a00000000000001{i}" for i, p in enumerate(C.PHASES)}}
WORKER_NODE = (P.SPAN_RUNNING, P.SPAN_VALIDATION, P.SPAN_CONDOR, P.SPAN_CLEANUP)


def _issued(proc: int = 0) -> Issued:
    return Issued(7, proc, TRACE, GLIDEIN_SUBMITS[proc], frozenset([SUBMIT, *GLIDEIN_SUBMITS]), {C.ENTRY: "E"})


def _names(p: Pilot) -> list[str]:
    return sorted(s["name"] for s in p.spans)


def test_a_stock_pilot_is_unchanged_by_the_merge_arguments() -> None:
    out, err = _pilot([_job(200, 1200)])
    assert _build(out, err).spans == _build(out, err, issued=None, own=OWN_ALL).spans


def test_a_spool_that_came_back_whole_leaves_the_logs_the_queue_the_jobs_and_the_accounting() -> None:
    out, err = _pilot([_job(200, 1200), _job(1300, 2600)])
    t0 = out.startup_time or 0
    times = PilotTimes(7, 0, submitted=t0 - 900, started=t0 - 30)
    p = _build(out, err, times, issued=_issued(), own=OWN_ALL)
    assert {s["traceId"] for s in p.spans} == {TRACE}
    record = p.one(P.SPAN_RECORD)
    assert record["parentSpanId"] == GLIDEIN_SUBMITS[0]  # under the factory's glidein submit span
    assert any(k.startswith(P.CPU_SECONDS) for k in _attrs(record["attributes"]))
    assert p.named(C.SPAN_PILOT) == [] and not any(p.named(n) for n in WORKER_NODE)
    assert p.one(P.SPAN_QUEUED)["parentSpanId"] == record["spanId"]
    jobs = p.named(P.SPAN_JOB)
    assert len(jobs) == 2 and {j["parentSpanId"] for j in jobs} == {OWN_ALL[C.PHASE_MAIN]}


def test_no_spool_back_means_the_pilot_sent_its_phases_itself() -> None:
    out, err = _pilot([_job(200, 1200)])
    p = _build(out, err, issued=_issued(), own=None)
    assert _names(p) == [P.SPAN_RECORD, P.SPAN_JOB]
    assert p.one(P.SPAN_JOB)["parentSpanId"] == p.one(P.SPAN_RECORD)["spanId"]


def test_a_spool_without_main_keeps_the_logs_condor_under_the_pilots_root_and_no_phase_twice() -> None:
    out, err = _pilot([_job(200, 1200)])
    own = {k: v for k, v in OWN_ALL.items() if k not in (C.PHASE_MAIN, C.PHASE_CLEANUP)}  # killed in setup
    p = _build(out, err, issued=_issued(), own=own)
    condor = p.one(P.SPAN_CONDOR)
    assert condor["parentSpanId"] == own[C.SPAN_PILOT]
    assert p.one(P.SPAN_JOB)["parentSpanId"] == condor["spanId"]
    assert p.one(P.SPAN_CLEANUP)["parentSpanId"] == own[C.SPAN_PILOT]
    assert p.named(P.SPAN_VALIDATION) == [] and p.named(P.SPAN_RUNNING) == []
    names = _names(p) + list(own)
    assert len(names) == len(set(names))


def test_a_failed_validation_the_pilot_traced_is_named_on_the_record() -> None:
    out, err = _pilot([])
    out = dataclasses.replace(out, condor_started=False, condor_start=None, condor_end=None, failure="WN_RESOURCE")
    out.metrics["TestID"] = "check_os"
    own = {k: v for k, v in OWN_ALL.items() if k != C.PHASE_MAIN}
    p = _build(out, err, issued=_issued(), own=own)
    record = p.one(P.SPAN_RECORD)
    assert record["status"]["code"] == 2 and "check_os" in record["status"]["message"]
    assert [e["name"] for e in record.get("events", [])] == [P.EVENT_VALIDATION_FAILED]
    assert _attrs(record["attributes"])[P.FAILED_TEST] == "check_os"
    assert p.named(P.SPAN_VALIDATION) == []


def test_two_glideins_of_one_cluster_share_the_trace_never_a_span_id() -> None:
    out, err = _pilot([_job(200, 1200)])
    a = _build(out, err, issued=_issued(0), own=None)
    out1 = dataclasses.replace(out, proc=1, path="job.7.1.out")
    acc = from_glidein(out1, err, entry="E", client="C")
    assert acc is not None
    built = P.build(acc, PilotFacts("glidein_out", out1, err), FACTORY, issued=_issued(1), own=None)
    assert built is not None
    b = Pilot(json.loads(built[0]))
    assert {s["spanId"] for s in a.spans}.isdisjoint(s["spanId"] for s in b.spans)
    assert {s["traceId"] for s in a.spans + b.spans} == {TRACE}
    # and again the same ids: a rescan sends nothing new
    assert _build(out, err, issued=_issued(0), own=None).spans == a.spans


def test_a_directory_without_a_ledger_is_looked_at_once_a_second_and_a_new_ledger_is_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stock factory's directory is stat'ed once per LEDGER_RECHECK_SECONDS, not once a pilot;
    a ledger written there afterwards is read from the next look on."""
    out, err = _pilot([_job(200, 1200)])
    clock = [1000.0]
    stats: list[str] = []
    real_exists = os.path.exists

    def exists(path: str) -> bool:
        stats.append(path)
        return real_exists(path)

    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(os.path, "exists", exists)
    box = Box()
    traces = P.PilotTraces(box, FACTORY, ledger=LedgerIndex(ParseErrors()), own_spans=lambda *a: OWN_ALL)
    here = dataclasses.replace(out, path=str(tmp_path / "job.7.0.out"))

    def count() -> None:
        acc = from_glidein(here, err, entry="E", client="C")
        assert acc is not None
        traces(acc, PilotFacts("glidein_out", here, err))

    for _ in range(5):
        count()
    assert len(stats) == 1 and traces.merged == 0
    append_record(tmp_path, 7, TRACE, SUBMIT, GLIDEIN_SUBMITS, {C.ENTRY: "E"})
    clock[0] += P.LEDGER_RECHECK_SECONDS - 0.01
    count()
    assert len(stats) == 1 and traces.merged == 0
    clock[0] += 0.02
    count()
    count()
    assert len(stats) == 3 and traces.merged == 2  # the ledger is there: looked up each pilot


def test_pilot_traces_looks_the_pilot_up_in_the_ledger_beside_its_files(tmp_path: Path) -> None:
    append_record(tmp_path, 7, TRACE, SUBMIT, GLIDEIN_SUBMITS, {C.ENTRY: "E"})
    out, err = _pilot([_job(200, 1200)])
    asked: list[tuple[str, int, int]] = []

    def own_spans(log_dir: str, cluster: int, proc: int) -> dict[str, str] | None:
        asked.append((log_dir, cluster, proc))
        return OWN_ALL

    box = Box()
    traces = P.PilotTraces(box, FACTORY, ledger=LedgerIndex(ParseErrors()), own_spans=own_spans)
    for o in (dataclasses.replace(out, path=str(tmp_path / "job.7.0.out")), out):  # the second: no ledger there
        acc = from_glidein(o, err, entry="E", client="C")
        assert acc is not None
        traces(acc, PilotFacts("glidein_out", o, err))
    traces.flush()
    assert traces.built == 2 and traces.merged == 1 and asked == [(str(tmp_path), 7, 0)]
    live, stock = (Pilot(rs) for rs in box.requests[0]["resourceSpans"])
    assert {s["traceId"] for s in live.spans} == {TRACE} and live.named(P.SPAN_RECORD)
    assert stock.named(C.SPAN_PILOT) and TRACE not in {s["traceId"] for s in stock.spans}
