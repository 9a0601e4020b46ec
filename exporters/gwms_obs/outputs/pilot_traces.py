"""One trace per counted pilot, built from the factory's own files (no GlideinWMS change needed).

Every fact a pilot's trace needs is already read to account it: the event
log's submit, execute and end; the .out's start, end of validation, HTCondor's
start and end, exit code and OSGTestResult; the .err's user jobs (start, end,
exit, cores, memory, GPUs); the accounting's category of each job. This module
turns what the counting stage read (``ingest.books.PilotFacts``) and the
pilot's account into OTLP/JSON spans:

    glidein                 submit (or start) → the pilot's end as the factory saw it
    ├── queued              submit → first execute (event log)
    │   └── held            one per hold before it: hold → release (or the queue's end)
    └── running             start → end on the worker node (a later hold, an eviction: events)
        ├── validation      start → "Last script starting" (ERROR naming the failing test)
        ├── condor          HTCondor's start → end
        │   └── job         one per user job (category, exit, cores, memory, GPUs, VO job id)
        └── cleanup         HTCondor's end → the glidein's end

Ids are deterministic (:func:`pilot_trace_id`, docs/tracing.md "Pilot traces
from the factory's files"), so sending a pilot again after a restart or a
rescan writes the same spans, never new ones. The requests go into the span
forwarder's outbox (``tracing.outbox.SpoolForwarder.enqueue``), scrubbed and
bounded as a pilot's own spool is; the scan never waits on the network.

The text is written by the compiled module where it is installed: a stock pilot whole in one
call (``native/src/pilot_trace.rs``, :func:`encode`), a pilot traced live span by span
(``native/src/trace.rs``), the same bytes at a sixth to a third of the CPU. This module's
encoder is the reference and writes whatever the module declines; what is policy (a failed
validation's attributes, a hold's class, scrubbing) stays here, called from the compiled call
when a pilot has it (tests/test_native_trace.py holds the two byte-equal).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import socket
import threading
import time
from json.encoder import encode_basestring_ascii
from typing import Any, Final, Protocol

from .. import native
from ..accounting.partition import DEFAULT_RULES, Rules, _classify_all, classify_job
from ..accounting.pilot import PilotAccount
from ..catalogue import Category, Source
from ..ingest.books import PilotFacts
from ..model import HoldInterval, Job, PilotTimes
from ..parse_errors import ParseErrors
from ..sources import descript
from ..sources.hold_reasons import classify
from ..tracing import conventions as C
from ..tracing.ledger import LEDGER_NAME, Issued, LedgerIndex
from ..tracing.redact import MAX_VALUE, Scrubber, Tally

log = logging.getLogger("gwms_obs.outputs.pilot_traces")

ID_VERSION: Final = "gwms-obs pilot trace 1"  # the first line hashed into every pilot trace id
MAX_JOB_SPANS: Final = 100  # user jobs with a span each; the rest are summed in one span
BATCH_PILOTS: Final = 200  # pilots per outbox request
# A directory seen without a trace ledger is not looked at again for this long: a stat a pilot was
# ~15 us of a scan. A pilot is in the ledger from its submit, minutes at least before its output
# is counted, so a ledger that appears meanwhile is seen in time for every pilot it names.
LEDGER_RECHECK_SECONDS: Final = 1.0
MAX_NO_LEDGER: Final = 10_000  # directories remembered without a ledger (a factory has one per entry and user)
SCOPE: Final = {"name": "gwms_obs.pilot_traces", "version": C.VERSION}
_SCOPE: Final = json.dumps(SCOPE, separators=(",", ":"))

# Names of the spans and attributes this module writes (docs/tracing.md). The phases' names are
# the conventions' (each phase span carries gwms.phase = its name, as the live tracer's do).
SPAN_QUEUED: Final = C.LOG_PHASE_QUEUED
SPAN_HELD: Final = C.LOG_PHASE_HELD
SPAN_RUNNING: Final = "running"
SPAN_VALIDATION: Final = C.LOG_PHASE_VALIDATION
SPAN_CONDOR: Final = C.LOG_PHASE_CONDOR
SPAN_CLEANUP: Final = C.PHASE_CLEANUP
SPAN_JOB: Final = "job"
SPAN_JOBS_REST: Final = "jobs (summary)"
# The root of the logs' part of a pilot also traced live (its own root is the pilot's "glidein").
SPAN_RECORD: Final = "glidein record"
TRACE_SOURCE: Final = C.LOG_TRACE_SOURCE
OUTCOME: Final = C.LOG_OUTCOME
CPU_SECONDS: Final = C.LOG_CPU_SECONDS
GPU_SECONDS: Final = C.LOG_GPU_SECONDS
ACCURACY: Final = C.LOG_ACCURACY
JOB_ID: Final = C.LOG_JOB_ID
JOB_CATEGORY: Final = C.LOG_JOB_CATEGORY
JOB_CPUS: Final = C.LOG_JOB_CPUS
JOB_CPU_SECONDS: Final = C.LOG_JOB_CPU_SECONDS
JOB_CPU_USED: Final = C.LOG_JOB_CPU_USED
JOB_MEMORY: Final = C.LOG_JOB_MEMORY
JOB_MEMORY_USED: Final = C.LOG_JOB_MEMORY_USED
JOB_GPUS: Final = C.LOG_JOB_GPUS
JOB_SIGNAL: Final = C.LOG_JOB_SIGNAL
JOB_COUNT: Final = C.LOG_JOB_COUNT
RUN_CPUS: Final = "gwms.cpus"  # the running span's: the pilot's cores
HOLD_REASON: Final = C.LOG_HOLD_REASON
HOLD_CODE: Final = C.LOG_HOLD_CODE
HOLD_SUBCODE: Final = C.LOG_HOLD_SUBCODE
HOLD_CLASS: Final = C.LOG_HOLD_CLASS
HOLDS_DROPPED: Final = C.LOG_HOLDS_DROPPED
FAILED_TEST: Final = C.LOG_FAILED_TEST
FAILURE: Final = C.LOG_FAILURE
FAILURE_DETAIL: Final = C.LOG_FAILURE_DETAIL
EXIT_CODE: Final = C.PROCESS_EXIT_CODE
EVENT_PREEMPTED: Final = "preempted"
EVENT_VALIDATION_FAILED: Final = "validation_failed"
EVENT_REMOVED: Final = "removed"
EVENT_GRID_SUBMIT: Final = "grid_submit"
EVENT_HELD: Final = "held"
EVENT_EVICTED: Final = "evicted"
# HTCondor-G polls a CE's jobs every 60 s (baseresource.cpp DEFAULT_JOB_POLL_INTERVAL), so its
# events lag the worker node: a hold or 004 up to this long after the node's end is that run's.
CE_POLL_LAG: Final = 120.0
NS: Final = 1_000_000_000
# A GlobalJobId as HTCondor writes it (schedd#cluster.proc#qdate): nothing secret-shaped, so no regex pass.
_JOB_ID = re.compile(r"[A-Za-z0-9_.@:-]{1,255}#[0-9]{1,12}\.[0-9]{1,9}#[0-9]{1,12}")


def pilot_trace_id(factory: str, entry: str, cluster: int, proc: int, start: float) -> str:
    """The pilot's trace id: SHA-256 of its identity, first 16 bytes, lower-case hex.

    The identity is what every factory-side source names: the factory, the
    entry (one schedd per entry, so entry + cluster.proc is the job on its
    schedd), the job id, and the UTC day the pilot started, which keeps ids
    apart when a schedd's cluster ids start over.
    """
    day = time.strftime("%Y-%m-%d", time.gmtime(start))
    key = f"{ID_VERSION}\n{factory}\n{entry}\n{cluster}.{proc}\n{day}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def span_id(trace_id: str, path: str) -> str:
    """A span's id from its trace and its place in it (``running/condor/job/3``); never all zero."""
    h = hashlib.sha256(f"{trace_id}/{path}".encode()).hexdigest()[:16]
    return h if h != "0" * 16 else "0" * 15 + "1"


_ZERO_ID: Final = "0" * 16
_ONE_ID: Final = "0" * 15 + "1"
_EVENTS: Final = '"events":['
_sha256 = hashlib.sha256


def _ns(t: float) -> str:
    return str(max(0, round(t * NS)))


_dumps = encode_basestring_ascii  # a str as a JSON string literal, as json.dumps writes it (its C encoder)
_isfinite = math.isfinite


# The encoder writes OTLP/JSON text straight from the facts: dicts and json.dumps cost twice as
# much, and a pilot is ~21 spans and ~170 values (a backfill: millions). One f-string a value,
# exact types (a bool is an int to isinstance), None and non-finite floats left out.
def _attr(key: str, v: object) -> str:
    """One OTLP/JSON KeyValue, encoded. ``key`` is one of ours (plain ASCII)."""
    t = type(v)
    if t is str:
        return f'{{"key":"{key}","value":{{"stringValue":{_dumps(v)}}}}}'  # type: ignore[arg-type]
    if t is int:
        return f'{{"key":"{key}","value":{{"intValue":"{v}"}}}}'
    if t is float:
        return f'{{"key":"{key}","value":{{"doubleValue":{v!r}}}}}' if _isfinite(v) else ""  # type: ignore[arg-type]
    if t is bool:
        return f'{{"key":"{key}","value":{{"boolValue":{"true" if v else "false"}}}}}'
    if v is None:
        return ""
    return f'{{"key":"{key}","value":{{"stringValue":{_dumps(str(v))}}}}}'


def _attr_c(key: str, v: object) -> str:
    """:func:`_attr` and a comma, or "" when it writes nothing."""
    x = _attr(key, v)
    return f"{x}," if x else ""


def _int_c(key: str, v: object) -> str:
    """:func:`_attr_c` for a value that is an int but for a hostile file."""
    return f'{{"key":"{key}","value":{{"intValue":"{v}"}}}},' if type(v) is int else _attr_c(key, v)


def _attrs(attrs: dict[str, object] | None) -> str:
    return ",".join(x for k, v in attrs.items() if (x := _attr(k, v))) if attrs else ""


# The compiled encoder (native/src/trace.rs): the same text from the same facts, several times
# faster; None where the module is absent, or a call returns None (it declines what it does not
# reproduce exactly) and the Python encoder above, the reference, writes it.
_NATIVE: Final = native.core


def _events(evs: list[tuple[str, float, dict[str, object]]]) -> str:
    return ",".join(f'{{"name":"{n}","timeUnixNano":"{_ns(t)}","attributes":[{_attrs(a)}]}}' for n, t, a in evs)


class _Trace:
    """The spans of one pilot, written as OTLP/JSON text (see _attr)."""

    def __init__(self, trace_id: str, prefix: str = "") -> None:
        self.trace_id = trace_id
        self.prefix = prefix  # a pilot in its cluster's live trace: its spans' places start with its job id
        self.spans: list[str] = []
        # path -> span id, each hashed once; "^name": a span of the factory's or the pilot's own
        self.ids: dict[str, str] = {}
        self.hashed = f"{trace_id}/{prefix}"  # span_id's input, but for the span's path
        self.head = f'{{"traceId":"{trace_id}","spanId":"'

    def span_id(self, path: str) -> str:
        """:func:`span_id` of the span at ``path`` (inlined: one a span)."""
        h = _sha256((self.hashed + path).encode()).digest()[:8].hex()
        return h if h != _ZERO_ID else _ONE_ID

    def add(
        self,
        path: str,
        parent: str | None,
        name: str,
        start: float,
        end: float,
        attrs: dict[str, object] | None = None,
        *,
        error: str | None = None,
        events: list[tuple[str, float, dict[str, object]]] | None = None,
    ) -> str:
        """Add a span (``name``: one of ours); returns its path, its children's ``parent``. The
        job spans are written by :func:`_jobs`, inlined."""
        if _NATIVE is not None:
            pid = self.ids[parent] if parent is not None else ""
            got = _NATIVE.trace_span(self.hashed + path, self.head, pid, name, start, end, attrs, error, events)
            if got is not None:
                self.ids[path], text = got
                self.spans.append(text)
                return path
        sid = self.ids[path] = self.span_id(path)
        kvs = _attrs(attrs)
        evs = f',"events":[{_events(events)}]' if events else ""
        self.spans.append(
            f'{self.head}{sid}","parentSpanId":"{self.ids[parent] if parent is not None else ""}",'
            f'"name":"{name}","kind":1,"startTimeUnixNano":"{_ns(start)}",'
            f'"endTimeUnixNano":"{_ns(max(start, end))}","attributes":[{kvs}]{_status(error)}{evs}}}'
        )
        return path


def _status(error: str | None) -> str:
    return "" if error is None else f',"status":{{"code":2,"message":{_dumps(error)}}}'


# What trace_jobs writes (native/src/trace.rs, its Names' order): the job span's name, its
# attributes', its events' and the category whose jobs are preempted.
_NATIVE_JOB_NAMES: Final = [
    SPAN_JOB, JOB_ID, JOB_CATEGORY, JOB_CPUS, JOB_CPU_SECONDS, JOB_CPU_USED, JOB_MEMORY, JOB_MEMORY_USED,
    JOB_GPUS, JOB_SIGNAL, EXIT_CODE, EVENT_PREEMPTED, EVENT_EVICTED, Category.PREEMPTION_BADPUT.value,
]  # fmt: skip
# What trace_pilot writes a stock pilot's spans with (native/src/pilot_trace.rs, PilotNames).
_NATIVE_PILOT_NAMES: Final = {
    "SPAN_PILOT": C.SPAN_PILOT, "SPAN_QUEUED": SPAN_QUEUED, "SPAN_HELD": SPAN_HELD, "SPAN_RUNNING": SPAN_RUNNING,
    "SPAN_VALIDATION": SPAN_VALIDATION, "SPAN_CONDOR": SPAN_CONDOR, "SPAN_CLEANUP": SPAN_CLEANUP,
    "SPAN_JOBS_REST": SPAN_JOBS_REST, "OUTCOME": OUTCOME, "ACCURACY": ACCURACY, "CPU_SECONDS": CPU_SECONDS,
    "GPU_SECONDS": GPU_SECONDS, "EXIT_CODE": EXIT_CODE, "HOLDS_DROPPED": HOLDS_DROPPED, "HOLD_REASON": HOLD_REASON,
    "PHASE": C.PHASE, "SITE": C.SITE, "CPUS": RUN_CPUS, "JOB_COUNT": JOB_COUNT, "JOB_CPU_SECONDS": JOB_CPU_SECONDS,
    "EVENT_REMOVED": EVENT_REMOVED, "EVENT_HELD": EVENT_HELD, "EVENT_EVICTED": EVENT_EVICTED,
    "EVENT_GRID_SUBMIT": EVENT_GRID_SUBMIT, "EVENT_VALIDATION_FAILED": EVENT_VALIDATION_FAILED,
    "SERVICE_NAME": C.SERVICE_NAME, "SERVICE_PILOT": C.SERVICE_PILOT, "CONVENTIONS": C.CONVENTIONS,
    "VERSION": C.VERSION, "FACTORY": C.FACTORY, "ENTRY": C.ENTRY, "CLIENT": C.CLIENT,
    "CONDOR_CLUSTER": C.CONDOR_CLUSTER, "CONDOR_PROC": C.CONDOR_PROC, "TRACE_SOURCE": TRACE_SOURCE,
    "SOURCE_EVENT_LOG": "condor_event_log", "GOODPUT": Category.GOODPUT.value,
    "MISCONFIGURATION": Category.MISCONFIGURATION_BADPUT.value,
}  # fmt: skip
# A job's category, encoded once (and its value: an enum's .value is a descriptor call, ~0.4 us).
_CATEGORY_KV: Final = {c: _attr(JOB_CATEGORY, c.value) for c in Category}
_CATEGORY_VALUE: Final = {c: c.value for c in Category}


_encoders: dict[tuple[str, float, float, int], Any] = {}  # (factory, rules, cap) -> its PilotEncoder


def _encoder(factory: str, rules: Rules, max_job_spans: int) -> Any:
    """The compiled encoder of this factory and rule set (made once), or None where it cannot be."""
    key = (factory, rules.grace_seconds, rules.early_failure_seconds, max_job_spans)
    enc = _encoders.get(key, False)
    if enc is False:
        if len(_encoders) >= 16:  # a factory has one; tests make a few
            _encoders.clear()
        try:
            enc = _NATIVE.PilotEncoder(  # type: ignore[union-attr]
                _NATIVE_PILOT_NAMES, _NATIVE_JOB_NAMES, factory, float(rules.grace_seconds),
                float(rules.early_failure_seconds), max_job_spans, CE_POLL_LAG, MAX_VALUE, ID_VERSION, _SCOPE,
                _failure, _hold_attrs, _holds,
            )  # fmt: skip
        except (ValueError, TypeError, KeyError, OverflowError, UnicodeError):  # e.g. a lone surrogate in the name
            enc = None
        _encoders[key] = enc
    return enc


def _clamp(t: float | None, lo: float, hi: float) -> float | None:
    return None if t is None else min(max(t, lo), hi)


def build(
    acc: PilotAccount,
    facts: PilotFacts,
    factory: str,
    *,
    rules: Rules = DEFAULT_RULES,
    max_job_spans: int = MAX_JOB_SPANS,
    scrub: Scrubber | None = None,
    issued: Issued | None = None,
    own: dict[str, str] | None = None,
) -> tuple[str, int] | None:
    """One pilot's ResourceSpans, encoded as OTLP/JSON, and its span count; None without a key.

    Every text a pilot (or a CE) wrote passes ``scrub`` (the spool's masking
    and bounds; its tally says what changed); the rest is ours or the factory's.

    ``issued``: the pilot was issued a live trace (the factory's trace ledger). Its spans then
    go into that trace, under the factory's ``glidein submit`` span, rooted at a
    ``glidein record`` span, and add only what the pilot cannot trace itself: ``own`` names
    the phases its returned spool had (phase -> span id, the root as ``glidein``; None: no
    spool came back, so it sent its spans itself), and each log span standing for one of
    them is left out (docs/tracing.md, "A pilot also traced live").
    """
    got = encode(acc, facts, factory, rules=rules, max_job_spans=max_job_spans, scrub=scrub, issued=issued, own=own)
    return None if got is None else (got[0].decode(), got[1])


def encode(
    acc: PilotAccount,
    facts: PilotFacts,
    factory: str,
    *,
    rules: Rules = DEFAULT_RULES,
    max_job_spans: int = MAX_JOB_SPANS,
    scrub: Scrubber | None = None,
    issued: Issued | None = None,
    own: dict[str, str] | None = None,
) -> tuple[bytes, int] | None:
    """:func:`build`'s text as the bytes a request is made of (what the sink queues): a stock pilot's
    straight from the compiled encoder, with no str made of them."""
    if acc.cluster is None or acc.proc is None:
        return None
    sc = scrub if scrub is not None else Scrubber()
    if issued is None and (got := _compiled(acc, facts, factory, rules, max_job_spans, sc)) is not None:
        return got
    text, n = _build(acc, facts, factory, rules, max_job_spans, sc, issued, own)
    return text.encode(), n


def _compiled(
    acc: PilotAccount, facts: PilotFacts, factory: str, rules: Rules, max_job_spans: int, sc: Scrubber
) -> tuple[bytes, int] | None:
    """A stock pilot's ResourceSpans in one compiled call (native/src/pilot_trace.rs), encoded; None
    where the module is absent or declines, the scrubber's tally then as it was."""
    if _NATIVE is None or (enc := _encoder(factory, rules, max_job_spans)) is None:
        return None
    tally = sc.tally
    redacted, truncated = tally.redacted, tally.truncated
    got: tuple[bytes, int] | None = _NATIVE.trace_pilot(enc, acc, facts, sc)
    if got is None:
        tally.redacted, tally.truncated = redacted, truncated
    return got


def _build(
    acc: PilotAccount,
    facts: PilotFacts,
    factory: str,
    rules: Rules,
    max_job_spans: int,
    sc: Scrubber,
    issued: Issued | None,
    own: dict[str, str] | None,
) -> tuple[str, int]:
    """:func:`build` in Python, span by span (the reference; each span compiled where it can be)."""
    assert acc.cluster is not None and acc.proc is not None  # encode's caller's check: a pilot with a key
    out, err, times = facts.out, facts.err, facts.times
    if issued is None:
        tr = _Trace(pilot_trace_id(factory, acc.entry, acc.cluster, acc.proc, acc.start))
    else:
        tr = _Trace(issued.trace_id, f"glidein/{acc.cluster}.{acc.proc}/")
        tr.ids["^submit"] = issued.parent_span_id
        tr.ids.update((f"^{k}", v) for k, v in (own or {}).items())
    skip = _own_phases(issued, own)
    submitted = times.submitted if times is not None else None
    start = min(acc.start, submitted) if submitted is not None else acc.start
    end = max(acc.end, times.ended) if times is not None and times.ended is not None else acc.end
    sources = [facts.source]
    if times is not None and facts.source != "condor_event_log":
        sources.append("condor_event_log")

    root_attrs: dict[str, object] = {OUTCOME: acc.outcome.value, ACCURACY: acc.partition.accuracy.value}
    for cat, v in sorted(acc.partition.cpu.items()):
        root_attrs[CPU_SECONDS + cat.value] = float(v)
    for cat, v in sorted(acc.partition.gpu.items()):
        root_attrs[GPU_SECONDS + cat.value] = float(v)
    root_events: list[tuple[str, float, dict[str, object]]] = []
    root_error = None
    if out is not None and out.exit_code not in (None, 0):
        root_attrs[EXIT_CODE] = out.exit_code
        root_error = f"exit code {out.exit_code}"
    if times is not None and times.end_event == "aborted" and times.ended is not None:
        # the last hold's reason, which the factory removed it for (scrubbed here only: ~40 us a text)
        held_reason = sc.text(times.held_reason, MAX_VALUE) if times.held_reason else None
        root_events.append((EVENT_REMOVED, times.ended, {HOLD_REASON: held_reason}))

    # Holds (event log): before the first execute, a held span in the queue; after it, a held
    # event on the running span when the worker node's run holds it, else on the root.
    run_start = acc.start
    first: float | None = None
    run_events: list[tuple[str, float, dict[str, object]]] = []
    queue_holds: list[tuple[HoldInterval, dict[str, object]]] = []
    evictions: tuple[float, ...] = ()
    if times is not None:
        first = times.first_started if times.first_started is not None else times.started
        for h in _holds(times):
            attrs = _hold_attrs(h, sc)
            if times.submitted is not None and (first is None or h.held < first):
                queue_holds.append((h, attrs))
            elif run_start <= h.held <= acc.end + CE_POLL_LAG:
                run_events.append((EVENT_HELD, min(h.held, acc.end), attrs))
            else:
                root_events.append((EVENT_HELD, h.held, attrs))
        if times.holds_dropped:
            root_attrs[HOLDS_DROPPED] = times.holds_dropped
        evictions = times.evictions
        for t in evictions:
            if run_start <= t <= acc.end + CE_POLL_LAG:
                run_events.append((EVENT_EVICTED, min(t, acc.end), {}))
            else:
                root_events.append((EVENT_EVICTED, t, {}))
    if SPAN_RUNNING in skip:  # the pilot's own root stands for running: its events go on ours
        root_events += run_events
    if SPAN_VALIDATION in skip and (failed := _failure(acc, facts, sc)) is not None:
        attrs, error, at = failed
        root_attrs.update(attrs)
        root_events.append((EVENT_VALIDATION_FAILED, min(max(at or acc.end, acc.start), acc.end), attrs))
        root_error = error
    root = tr.add(
        "",
        "^submit" if issued is not None else None,
        SPAN_RECORD if issued is not None else C.SPAN_PILOT,
        start,
        end,
        root_attrs,
        error=root_error,
        events=sorted(root_events, key=lambda x: x[1]) if issued is not None else root_events,
    )

    # queued: the factory's submit to the CE's first execute (the event log only)
    if times is not None and times.submitted is not None:
        q_end = first if first is not None else (times.ended or end)
        q_end = max(times.submitted, min(q_end, end))
        ev: list[tuple[str, float, dict[str, object]]] = []
        if times.grid_submitted is not None:
            ev.append((EVENT_GRID_SUBMIT, times.grid_submitted, {}))
        q = tr.add(SPAN_QUEUED, root, SPAN_QUEUED, times.submitted, q_end, {C.PHASE: SPAN_QUEUED}, events=ev)
        for i, (h, attrs) in enumerate(queue_holds):
            held_at = max(times.submitted, min(h.held, q_end))
            held_end = min(h.released, q_end) if h.released is not None else q_end
            path = f"{q}/held" if i == 0 else f"{q}/held/{i}"  # the first keeps the id it had as the only one
            tr.add(path, q, SPAN_HELD, held_at, held_end, {C.PHASE: SPAN_HELD, **attrs})

    # running: the worker node's part (a pilot traced live: its own root, when it has one)
    if SPAN_RUNNING not in skip:
        run = tr.add(
            SPAN_RUNNING,
            root,
            SPAN_RUNNING,
            run_start,
            acc.end,
            {C.SITE: acc.site, RUN_CPUS: acc.cpus},
            events=sorted(run_events, key=lambda x: x[1]),
        )
    else:
        run = f"^{C.SPAN_PILOT}" if f"^{C.SPAN_PILOT}" in tr.ids else root
    lo, hi = run_start, acc.end
    condor_start = condor_end = None
    if acc.condor_started:
        if out is not None:
            condor_start = _clamp(out.condor_start, lo, hi)
            condor_end = _clamp(out.condor_end if out.condor_end is not None else hi, lo, hi)
        elif acc.condor_duration is not None:  # completed_jobs: HTCondor put last (as the accounting does)
            condor_end, condor_start = hi, max(lo, hi - acc.condor_duration)
    val_end = condor_start
    if val_end is None and out is not None and out.validation_end is not None:
        val_end = _clamp(out.validation_end, lo, hi)
    if val_end is None and acc.validation_duration is not None:
        val_end = min(hi, lo + acc.validation_duration)
    if not acc.condor_started and facts.source != "condor_event_log":
        # Validation failed: up to the failing script's end (the .err's long XML), else the whole run.
        ends = [x.end for x in err.scripts if not x.ok and x.end is not None] if err is not None else []
        val_end = _clamp(ends[0], lo, hi) if ends else hi
    if val_end is not None and SPAN_VALIDATION not in skip:
        _validation(tr, run, lo, val_end, acc, facts, sc)
    if condor_start is not None and condor_end is not None:
        if SPAN_CONDOR not in skip:
            condor = tr.add(f"{run}/{SPAN_CONDOR}", run, SPAN_CONDOR, condor_start, condor_end, {C.PHASE: SPAN_CONDOR})
        else:  # the user jobs go under the pilot's own main phase (HTCondor's), else under our root
            condor = f"^{C.PHASE_MAIN}" if f"^{C.PHASE_MAIN}" in tr.ids else root
        if out is not None and err is not None and err.jobs:
            _jobs(tr, condor, err.jobs, condor_start, condor_end, acc, rules, max_job_spans, sc, evictions)
        elif acc.jobs:
            tr.add(f"{condor}/jobs", condor, SPAN_JOBS_REST, condor_start, condor_end, {JOB_COUNT: acc.jobs})
        if condor_end < hi and SPAN_CLEANUP not in skip:
            tr.add(f"{run}/{SPAN_CLEANUP}", run, SPAN_CLEANUP, condor_end, hi, {C.PHASE: SPAN_CLEANUP})
    elif val_end is not None and val_end < hi and SPAN_CLEANUP not in skip:
        tr.add(f"{run}/{SPAN_CLEANUP}", run, SPAN_CLEANUP, val_end, hi, {C.PHASE: SPAN_CLEANUP})

    resource: dict[str, object] = {
        C.SERVICE_NAME: C.SERVICE_PILOT,
        C.CONVENTIONS: C.VERSION,
        C.FACTORY: factory,
        C.ENTRY: acc.entry[:MAX_VALUE],  # the factory's names (its directories, its descript)
        C.CLIENT: acc.client[:MAX_VALUE],
        C.SITE: acc.site[:MAX_VALUE],
        C.CONDOR_CLUSTER: acc.cluster,
        C.CONDOR_PROC: acc.proc,
        TRACE_SOURCE: "+".join(sources),
    }
    kvs = _NATIVE.trace_attrs(resource) if _NATIVE is not None else None
    encoded = (
        '{"resource":{"attributes":['
        + (kvs if kvs is not None else _attrs(resource))
        + ']},"scopeSpans":[{"scope":'
        + _SCOPE
        + ',"spans":['
        + ",".join(tr.spans)
        + "]}]}"
    )
    return encoded, len(tr.spans)


def _holds(times: PilotTimes) -> tuple[HoldInterval, ...]:
    """The pilot's holds; a PilotTimes from before holds were kept has only its last, if it ended held."""
    if times.holds:
        return times.holds
    if times.end_event == "held" and times.ended is not None:
        return (HoldInterval(times.ended, None, None, None, times.held_reason),)
    return ()


def _hold_attrs(h: HoldInterval, sc: Scrubber) -> dict[str, object]:
    """A hold's attributes: its codes, its class, its reason (the CE's words: scrubbed and bounded)."""
    return {
        HOLD_CODE: h.code,
        HOLD_SUBCODE: h.subcode,
        HOLD_CLASS: classify(h.code, h.subcode, h.reason).value,
        HOLD_REASON: sc.text(h.reason, MAX_VALUE) if h.reason else None,
    }


# A log span and the pilot's own phases that stand for it (gwms-trace.sh's, docs/tracing.md "Names").
_STANDS_FOR: Final = {
    SPAN_RUNNING: (C.SPAN_PILOT,),  # the pilot's root: its start to its end on the worker node
    SPAN_VALIDATION: (C.PHASE_INIT, C.PHASE_PRE_SETUP, C.PHASE_SETUP),  # up to the last validation script
    SPAN_CONDOR: (C.PHASE_MAIN,),  # condor_startup.sh
    SPAN_CLEANUP: (C.PHASE_CLEANUP,),
}


def _own_phases(issued: Issued | None, own: dict[str, str] | None) -> frozenset[str]:
    """The log spans left out of a pilot's trace because the pilot traced them itself.

    A stock pilot: none. One issued a live trace whose spool came back: those its spool
    stands for. One whose spool did not come back sent its spans itself (or was not
    sampled, and nobody sees its trace): every worker-node span is left to it.
    """
    if issued is None:
        return frozenset()
    if own is None:
        return frozenset(_STANDS_FOR)
    return frozenset(k for k, phases in _STANDS_FOR.items() if any(p in own for p in phases))


def _failure(acc: PilotAccount, facts: PilotFacts, sc: Scrubber) -> tuple[dict[str, object], str, float | None] | None:
    """A failed validation's attributes, status message and the failing script's end (None: it passed)."""
    out, err = facts.out, facts.err
    failed = not acc.condor_started and facts.source != "condor_event_log"
    failure = out.failure if out is not None else None
    test = out.metrics.get("TestID") if out is not None else None
    bad = [s for s in err.scripts if not s.ok] if err is not None else []
    if test is None and bad:
        test, failure = bad[0].name, failure or bad[0].failure
    if failure is not None or (out is not None and out.status == "ERROR"):
        failed = True
    if not failed:
        return None
    detail = None
    if out is not None:
        extra = {k: v for k, v in out.metrics.items() if k not in ("TestID", "failure")}
        parts = [" ".join(out.detail.split())] if out.detail else []  # the test's own <detail>, on one line
        parts += [f"{k}={v}" for k, v in sorted(extra.items())]  # and the metrics it reported
        detail = "; ".join(parts) or None
    test, failure, detail = (sc.text(x, MAX_VALUE) if x is not None else None for x in (test, failure, detail))
    attrs: dict[str, object] = {FAILED_TEST: test, FAILURE: failure, FAILURE_DETAIL: detail}
    error = f"validation failed: {test or 'unknown test'}" + (f" ({failure})" if failure else "")
    return attrs, error, next((s.end for s in bad if s.end is not None), None)


def _validation(
    tr: _Trace, run: str, start: float, end: float, acc: PilotAccount, facts: PilotFacts, sc: Scrubber
) -> None:
    failed = _failure(acc, facts, sc)
    attrs: dict[str, object] = {}
    events = []
    error = None
    if failed is not None:
        attrs, error, _ = failed
        events.append((EVENT_VALIDATION_FAILED, end, attrs))
    tr.add(
        f"{run}/{SPAN_VALIDATION}",
        run,
        SPAN_VALIDATION,
        start,
        end,
        {C.PHASE: SPAN_VALIDATION, **attrs},
        error=error,
        events=events,
    )


def _jobs(
    tr: _Trace,
    condor: str,
    jobs: list[Job],
    cs: float,
    ce: float,
    acc: PilotAccount,
    rules: Rules,
    max_job_spans: int,
    sc: Scrubber,
    evictions: tuple[float, ...] = (),
) -> None:
    """One span per user job (the first ``max_job_spans`` by start), the rest summed in one; the
    last job carries the evictions (004) that fall in it. Most of a pilot's spans are these: their
    attributes are encoded here, in order, without the dict (the values _attr would write)."""
    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].start, i))
    last = order[-1] if order else None
    rest = [jobs[i] for i in order[max_job_spans:]]
    pilot_end, grace = acc.end, rules.grace_seconds
    # What _Trace.add writes, inlined: the span's place hashed is "<condor>/job/<n>", and every
    # KeyValue below is followed by a comma (the last one cut), "" when _attr leaves it out.
    hashed = f"{tr.hashed}{condor}/job/"
    head = tr.head
    parent = f'","parentSpanId":"{tr.ids[condor]}","name":"{SPAN_JOB}","kind":1,"startTimeUnixNano":"'
    spans = tr.spans
    done = 0  # jobs written by the compiled encoder
    if _NATIVE is not None:
        firsts = [jobs[i] for i in order[:max_job_spans]]
        # classify_job of each, inlined (partition.py holds the two equal): ~3 us a pilot less
        ending_at = min(ce, pilot_end) - grace
        cats = [_CATEGORY_VALUE[c] for c in _classify_all(firsts, ending_at, rules.early_failure_seconds)]
        args = (tr.ids[condor], firsts, cats, cs, ce, pilot_end, float(grace), CE_POLL_LAG, len(order) <= max_job_spans)
        got = _NATIVE.trace_jobs(hashed, head, *args, evictions, _NATIVE_JOB_NAMES)
        if got is not None:
            spans += got
            done = len(firsts)
    for n, i in enumerate(order[done:max_job_spans], done):
        j = jobs[i]
        s = min(max(j.start, cs), ce)
        e = min(max(j.end if j.end is not None else ce, s), ce)  # >= s
        cat = classify_job(j, ce, pilot_end, rules)
        jid, cpus, used, mem, mem_used, gpus = (
            j.global_job_id,
            j.cpus,
            j.cpu_seconds,
            j.memory_mb,
            j.memory_usage_mb,
            j.gpus,
        )
        cpu_secs = float(max(0, cpus) * (e - s))
        # the usual types written here, anything else (a hostile ad) by _attr_c
        if jid is None:
            id_kv = ""
        elif _JOB_ID.fullmatch(jid):  # nothing in it to escape
            id_kv = f'{{"key":"{JOB_ID}","value":{{"stringValue":"{jid}"}}}},'
        else:
            id_kv = _attr_c(JOB_ID, sc.text(jid, MAX_VALUE))
        cpus_kv = (
            f'{{"key":"{JOB_CPUS}","value":{{"intValue":"{cpus}"}}}},' if type(cpus) is int else _attr_c(JOB_CPUS, cpus)
        )
        secs_kv = (
            f'{{"key":"{JOB_CPU_SECONDS}","value":{{"doubleValue":{cpu_secs!r}}}}},' if _isfinite(cpu_secs) else ""
        )
        if used is None:
            used_kv = ""
        elif type(used) is float and _isfinite(used):
            used_kv = f'{{"key":"{JOB_CPU_USED}","value":{{"doubleValue":{used!r}}}}},'
        else:
            used_kv = _attr_c(JOB_CPU_USED, used)
        mem_kv = (
            f'{{"key":"{JOB_MEMORY}","value":{{"intValue":"{mem}"}}}},'
            if type(mem) is int
            else _attr_c(JOB_MEMORY, mem)
        )
        if mem_used is None:
            mem_used_kv = ""
        elif type(mem_used) is int:
            mem_used_kv = f'{{"key":"{JOB_MEMORY_USED}","value":{{"intValue":"{mem_used}"}}}},'
        else:
            mem_used_kv = _attr_c(JOB_MEMORY_USED, mem_used)
        gpus_kv = (
            f'{{"key":"{JOB_GPUS}","value":{{"intValue":"{gpus}"}}}},' if type(gpus) is int else _attr_c(JOB_GPUS, gpus)
        )
        kvs = f"{id_kv}{_CATEGORY_KV[cat]},{cpus_kv}{secs_kv}{used_kv}{mem_kv}{mem_used_kv}{gpus_kv}"
        status = ""
        if j.exit_by_signal:
            kvs += _attr_c(JOB_SIGNAL, j.exit_signal)
            status = _status(f"signal {j.exit_signal}")
        elif j.exit_code is not None:
            kvs += _int_c(EXIT_CODE, j.exit_code)
        events: list[tuple[str, float, dict[str, object]]] = []
        if cat is Category.PREEMPTION_BADPUT or (i == last and pilot_end - e <= grace and not j.exited):
            events.append((EVENT_PREEMPTED, e, {}))
        if i == last:
            events += [(EVENT_EVICTED, min(t, e), {}) for t in evictions if s <= t <= e + CE_POLL_LAG]
        h = _sha256(f"{hashed}{n}".encode()).digest()[:8].hex()
        spans.append(
            f'{head}{h if h != _ZERO_ID else _ONE_ID}{parent}{_ns(s)}","endTimeUnixNano":"{_ns(e)}",'
            f'"attributes":[{kvs[:-1]}]{status}{f",{_EVENTS}{_events(events)}]" if events else ""}}}'
        )
    if rest:
        s = min(max(min(j.start for j in rest), cs), ce)
        e = min(max(s, *(j.end if j.end is not None else ce for j in rest)), ce)
        secs: dict[str, float] = {}
        for j in rest:
            js = min(max(j.start, cs), ce)
            je = min(max(j.end if j.end is not None else ce, js), ce)
            name = classify_job(j, ce, acc.end, rules).value
            secs[name] = secs.get(name, 0.0) + max(0, j.cpus) * (je - js)
        attrs: dict[str, object] = {
            JOB_COUNT: len(rest),
            **{f"{JOB_CPU_SECONDS}.{k}": v for k, v in sorted(secs.items())},
        }
        tr.add(f"{condor}/jobs", condor, SPAN_JOBS_REST, s, e, attrs)


_REQUEST_HEAD: Final = b'{"resourceSpans":['
_REQUEST_TAIL: Final = b"]}"


def factory_name(monitor_dir: str, errors: ParseErrors) -> str:
    """The factory's name (``FactoryName`` of ``monitor/descript.xml``), else this host's name."""
    path = os.path.join(monitor_dir, "descript.xml")
    root = descript.load_xml(path, "descript", errors) if os.path.isfile(path) else None
    el = root.find("factory") if root is not None else None
    name = el.get("FactoryName", "").strip() if el is not None else ""
    return name[:256] if name else socket.gethostname()


def _job_id(v: str | None, sc: Scrubber) -> str | None:
    if v is None or _JOB_ID.fullmatch(v):
        return v
    return sc.text(v, MAX_VALUE)


# --- delivery ---------------------------------------------------------------------------------


class Outbox(Protocol):
    def enqueue(
        self, request: dict[str, Any] | bytes | list[bytes], spans: int, path: str, *, scrubbed: Tally | None = None
    ) -> bool: ...


class OwnSpans(Protocol):
    """What a glidein's returned spool had: its phases' span ids by name, its root as ``glidein``
    (``tracing.outbox.SpoolForwarder.own_spans``); None when no spool of it came back."""

    def __call__(self, log_dir: str, cluster: int, proc: int) -> dict[str, str] | None: ...


class PilotTraces:
    """``Books.trace_sink``: each counted pilot's trace, batched into the span outbox.

    Called by the scan with the lock held; it only builds the text and, every
    ``batch`` pilots and at :meth:`flush`, writes one file: the network is the
    forwarder's thread's. A failure is logged and counted, never raised.

    With ``batch_spans`` the file holds several requests, one a line, each of at
    most that many spans (the paced forwarder's bucket: each is posted as it is,
    tracing/outbox.py). A file a request cost ~15-50 us a pilot of creating it
    (the kernel's, measured in the scan; benchmarks/results/pilot-traces.md).
    """

    def __init__(
        self,
        outbox: Outbox,
        factory: str,
        *,
        rules: Rules = DEFAULT_RULES,
        max_job_spans: int = MAX_JOB_SPANS,
        batch: int = BATCH_PILOTS,
        batch_spans: int | None = None,
        errors: ParseErrors | None = None,
        ledger: LedgerIndex | None = None,
        own_spans: OwnSpans | None = None,
    ) -> None:
        self.outbox = outbox
        # A pilot the factory issued a live trace (its trace ledger, beside the pilot's files)
        # gets its log spans inside that trace; own_spans says what its returned spool had.
        self.ledger = ledger
        self.own_spans = own_spans
        self._no_ledger: dict[str, float] = {}  # log dir -> when it was seen without a ledger (monotonic)
        self.merged = 0  # pilots whose log spans went into their live trace
        self.factory = factory
        self.rules = rules
        self.max_job_spans = max_job_spans
        self.batch = batch
        # At most this many spans a request (the paced forwarder's bucket): a larger one is cut
        # into pieces at send time, which costs a JSON decode and encode of it (~45 us a span,
        # twice the trace's own cost); None: pilots alone bound a request.
        self.batch_spans = batch_spans
        self.errors = errors
        self._lock = threading.Lock()
        # each pilot's ResourceSpans, encoded: the request's parts (written as they are, not joined)
        self._pending: list[bytes] = []
        self._spans = 0
        self._requests: list[tuple[list[bytes], int]] = []  # the file's full requests before _pending
        self._pilots = 0  # pilots in the file so far
        self._scrub = Scrubber()  # the batch's: its tally goes with the request
        self.built = 0  # pilots with a trace built
        self.spans = 0  # spans built

    def __call__(self, acc: PilotAccount, facts: PilotFacts) -> None:
        try:
            issued, own = self._live(acc, facts)
            rs = encode(
                acc,
                facts,
                self.factory,
                rules=self.rules,
                max_job_spans=self.max_job_spans,
                scrub=self._scrub,
                issued=issued,
                own=own,
            )
        except Exception as e:  # a trace must never cost the accounting of a pilot
            log.exception("pilot trace of %s/%s.%s not built", acc.entry, acc.cluster, acc.proc)
            if self.errors is not None:  # counted where the spool's problems are (source trace_spool)
                where = facts.out.path if facts.out is not None else f"{acc.entry}/{acc.cluster}.{acc.proc}"
                self.errors.record(Source.TRACE_SPOOL, "pilot_trace_failed", where, None, f"{type(e).__name__}: {e}")
            return
        if rs is None:
            return
        encoded, n = rs
        with self._lock:
            if self.batch_spans is not None and self._pending and self._spans + n > self.batch_spans:
                # the request so far fits the bucket (sent whole): the file's next line
                self._requests.append((self._pending, self._spans))
                self._pending, self._spans = [], 0
            self._pending.append(encoded)
            self._spans += n
            self._pilots += 1
            self.built += 1
            self.merged += issued is not None
            self.spans += n
            full = self._pilots >= self.batch
        if full:
            self.flush()

    def _live(self, acc: PilotAccount, facts: PilotFacts) -> tuple[Issued | None, dict[str, str] | None]:
        """The live trace the factory issued this pilot, and the phases its returned spool had.

        The ledger is in the directory of the pilot's ``job.C.P.out`` (and .err): a pilot
        counted without its .out (completed_jobs, the event log) is not looked up.
        """
        if self.ledger is None or facts.out is None or acc.cluster is None or acc.proc is None:
            return None, None
        log_dir = os.path.dirname(facts.out.path)
        # A stock factory has no ledger: a stat a directory a second, not the index's open-and-fail
        # (~18 us a pilot) nor a stat a pilot (~15 us).
        now = time.monotonic()
        if now - self._no_ledger.get(log_dir, -math.inf) < LEDGER_RECHECK_SECONDS:
            return None, None
        if not os.path.exists(os.path.join(log_dir, LEDGER_NAME)):
            if len(self._no_ledger) >= MAX_NO_LEDGER:
                self._no_ledger.clear()
            self._no_ledger[log_dir] = now
            return None, None
        self._no_ledger.pop(log_dir, None)
        issued = self.ledger.lookup(log_dir, acc.cluster, acc.proc)
        if issued is None:
            return None, None
        return issued, self.own_spans(log_dir, acc.cluster, acc.proc) if self.own_spans is not None else None

    def flush(self) -> None:
        """Write what is built into the outbox (one file: its requests, one a line)."""
        with self._lock:
            requests, tally = self._requests, self._scrub.tally
            if self._pending:
                requests.append((self._pending, self._spans))
            self._requests, self._pending, self._spans, self._pilots, self._scrub = [], [], 0, 0, Scrubber()
        if requests:
            parts: list[bytes] = []
            for pending, _ in requests:
                parts.append(_REQUEST_HEAD)
                for p in pending:
                    parts += (p, b",")
                parts[-1] = _REQUEST_TAIL  # the last comma
                parts.append(b"\n")
            parts.pop()  # the last newline
            spans = sum(n for _, n in requests)
            self.outbox.enqueue(parts, spans, "pilot traces", scrubbed=tally)
