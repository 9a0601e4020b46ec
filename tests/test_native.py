"""The compiled readers (gwms_obs_native) against the Python readers, their oracle.

The native functions are a fast path: for any input they either give up
(None: the Python reader reads it) or give exactly what the Python reader
gives — and then the Python reader records no parse error for it, since
anything it would record is meant to send the file to the Python path. These
properties are checked on the simulator's files, on the real production .out,
and on hypothesis-mutated and hostile variants of them.

``make test`` sets GWMS_OBS_REQUIRE_NATIVE=1: there a missing module fails
instead of skipping, so CI always runs these against the built wheel.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gwms_obs import native
from gwms_obs.accounting.overuse import overuse
from gwms_obs.accounting.partition import Partition, PilotUsage, Rules, partition, partition_and_overuse
from gwms_obs.catalogue import Category
from gwms_obs.model import GlideinErr, GlideinOut, Job
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources import condor_sections, glidein_err, glidein_out
from gwms_obs.sources.budget import Budget
from tests.support.reference import REFERENCE, reference_file

REAL_OUT = REFERENCE / "glideFactoryLogParser_glidein_stdout.out"  # beside the repository (tests/support/reference.py)

if native.core is None:
    if os.environ.get("GWMS_OBS_REQUIRE_NATIVE") == "1":
        raise RuntimeError(f"gwms_obs_native is required here (make native): {native.describe()}")
    pytest.skip(f"no compiled readers: {native.describe()}", allow_module_level=True)

CORE = native.core


def python_out(data: bytes) -> tuple[GlideinOut, ParseErrors]:
    errors = ParseErrors()
    native.core = None
    try:
        return glidein_out.parse_out(data, "job.1.0.out", errors), errors
    finally:
        native.core = CORE


def python_err(data: bytes) -> tuple[GlideinErr, ParseErrors]:
    errors = ParseErrors()
    native.core = None
    try:
        return glidein_err.parse_err(data, "job.1.0.err", errors, detail=False), errors
    finally:
        native.core = CORE


def check_out(data: bytes) -> bool:
    """The property for one .out; True when the fast path took it."""
    want, errors = python_out(data)
    if CORE.parse_out(data) is None:
        return False
    got = glidein_out.parse_out(data, "job.1.0.out", ParseErrors())
    assert got == want
    assert errors.total() == 0, "the fast path took a file the Python reader finds fault with"
    return True


def native_err(data: bytes) -> GlideinErr | None:
    budget = Budget()
    found = CORE.parse_err(data, Job, 64 << 20, 16 << 20, *budget.left())
    if found is None:
        return None
    return glidein_err.parse_err(data, "job.1.0.err", ParseErrors(), detail=False)


def check_err(data: bytes) -> bool:
    want, errors = python_err(data)
    got = native_err(data)
    if got is None:
        return False
    assert got == want
    assert errors.total() == 0, "the fast path took a file the Python reader finds fault with"
    return True


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[bytes, bytes | None]]:
    root = tmp_path_factory.mktemp("native")
    simulate(root, 300, seed=5)
    pairs = []
    for out in sorted(root.glob("client/user_*/glidein_*/entry_*/job.*.out")):
        err = out.with_suffix(".err")
        pairs.append((out.read_bytes(), err.read_bytes() if err.exists() else None))
    assert len(pairs) > 200
    return pairs


def test_every_simulated_pilot_takes_the_fast_path_with_equal_results(
    factory: list[tuple[bytes, bytes | None]],
) -> None:
    outs = sum(check_out(o) for o, _ in factory)
    errs = [e for _, e in factory if e is not None]
    assert outs == len(factory)
    assert sum(check_err(e) for e in errs) == len(errs)
    # the histories were decoded: not a fast path that skips the work
    assert sum(len(native_err(e).jobs or []) for e in errs) > 1000  # type: ignore[union-attr]


def test_the_compiled_reader_reads_the_attributes_the_python_one_does() -> None:
    assert tuple(CORE.JOB_ATTRS) == glidein_err.JOB_ATTRS


def test_the_real_production_out() -> None:
    assert check_out(reference_file(REAL_OUT.name).read_bytes())


# --- mutated files -------------------------------------------------------------------------------
NASTY = [
    b"&",
    b"&amp;",
    b"<!DOCTYPE x>",
    b"\r",
    b"\x00",
    b"\xff\xfe",
    b"\xc3\xa9",
    b"(" + b"9" * 25 + b")",
    b"9" * 25,
    b"=== Stats of main ===\n",
    b"=== End Stats of main ===\n",
    b'<metric name="failure">WN_RESOURCE</metric>',
    b"</result>",
    b"<status>",
    b"\n\n",
    b"condorg_cluster = '12x'\n",
    b"Setting GLIDEIN_CPUS=" + b"1" * 20 + b"\n",
    b"Total goodZ jobs 3 (1%) utilization 77\n",
    b"(Real) Total jobs 2 utilization 5\n",
    b"x" * 70_000,
    b"-------- glidein_config in condor_startup.sh ----------\n",
    b"condor_gpu_discovery found 4 GPUs\n",
    b"======== gzip | uuencode =============\n",
    b"begin-base64 644 -\nH4sI\n====\n",
    b"\n====\n",
    b"StartdHistoryLog\n======== gzip | uuencode =============\nbegin-base64 644 -\n====\n",
    b"GWMSTraceSpool\n======== gzip | uuencode =============\nbegin-base64 644 -\n\n====\n",
]

mutation = st.tuples(
    st.sampled_from(["insert", "delete", "replace", "truncate"]),
    st.floats(0, 1),
    st.one_of(st.sampled_from(NASTY), st.binary(max_size=40)),
    st.integers(1, 400),
)


def mutate(data: bytes, muts: list[tuple[str, float, bytes, int]]) -> bytes:
    for kind, where, blob, span in muts:
        i = int(where * len(data))
        if kind == "insert":
            data = data[:i] + blob + data[i:]
        elif kind == "delete":
            data = data[:i] + data[i + span :]
        elif kind == "replace":
            data = data[:i] + blob + data[i + len(blob) :]
        else:
            data = data[:i]
    return data


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(pick=st.integers(0, 10**6), muts=st.lists(mutation, min_size=1, max_size=4))
def test_mutated_out_files(factory: list[tuple[bytes, bytes | None]], pick: int, muts: list) -> None:  # type: ignore[type-arg]
    # the real production .out among them where the reference samples are there (a plain clone has none)
    real = pick % 7 == 0 and REAL_OUT.is_file()
    data = REAL_OUT.read_bytes() if real else factory[pick % len(factory)][0]
    check_out(mutate(data, muts))


@FAST
@given(pick=st.integers(0, 10**6), muts=st.lists(mutation, min_size=1, max_size=4))
def test_mutated_err_files(factory: list[tuple[bytes, bytes | None]], pick: int, muts: list) -> None:  # type: ignore[type-arg]
    errs = [e for _, e in factory if e is not None]
    check_err(mutate(errs[pick % len(errs)], muts))


# Values of the attributes a job is made of: what HTCondor writes, and what a worker node could.
VALUES = [
    "0",
    "7",
    "1700000000",
    "9999999999999999999",
    "99999999999999999999",
    "-3",
    "+4",
    "1.5",
    "1700000000.0",
    "-0.5",
    ".5",
    "1e3",
    "1e400",
    "3.0e",
    "true",
    "FALSE",
    "undefined",
    "UNDEFINED",
    '"text"',
    '"a\\"b"',
    '"unterminated',
    '"a" + "b"',
    "ifthenelse(MemoryUsage > 0, 1, 2)",
    "((ResidentSetSize + 1023) / 1024)",
    " 12 ",
    "",
    "\t5",
    "١٢",
    "１２",
    "12\x0b",
]
ATTRS = [*glidein_err.JOB_ATTRS, "Owner"]  # "Owner": one the jobs do not read
ad_line = st.tuples(st.sampled_from(ATTRS), st.one_of(st.sampled_from(VALUES), st.text(max_size=12)))
separator = st.sampled_from(["*** Offset = 0 ClusterId = 1", "", "   ", "\t", "**", "* x"])
history = st.lists(st.one_of(ad_line, separator), max_size=60)


@settings(max_examples=300, deadline=None)
@given(lines=history, start=st.booleans())
def test_generated_histories(lines: list, start: bool) -> None:  # type: ignore[type-arg]
    text = "\n".join(f"{x[0]} = {x[1]}" if isinstance(x, tuple) else x for x in lines)
    if start:
        text = "JobCurrentStartDate = 1700000000\n" + text
    err = b"some stderr line\n" + condor_sections.encode("StartdHistoryLog", text.encode("utf-8", "surrogatepass"))
    check_err(err)


def test_an_empty_section_is_declined_not_a_crash() -> None:
    # "====" right after the begin line: the slice of its payload once panicked in Rust
    for name in (b"StartdHistoryLog", b"GWMSTraceSpool"):
        err = b"x\n" + name + b"\n" + condor_sections.FRAME + b"\nbegin-base64 644 -\n====\n"
        assert not check_err(err)


def test_garden_variety_history_takes_the_fast_path() -> None:
    text = (
        "JobCurrentStartDate = 1700000000\nCompletionDate = 1700003600\nJobStatus = 4\nExitCode = 0\n"
        'GlobalJobId = "schedd#1.0#1"\nRemoteUserCpu = 3000.0\nRemoteSysCpu = 12.0\n'
        "MemoryUsage = ((ResidentSetSize + 1023) / 1024)\nResidentSetSize = 2048000\nRequestCpus = 1\n"
        "*** Offset = 0 ClusterId = 1 ProcId = 0\n"
    )
    assert check_err(condor_sections.encode("StartdHistoryLog", text.encode()))


# --- the switch -----------------------------------------------------------------------------------
def test_switched_off_by_the_environment_and_by_a_stale_abi(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        monkeypatch.setenv(native.ENV, "0")
        importlib.reload(native)
        assert native.core is None
        assert native.describe() == "python (GWMS_OBS_NATIVE=0)"
        monkeypatch.delenv(native.ENV)
        stale = types.ModuleType("gwms_obs_native")
        stale.ABI = native.ABI + 1  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "gwms_obs_native", stale)
        importlib.reload(native)
        assert native.core is None
        assert f"ABI {native.ABI + 1}" in native.describe()
    finally:
        monkeypatch.undo()
        importlib.reload(native)
    assert native.core is not None


def test_the_cli_says_which_readers_run(capsys: pytest.CaptureFixture[str]) -> None:
    from gwms_obs import cli

    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert f"(readers: native {CORE.__version__})" in capsys.readouterr().out


# --- the accounting sweep ---------------------------------------------------------------------------
def python_partition(u: PilotUsage) -> Partition:
    native.core = None
    try:
        return partition(u)
    finally:
        native.core = CORE


@st.composite
def used_jobs(draw: st.DrawFn) -> Job:
    """A job whose usage is near its slot's edges as often as far from them (the overuse rules' bands)."""
    start = draw(st.floats(-10, 1000, allow_nan=False))
    end = draw(st.one_of(st.none(), st.floats(-10, 1100, allow_nan=False)))
    cpus = draw(st.integers(-1, 16))
    memory_mb = draw(st.integers(-10, 40_000))
    wall = max(0.0, (end if end is not None else 1000.0) - start)
    # Factors of the slot: at, just off and between the rules' edges (1.0 memory, 1.25 CPU), or any.
    edges = [0.0, 0.5, 0.999999, 1.0, 1.000001, 1.1, 1.249999, 1.25, 1.250001, 1.27, 1.3, 2.0]
    near = st.one_of(st.sampled_from(edges), st.floats(0, 3, allow_nan=False))
    return Job(
        start=start,
        end=end,
        cpus=cpus,
        memory_mb=memory_mb,
        gpus=draw(st.integers(-1, 4)),
        exited=draw(st.booleans()),
        exit_by_signal=draw(st.booleans()),
        memory_usage_mb=draw(st.one_of(st.none(), st.integers(-10, 60_000), near.map(lambda f: int(memory_mb * f)))),
        cpu_seconds=draw(
            st.one_of(
                st.none(),
                st.floats(-10, 50_000, allow_nan=False),
                st.just(float("nan")),
                near.map(lambda f: wall * max(1, cpus) * f),
            )
        ),
    )


usage_jobs_st = st.builds(
    PilotUsage,
    start=st.floats(-20, 100, allow_nan=False),
    end=st.floats(100, 1200, allow_nan=False),
    cpus=st.integers(0, 16),
    memory_mb=st.one_of(st.none(), st.integers(0, 64_000)),
    gpus=st.integers(0, 4),
    condor_started=st.just(True),
    condor_start=st.one_of(st.none(), st.floats(-20, 300, allow_nan=False)),
    condor_end=st.one_of(st.none(), st.floats(200, 1300, allow_nan=False)),
    jobs=st.lists(used_jobs(), min_size=1, max_size=30),
)


def _job_at(start: float, end: float | None, cpus: int) -> Job:
    return Job(start=start, end=end, cpus=cpus, memory_mb=0, gpus=0, exited=False)


@settings(max_examples=400, deadline=None)
@given(u=usage_jobs_st)
# Hypothesis found it: a job starting at -0.0 sorted before one at 0.0 (Rust's total_cmp),
# so the categories came out in another order than Python's, which holds the two equal.
@example(
    u=PilotUsage(
        start=0.0,
        end=100.0,
        cpus=1,
        memory_mb=None,
        gpus=0,
        condor_started=True,
        jobs=[*(_job_at(0.0, None, 0) for _ in range(4)), _job_at(0.0, None, 1), _job_at(-0.0, 1.0, 1)],
    )
)
def test_the_compiled_sweep_is_the_python_sweep_bit_for_bit(u: PilotUsage) -> None:
    want, got = python_partition(u), partition(u)
    # same sums, same floats, same dict order (sums over a partition's values agree too)
    assert list(got.cpu.items()) == list(want.cpu.items())
    assert list(got.gpu.items()) == list(want.gpu.items())
    assert got == want


@settings(max_examples=400, deadline=None)
@given(u=usage_jobs_st, grace=st.floats(0, 300, allow_nan=False), early=st.floats(0, 300, allow_nan=False))
def test_the_compiled_job_pass_is_partition_and_overuse_bit_for_bit(u: PilotUsage, grace: float, early: float) -> None:
    """sweep_jobs (classification, job counts, sweep, overuse in one pass) against the Python
    partition() and overuse(): the same floats in the same dict order, and it took the input."""
    rules = Rules(grace_seconds=grace, early_failure_seconds=early)
    taken = []
    real = CORE.sweep_jobs

    def spy(*a: object) -> object:
        taken.append(real(*a))
        return taken[-1]

    native.core = None
    try:
        want = (partition(u, rules), overuse(list(u.jobs or ()), u.condor_end))
    finally:
        native.core = CORE
    native.core = SimpleNamespace(sweep_jobs=spy)  # type: ignore[assignment]
    try:
        got = partition_and_overuse(u, rules)
    finally:
        native.core = CORE
    assert taken and taken[0] is not None  # the fast path answered
    assert list(got[0].cpu.items()) == list(want[0].cpu.items())
    assert list(got[0].gpu.items()) == list(want[0].gpu.items())
    assert list(got[0].jobs.items()) == list(want[0].jobs.items())
    assert got[0] == want[0]
    assert list(got[1].items()) == list(want[1].items())  # the same Overuse values, same order


def test_the_job_pass_declines_what_it_cannot_compare_as_python_does() -> None:
    """An int CPU time (Python compares it with a float exactly) or a huge value: Python's answer."""
    for j in (
        Job(start=0.0, end=10.0, cpus=1, memory_mb=2048, gpus=0, exited=True, cpu_seconds=(1 << 60) + 1),  # type: ignore[arg-type]
        Job(start=0.0, end=10.0, cpus=1, memory_mb=2048, gpus=0, exited=True, memory_usage_mb=1 << 62),
    ):
        u = PilotUsage(start=0.0, end=10.0, cpus=4, memory_mb=None, condor_started=True, condor_end=10.0, jobs=[j])
        assert (
            CORE.sweep_jobs([j], 0, 1, 2, 0.0, 0.0, len(Category), 3, 0.0, 10.0, 4, 0, None, None, None, 10.0) is None
        )
        native.core = None
        try:
            want = (partition(u), overuse([j], 10.0))
        finally:
            native.core = CORE
        assert partition_and_overuse(u) == want


def test_huge_values_decline_to_the_python_sweep() -> None:
    j = Job(start=0.0, end=10.0, cpus=1 << 62, memory_mb=1, gpus=0, exited=True)
    u = PilotUsage(start=0.0, end=10.0, cpus=4, memory_mb=None, condor_started=True, jobs=[j])
    assert list(partition(u).cpu.items()) == list(python_partition(u).cpu.items())


def test_the_native_extra_pins_the_crates_version() -> None:
    """pyproject's `native` extra names the version native/Cargo.toml builds (maturin takes it from there)."""
    import tomllib

    from tools import ROOT

    crate = tomllib.loads((ROOT / "native" / "Cargo.toml").read_text())["package"]["version"]
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["native"]
    assert extra == [f"gwms-obs-native=={crate}"]
