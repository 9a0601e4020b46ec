"""The compiled pilot-trace encoder (native/src/trace.rs) against the Python encoder, its reference.

For any pilot the trace is byte for byte the same with the compiled encoder as without it: each of
its calls either writes exactly the text the Python encoder writes or declines (None), and Python
writes that part. A stock pilot is one call (``trace_pilot``: the whole pilot); a pilot traced live
takes the span-by-span calls (``trace_span``, ``trace_jobs``, ``trace_attrs``). A decline after
the compiled call scrubbed a text leaves the scrubber's tally as the Python encoder alone makes it.
Checked on the simulator's pilots (holds, GPUs, failed validations, lost and
completed_jobs pilots) and on hostile ones (texts with quotes, control characters, non-ASCII and
lone surrogates, jobs over the cap, none at all, odd types in a job's ad). The counting wrapper
shows the compiled path did the work, so an encoder that always declined would fail here.

``make test`` sets GWMS_OBS_REQUIRE_NATIVE=1: there a missing module fails instead of skipping.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gwms_obs import native
from gwms_obs.accounting.pilot import from_glidein
from gwms_obs.ingest.books import PilotFacts
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.model import GlideinErr, GlideinOut, HoldInterval, Job, PilotTimes
from gwms_obs.outputs import pilot_traces as P
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing.ledger import Issued
from gwms_obs.tracing.redact import Scrubber
from tests.test_pilot_traces_encoding import T0, jobs, values

if native.core is None:
    if os.environ.get("GWMS_OBS_REQUIRE_NATIVE") == "1":
        raise RuntimeError(f"gwms_obs_native is required here (make native): {native.describe()}")
    pytest.skip(f"no compiled readers: {native.describe()}", allow_module_level=True)

CORE = native.core
FACTORY = 'OSG Factory "é"'  # any name: the factory's own, written escaped


class Counting:
    """The compiled module, counting each function's calls and declines."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.declined: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        f = getattr(CORE, name)

        def counted(*a: Any) -> Any:
            got = f(*a)
            self.calls[name] += 1
            self.declined[name] += got is None
            return got

        return counted


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counting]:
    c = Counting()
    monkeypatch.setattr(P, "_NATIVE", c)
    yield c


def _python(monkeypatch: pytest.MonkeyPatch, acc: Any, facts: PilotFacts, **kw: Any) -> tuple[str, int] | None:
    with monkeypatch.context() as m:
        m.setattr(P, "_NATIVE", None)
        return P.build(acc, facts, FACTORY, **kw)


def _issued(acc: Any) -> Issued:
    """A live trace the factory issued this pilot (its ledger's entry)."""
    return Issued(acc.cluster, acc.proc, "0123456789abcdef" * 2, "00000000000000aa", frozenset(), {C.ENTRY: acc.entry})


# What a returned spool may have had: nothing came back, the pilot's root alone, every phase.
OWN: list[dict[str, str] | None] = [
    None,
    {"glidein": "00000000000000b0"},
    {"glidein": "00000000000000b0", C.PHASE_SETUP: "00000000000000b1", C.PHASE_MAIN: "00000000000000b2"},
]


def _pilots(tmp: Path, n: int, seed: int) -> list[tuple[Any, PilotFacts]]:
    simulate(tmp, n, seed=seed, anomalies=True)
    for f in sorted(tmp.rglob("job.*.out"))[::5]:  # these pilots counted from completed_jobs
        f.unlink()
    got: list[tuple[Any, PilotFacts]] = []

    class Sink:
        def __call__(self, acc: Any, facts: PilotFacts) -> None:
            got.append((acc, facts))

        def flush(self) -> None:
            pass

    cfg = IngestConfig(str(tmp), settle_seconds=0, final=True, lost_after_seconds=0)
    Ingest(cfg, outlets=Outlets(traces=Sink())).scan()
    return got


def test_simulated_pilots_are_byte_for_byte_the_python_encoders(
    tmp_path: Path, counting: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    pilots = _pilots(tmp_path, 300, seed=8)
    sources: Counter[str] = Counter()
    for n, (acc, facts) in enumerate(pilots):
        for cap in (P.MAX_JOB_SPANS, 2):  # and most of the jobs summed in one span
            assert P.build(acc, facts, FACTORY, max_job_spans=cap) == _python(
                monkeypatch, acc, facts, max_job_spans=cap
            )
        # the same pilot traced live: its log spans go into its own trace
        live = {"issued": _issued(acc), "own": OWN[n % len(OWN)]}
        assert P.build(acc, facts, FACTORY, **live) == _python(monkeypatch, acc, facts, **live)
        sources[facts.source] += 1
        sources["held"] += bool(facts.times is not None and facts.times.holds)
        sources["gpus"] += bool(acc.partition.gpu)
        sources["failed validation"] += acc.outcome.value == "validation_failed"
    # the simulator's kinds of pilot are all there
    assert sources["glidein_out"] and sources["completed_jobs"] and sources["condor_event_log"], sources
    assert sources["held"] and sources["gpus"] and sources["failed validation"], sources
    # the compiled encoder wrote them: every stock pilot whole; for the live ones every span and
    # resource, every job list but hostile ones
    assert counting.calls["trace_pilot"] == 2 * len(pilots) and counting.declined["trace_pilot"] == 0, counting
    assert counting.calls["trace_jobs"] > 50 and counting.calls["trace_span"] > 500, counting.calls
    assert counting.declined["trace_span"] == counting.declined["trace_attrs"] == 0, counting.declined
    assert counting.declined["trace_jobs"] <= counting.calls["trace_jobs"] // 20, counting.declined


# Texts a pilot or a CE may write: quotes, backslashes, control characters, DEL, non-ASCII,
# beyond the BMP, and lone surrogates (which the compiled encoder declines).
texts = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(codec="utf-8"), max_size=20),
    st.sampled_from(['"q"\\', "\x00\x1f\x7f\u0080", "é\u2028😀", "a\ud800b", "token=abcdef0123456789abcdef0123456789"]),
)


@st.composite
def hostile_pilot(draw: st.DrawFn) -> tuple[GlideinOut, GlideinErr, PilotTimes | None]:
    started = draw(st.booleans())  # False: a failed validation
    js = draw(st.lists(jobs(), max_size=8)) if started else []
    failed = None if started else draw(texts)
    out = GlideinOut(
        path="job.7.0.out", cluster=7, proc=0, entry="E", client="C", startup_time=T0,
        validation_end=T0 + 100, condor_started=started, condor_start=T0 + 110 if started else None,
        condor_end=T0 + 5000 if started else None, glidein_end=T0 + 5030,
        exit_code=draw(st.one_of(st.none(), st.integers(-3, 300))), cpus=4, memory_mb=8192,
        metrics={"TestID": draw(texts), draw(texts): draw(texts)} if failed is not None else {},
        status="ERROR" if failed is not None else None, failure=failed, detail=draw(texts) if failed else None,
    )  # fmt: skip
    err = GlideinErr(path="job.7.0.err", jobs=js, gpus=draw(st.sampled_from([0, 1, 4])), cpus=4)
    times = None
    if draw(st.booleans()):
        holds = tuple(
            HoldInterval(T0 - 3000 + 500 * i, T0 - 2800 + 500 * i, draw(st.integers(0, 50)), 0, draw(texts))
            for i in range(draw(st.integers(0, 3)))
        )
        times = PilotTimes(
            7, 0, submitted=T0 - 4000, grid_submitted=T0 - 3990, started=T0 - 20, first_started=T0 - 20,
            ended=T0 + 5060, end_event=draw(st.sampled_from(["terminated", "aborted", "held"])),
            held_reason=draw(texts), holds=holds, holds_dropped=draw(st.integers(0, 2)),
            evictions=tuple(T0 + t for t in draw(st.lists(st.floats(0, 6000), max_size=2))),
        )  # fmt: skip
    return out, err, times


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile_pilot(), st.integers(0, 5))
def test_hostile_pilots_are_byte_for_byte_the_python_encoders(
    monkeypatch: pytest.MonkeyPatch, pilot: tuple[GlideinOut, GlideinErr, PilotTimes | None], cap: int
) -> None:
    out, err, times = pilot
    acc = from_glidein(out, err, entry="E", client="C")
    assert acc is not None
    facts = PilotFacts("glidein_out", out, err, times=times)
    for live in ({}, {"issued": _issued(acc), "own": OWN[cap % len(OWN)]}):
        fast_scrub, python_scrub = Scrubber(), Scrubber()
        with monkeypatch.context() as m:
            m.setattr(P, "_NATIVE", CORE)
            fast = P.build(acc, facts, FACTORY, max_job_spans=cap, scrub=fast_scrub, **live)
        assert fast == _python(monkeypatch, acc, facts, max_job_spans=cap, scrub=python_scrub, **live)
        assert fast_scrub.tally == python_scrub.tally  # each text scrubbed once, declined or not


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.sampled_from(["gwms.a", "gwms.b", "gwms.c"]), st.one_of(values, texts)))
def test_a_value_is_written_as_the_python_encoder_writes_it(attrs: dict[str, object]) -> None:
    """Every float as repr writes it (both notations, -0.0, subnormals), every int, str, bool."""
    got = CORE.trace_attrs(attrs)
    want = P._attrs(attrs)
    if got is None:  # a lone surrogate or an int beyond i64: Python writes it
        assert any(
            (type(v) is str and any("\ud800" <= c <= "\udfff" for c in v))
            or (type(v) is int and not -(2**63) <= v < 2**63)
            for v in attrs.values()
        ), attrs
    else:
        assert got == want


@pytest.mark.parametrize(
    "v",
    [0.0, -0.0, 1.0, -3.0, 1e16, 1e15, 9999999999999998.0, 123456789012345678.0, 1e-4, 1e-5, 1.5e-7, 5e-324,
     1.7976931348623157e308, 0.1, 2.5,
     # two shortest strings equally near (…593.2 and …593.3): repr takes the even one, Rust's {:e} did not
     562949953421593.25],
)  # fmt: skip
def test_float_notations(v: float) -> None:
    assert CORE.trace_attrs({"k": v}) == P._attr("k", v)


def test_a_pilot_with_every_rare_part_is_one_compiled_call(counting: Counting, monkeypatch: pytest.MonkeyPatch) -> None:
    """Texts to scrub (a hold's reason, the removal's, a GlobalJobId not in HTCondor's shape, a
    failed test's detail), holds in the queue and on the node, evictions, jobs over the cap: the
    compiled call writes them (calling the Python policy for each), the same bytes and tally."""
    token = "token=abcdef0123456789abcdef0123456789"
    out = GlideinOut(
        path="job.7.0.out", cluster=7, proc=0, entry="E", client="C", startup_time=T0, validation_end=T0 + 100,
        condor_started=True, condor_start=T0 + 110, condor_end=T0 + 5000, glidein_end=T0 + 5030, exit_code=3,
        cpus=4, memory_mb=8192, metrics={"TestID": "check_cvmfs"}, status="ERROR", failure="cvmfs",
        detail=f"a\n{token}",
    )  # fmt: skip
    js = [
        Job(start=T0 + 200 + i, end=T0 + 4000, cpus=1, memory_mb=2048, gpus=0, exited=True, exit_code=0,
            global_job_id=f"schedd#{i}.0#1" if i % 2 else f'weird "id" {token}')
        for i in range(5)
    ]  # fmt: skip
    err = GlideinErr(path="job.7.0.err", jobs=js, gpus=0, cpus=4)
    holds = (
        HoldInterval(T0 - 3000, T0 - 2800, 16, 0, f"queue hold {token}"),
        HoldInterval(T0 + 300, None, 30, 1, "the node's hold"),
    )
    times = PilotTimes(
        7, 0, submitted=T0 - 4000, grid_submitted=T0 - 3990, started=T0 - 20, first_started=T0 - 20,
        ended=T0 + 5060, end_event="aborted", held_reason=f"removed {token}", holds=holds, holds_dropped=1,
        evictions=(T0 + 3000, T0 + 9000),
    )  # fmt: skip
    acc = from_glidein(out, err, entry="E", client="C")
    assert acc is not None
    facts = PilotFacts("glidein_out", out, err, times=times)
    for cap in (P.MAX_JOB_SPANS, 2):
        fast_scrub, python_scrub = Scrubber(), Scrubber()
        fast = P.build(acc, facts, FACTORY, max_job_spans=cap, scrub=fast_scrub)
        assert fast == _python(monkeypatch, acc, facts, max_job_spans=cap, scrub=python_scrub)
        assert fast_scrub.tally == python_scrub.tally and fast_scrub.tally.redacted >= 4, fast_scrub.tally
        assert fast is not None and token not in fast[0]
    assert counting.calls["trace_pilot"] == 2 and counting.declined["trace_pilot"] == 0, counting
