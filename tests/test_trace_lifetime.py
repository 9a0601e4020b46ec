"""Spans beyond their pilot's life, and times outside uint64 nanoseconds (issue 29, item 13).

One pilot's 31-year script spans moved analyze's p90, p99 and mean of every
script at its entry to 10^8 s, and a 20-digit nanosecond time above 2^64 - 1
passed the spool validator though the collector refuses the whole request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.accounting.partition import Partition
from gwms_obs.accounting.pilot import PilotAccount
from gwms_obs.analysis.collect import Collector, Dataset
from gwms_obs.analysis.distributions import distributions
from gwms_obs.catalogue import Outcome
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.simulate.write.trace_spool import spool
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import lifetime as L
from gwms_obs.tracing.outbox import SpoolForwarder
from gwms_obs.tracing.spool import SpoolError, parse_spool
from tests.test_analyze import SCRIPTS, T0, fleet_collector, to_jaeger
from tests.test_trace_spool import PARENTS, glidein, line, span

DEAD = "http://127.0.0.1:9/v1/traces"
NS = 10**9
YEARS_31 = 31 * 365 * 86400
START = 1_781_000_000  # the pilot's root span starts here and lasts an hour
ABOVE_UINT64 = "99999999999999999999"  # 20 digits: the validator's pattern let it through


def s(sid: str, parent: str, name: str, start: int, end: int | str, **kw: Any) -> dict[str, Any]:
    end_ns = end if isinstance(end, str) else str(end * NS)
    return span(spanId=sid, parentSpanId=parent, name=name, startTimeUnixNano=str(start * NS),
                endTimeUnixNano=end_ns, **kw)  # fmt: skip


def outbox_span_ids(fwd: SpoolForwarder) -> list[str]:
    return sorted(
        sp["spanId"]
        for p in fwd.pending()
        for rs in json.loads(p.read_bytes())["resourceSpans"]
        for ss in rs["scopeSpans"]
        for sp in ss["spans"]
    )


def hostile_spool() -> bytes:
    """A pilot of one hour whose spool also holds a 31-year script, a 2-day one and a time above uint64."""
    root, setup = "1000000000000001", "1000000000000002"
    return (
        line(s(root, PARENTS[0], C.SPAN_PILOT, START, START + 3600))
        + line(s(setup, root, C.PHASE_SETUP, START + 10, START + 100))
        + line(s("1000000000000003", setup, "good.sh", START + 20, START + 30))
        + line(s("1000000000000004", setup, "bogus.sh", START + 30, START + 30 + YEARS_31))  # line 4
        + line(s("1000000000000005", setup, "overflow.sh", START + 30, ABOVE_UINT64))
        + line(s("1000000000000006", setup, "two_days.sh", START + 40, START + 40 + 2 * 86400))
        + line(s("1000000000000007", setup, "good2.sh", START + 40, START + 50))
    )


def test_forwarder_drops_spans_beyond_the_pilots_life_and_above_uint64_keeps_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    errors = ParseErrors()
    fwd = SpoolForwarder(DEAD, tmp_path / "ob", errors)
    data = hostile_spool()
    err = glidein(tmp_path)
    fwd(data, err)
    assert outbox_span_ids(fwd) == ["1000000000000001", "1000000000000002", "1000000000000003", "1000000000000007"]
    assert errors.counts == {("trace_spool", "beyond_pilot_life"): 2, ("trace_spool", "bad_time"): 1}
    assert fwd.stats.accepted == 1
    msgs = [r.getMessage() for r in caplog.records]
    bogus_at = data.index(b"bogus.sh")
    bogus_line = data.rindex(b"\n", 0, bogus_at) + 1
    assert any("beyond_pilot_life" in m and f"{err} at byte {bogus_line}" in m for m in msgs), msgs
    assert any("bad_time" in m and "above the uint64 range" in m and err in m for m in msgs), msgs


def test_uint64_is_the_bound_of_a_time_in_either_json_form() -> None:
    top = 2**64 - 1
    assert parse_spool(line(span(startTimeUnixNano=str(top), endTimeUnixNano=str(top)))).spans == 1
    for v in (str(top + 1), top + 1, ABOVE_UINT64):
        errors = ParseErrors()
        with pytest.raises(SpoolError, match="bad_time"):
            parse_spool(line(span(endTimeUnixNano=v)), "e", errors)
        assert errors.counts == {("trace_spool", "bad_time"): 1}


def test_a_31_year_root_is_dropped_and_bounds_nothing() -> None:
    """A root longer than any pilot is not a pilot's life: it goes, its plausible children stay."""
    root = "2000000000000001"
    data = line(s(root, PARENTS[0], C.SPAN_PILOT, START, START + YEARS_31)) + line(
        s("2000000000000002", root, C.PHASE_SETUP, START + 10, START + 3 * 86400)
    )
    errors = ParseErrors()
    sp = parse_spool(data, "e", errors)
    kept = [x["spanId"] for rs in sp.resource_spans for ss in rs["scopeSpans"] for x in ss["spans"]]
    assert kept == ["2000000000000002"] and sp.spans == 1 and sp.rejected == 1
    assert errors.counts == {("trace_spool", L.REASON): 1}


def test_parents_that_loop_have_no_root_and_do_not_hang() -> None:
    a, b = "3000000000000001", "3000000000000002"
    sp = parse_spool(line(s(a, b, "x", START, START + 5)) + line(s(b, a, "y", START, START + 5)))
    assert sp.spans == 2


# --- analyze ------------------------------------------------------------------------------------


def per_script(c: Collector | Dataset, entry: str) -> dict[str, tuple[int, float, float, float, float]]:
    """The entry's script statistics: count, p50, p90, p99, mean."""
    data = c.dataset() if isinstance(c, Collector) else c
    return {
        k.name: (d.count, d.p50, d.p90, d.p99, d.mean)
        for k, d in distributions(data.samples).items()
        if k.entry == entry and k.name in SCRIPTS
    }


def hostile_pilot(cluster: int, proc: int, script_seconds: int, life_seconds: int) -> bytes:
    """A spool of the test_analyze fleet's shape whose every script claims ``script_seconds``."""
    start = T0 + cluster * 1000 + proc * 10
    scripts = [(name, start + 3 + i, start + 3 + i + script_seconds) for i, name in enumerate(SCRIPTS)]
    resource: dict[str, str | int] = {C.SERVICE_NAME: C.SERVICE_PILOT, C.ENTRY: "entry0", C.CONDOR_CLUSTER: cluster,
                                      C.CONDOR_PROC: proc}  # fmt: skip
    return spool(seed=1, cluster=cluster, proc=proc, resource=resource, startup=start,
                 glidein_end=start + life_seconds, scripts=scripts, failed=None,
                 main=(start + 100, start + life_seconds - 100), exit_code=0)  # fmt: skip


def account(cluster: int, proc: int, start: float, lifetime: float) -> PilotAccount:
    return PilotAccount(entry="entry0", client="fe", site="Site0", cluster=cluster, proc=proc,
                        outcome=Outcome.RAN_JOBS, start=start, end=start + lifetime, cpus=1, memory_mb=None,
                        gpus=0, validation_duration=None, partition=Partition())  # fmt: skip


ERR = "/f/client/u/g/entry_entry0/job.100.99.err"


@pytest.mark.parametrize("life", [3600, YEARS_31], ids=["root-of-an-hour", "root-of-31-years"])
def test_analyze_per_script_statistics_are_unchanged_by_one_pilots_31_year_scripts_from_a_spool(life: int) -> None:
    expected = per_script(fleet_collector({}), "entry0")
    c = fleet_collector({})
    c.spool(hostile_pilot(100, 99, YEARS_31, life), ERR)
    assert per_script(c, "entry0") == expected
    assert c.errors.counts[("trace_spool", L.REASON)] >= len(SCRIPTS)


def test_analyze_per_script_statistics_are_unchanged_by_one_pilots_31_year_scripts_from_jaeger() -> None:
    """Jaeger's spans pass no spool validator: analyze bounds them itself."""
    expected = per_script(fleet_collector({}), "entry0")
    c = fleet_collector({})
    c.add_jaeger([to_jaeger(hostile_pilot(100, 99, YEARS_31, 3600))])
    assert per_script(c, "entry0") == expected
    assert c.errors.counts[("trace_spool", L.REASON)] == len(SCRIPTS)


def test_analyze_drops_spans_longer_than_the_accounting_says_the_pilot_lived() -> None:
    """Two-day scripts inside a five-day root pass the spool's bounds; the accounting knows the pilot lived an hour."""
    expected = per_script(fleet_collector({}), "entry0")
    c = fleet_collector({})
    data = hostile_pilot(100, 99, 2 * 86400, 5 * 86400)
    assert parse_spool(data).rejected == 0  # every span kept by the spool's own bounds
    c.spool(data, ERR)
    c.account(account(100, 99, T0 + 100 * 1000 + 990, 3600.0))
    d = c.dataset()
    assert per_script(d, "entry0") == expected
    # its scripts, and its main phase and condor_startup.sh, five days long too
    assert d.beyond_life == c.errors.counts[("trace_spool", L.REASON)] == len(SCRIPTS) + 2


def test_analyze_bounds_a_queue_by_the_factorys_record_not_the_nodes_life() -> None:
    """A stock factory's log-derived ``queued`` lasts from the factory's submit to the CE's execute:
    longer than the node's life, inside the factory's submit-to-end. It is kept, held to that record;
    a ``queued`` that a pilot's spool claims, with no record of the factory's, is held to the node's life."""
    from gwms_obs.analysis import spans as S
    from gwms_obs.model import PilotTimes

    c = Collector(None, None)
    node_start, hour = float(T0 + 100_000), 3600.0
    logged, spooled = account(100, 99, node_start, hour), account(101, 0, node_start, hour)
    c.account(logged)
    c.account(spooled)
    c.times(logged, PilotTimes(cluster=100, proc=99, submitted=node_start - 5 * hour, started=node_start,
                               ended=node_start + hour))  # fmt: skip

    def queued(sid: str, cluster: int, proc: int, seconds: float, from_spool: bool) -> None:
        root = (node_start - 8 * hour, node_start + hour)  # the log-derived glidein span: submit to end
        span = S.Span(trace_id="t" * 32, span_id=sid, kind=S.KIND_PHASE, name=C.LOG_PHASE_QUEUED,
                      phase=C.LOG_PHASE_QUEUED, start=node_start - seconds, duration=seconds, entry="entry0",
                      site="Site0", cluster=cluster, proc=proc, window=root)  # fmt: skip
        c.spans[("t" * 32, sid)] = (span, ("entry0", cluster, proc), from_spool, "test")

    queued("a" * 16, 100, 99, 4 * hour, False)  # the factory's record: 6 h from submit to end
    queued("b" * 16, 101, 0, 4 * hour, True)  # a spool's claim: the node lived an hour
    queued("c" * 16, 100, 99, 6 * hour + 2 * L.SLACK_SECONDS, False)  # beyond the factory's record too
    d = c.dataset()
    kept = [s for s in d.samples if s.name == C.LOG_PHASE_QUEUED]
    assert [(s.pilot, s.duration) for s in kept] == [("entry0/100.99", 4 * hour)]
    assert d.beyond_life == c.errors.counts[("trace_spool", L.REASON)] == 2
