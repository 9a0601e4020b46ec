"""The pilot-trace encoder (outputs/pilot_traces.py) writes OTLP/JSON text by hand, the job spans
through an inlined path: both must say exactly what the attribute dicts say, whatever a hostile
.err put in a job's ad."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gwms_obs.accounting.partition import DEFAULT_RULES, classify_job
from gwms_obs.accounting.pilot import from_glidein
from gwms_obs.catalogue import Category
from gwms_obs.model import GlideinErr, GlideinOut, Job
from gwms_obs.outputs import pilot_traces as P
from gwms_obs.tracing.redact import MAX_VALUE, Scrubber

T0 = 1_780_000_000.0
TRACE = "0123456789abcdef0123456789abcdef"
CONDOR = "running/condor"


def _reference_kv(key: str, v: object) -> dict[str, Any] | None:
    """A KeyValue as OTLP/JSON says it, decoded (None: not written)."""
    if v is None:
        return None
    if type(v) is bool:
        return {"key": key, "value": {"boolValue": v}}
    if type(v) is int:
        return {"key": key, "value": {"intValue": str(v)}}
    if type(v) is float:
        return {"key": key, "value": {"doubleValue": v}} if math.isfinite(v) else None
    return {"key": key, "value": {"stringValue": str(v)}}


values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_a_value_is_encoded_as_the_otlp_json_of_its_type(v: object) -> None:
    text = P._attr("gwms.k", v)
    want = _reference_kv("gwms.k", v)
    assert (json.loads(text) if text else None) == want
    assert text.isascii()


def _job_attrs(j: Job, s: float, e: float, cat: Category, sc: Scrubber) -> dict[str, object]:
    """A job span's attributes as docs/tracing.md lists them, in order (the dict the encoder inlines)."""
    jid = j.global_job_id
    attrs: dict[str, object] = {
        P.JOB_ID: jid if jid is None or P._JOB_ID.fullmatch(jid) else sc.text(jid, MAX_VALUE),
        P.JOB_CATEGORY: cat.value,
        P.JOB_CPUS: j.cpus,
        P.JOB_CPU_SECONDS: float(max(0, j.cpus) * (e - s)),
        P.JOB_CPU_USED: j.cpu_seconds,
        P.JOB_MEMORY: j.memory_mb,
        P.JOB_MEMORY_USED: j.memory_usage_mb,
        P.JOB_GPUS: j.gpus,
    }
    if j.exit_by_signal:
        attrs[P.JOB_SIGNAL] = j.exit_signal
    elif j.exit_code is not None:
        attrs[P.EXIT_CODE] = j.exit_code
    return attrs


ints = st.one_of(st.integers(min_value=-5, max_value=2**40), st.booleans(), st.floats(0, 64))
job_ids = st.one_of(
    st.none(),
    st.just("vo-schedd.example.org#123.4#1780000000"),
    st.text(max_size=30),
    st.just('ap"1#2.0#3 token=abcdef0123456789abcdef0123456789'),
)


@st.composite
def jobs(draw: st.DrawFn) -> Job:
    start = draw(st.floats(-100, 6000))
    return Job(
        start=T0 + start,
        end=draw(st.one_of(st.none(), st.floats(start, 7000).map(lambda x: T0 + x))),
        cpus=draw(ints),  # type: ignore[arg-type]  # what a hostile ad could make of them
        memory_mb=draw(ints),  # type: ignore[arg-type]
        gpus=draw(ints),  # type: ignore[arg-type]
        exited=draw(st.booleans()),
        exit_code=draw(st.one_of(st.none(), st.integers(-1, 255))),
        exit_by_signal=draw(st.booleans()),
        exit_signal=draw(st.one_of(st.none(), st.integers(1, 64))),
        global_job_id=draw(job_ids),
        memory_usage_mb=draw(st.one_of(st.none(), ints)),  # type: ignore[arg-type]
        cpu_seconds=draw(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(0, 10))),
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(jobs(), min_size=1, max_size=6), st.lists(st.floats(0, 6000), max_size=2))
def test_job_spans_say_what_their_attribute_dicts_say(js: list[Job], evicted: list[float]) -> None:
    """Each job span of the inlined path equals the span _Trace.add writes from the job's dict."""
    out = GlideinOut(
        path="job.7.0.out", cluster=7, proc=0, entry="E", client="C", startup_time=T0, validation_end=T0 + 100,
        condor_started=True, condor_start=T0 + 110, condor_end=T0 + 5000, glidein_end=T0 + 5030, exit_code=0,
        cpus=4, memory_mb=8192,
    )  # fmt: skip
    acc = from_glidein(out, GlideinErr(path="job.7.0.err", jobs=[], cpus=4), entry="E", client="C")
    assert acc is not None
    cs, ce = T0 + 110, T0 + 5000
    evictions = tuple(T0 + t for t in evicted)
    fast = P._Trace(TRACE)
    fast.ids[CONDOR] = "fedcba9876543210"
    P._jobs(fast, CONDOR, js, cs, ce, acc, DEFAULT_RULES, 4, Scrubber(), evictions)

    ref = P._Trace(TRACE)
    ref.ids[CONDOR] = "fedcba9876543210"
    sc = Scrubber()
    order = sorted(range(len(js)), key=lambda i: (js[i].start, i))
    for n, i in enumerate(order[:4]):
        j = js[i]
        s = min(max(j.start, cs), ce)
        e = min(max(j.end if j.end is not None else ce, s), ce)
        cat = classify_job(j, ce, acc.end, DEFAULT_RULES)
        events: list[tuple[str, float, dict[str, object]]] = []
        if cat is Category.PREEMPTION_BADPUT or (
            i == order[-1] and acc.end - e <= DEFAULT_RULES.grace_seconds and not j.exited
        ):
            events.append((P.EVENT_PREEMPTED, e, {}))
        if i == order[-1]:
            events += [(P.EVENT_EVICTED, min(t, e), {}) for t in evictions if s <= t <= e + P.CE_POLL_LAG]
        error = f"signal {j.exit_signal}" if j.exit_by_signal else None
        ref.add(f"{CONDOR}/job/{n}", CONDOR, P.SPAN_JOB, s, e, _job_attrs(j, s, e, cat, sc), error=error, events=events)

    got = [json.loads(x) for x in fast.spans]
    want = [json.loads(x) for x in ref.spans]
    assert got[: len(want)] == want  # the jobs beyond the cap: the summary span, after them
    assert len(got) == len(want) + (len(js) > 4)
    assert all(x.isascii() for x in fast.spans)
    assert all(s["spanId"] == P.span_id(TRACE, f"{CONDOR}/job/{n}") for n, s in enumerate(got[: len(want)]))
