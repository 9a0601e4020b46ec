"""The accounting partition: worked examples of docs/accounting.md and exactness."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gwms_obs.accounting.partition import (
    JobTotals,
    PilotUsage,
    Rules,
    _classify_all,
    canonical_idle_units,
    classify_job,
    partition,
    partition_from_totals,
    unknown_lifetime,
)
from gwms_obs.catalogue import Accuracy, Category
from gwms_obs.model import Job

GB = 1024


def job(start: float, end: float | None, cpus: int = 1, mem: int = 2048, gpus: int = 0, **kw: object) -> Job:
    kw.setdefault("exited", end is not None)
    kw.setdefault("exit_code", 0 if end is not None else None)
    return Job(start=start, end=end, cpus=cpus, memory_mb=mem, gpus=gpus, **kw)  # type: ignore[arg-type]


# The three worked examples from the GIL report (seed 002): an hour of idle resources.
@pytest.mark.parametrize(
    ("cores", "mb", "units"),
    [(3, 3 * GB, 1), (3, 1 * GB, 0), (2, 6 * GB, 2)],
)
def test_worked_examples_idle_canonical_units(cores: int, mb: int, units: int) -> None:
    assert canonical_idle_units(cores, mb) == units


@pytest.mark.parametrize(("cores", "mb", "overhead"), [(3, 3 * GB, 1), (3, 1 * GB, 0), (2, 6 * GB, 2)])
def test_worked_examples_inside_a_pilot(cores: int, mb: int, overhead: int) -> None:
    """A 4-core pilot whose one job (1 core, 1 GB) leaves `cores` idle cores and `mb` idle MB for an hour."""
    total_cores = 1 + cores
    u = PilotUsage(
        start=0,
        end=3600,
        cpus=total_cores,
        memory_mb=1 * GB + mb,
        condor_started=True,
        condor_start=0,
        condor_end=3600,
        jobs=[job(0, 3600, cpus=1, mem=1 * GB)],
    )
    p = partition(u)
    assert p.cpu.get(Category.OVERHEAD, 0) == pytest.approx(overhead * 3600)
    # The idle cores memory could not back are charged to the running job.
    assert p.cpu[Category.GOODPUT] == pytest.approx((total_cores - overhead) * 3600)
    assert sum(p.cpu.values()) == pytest.approx(total_cores * 3600)


def test_condor_never_started_is_validation_failed() -> None:
    p = partition(PilotUsage(start=100, end=400, cpus=8, memory_mb=16000, gpus=1))
    assert p.cpu == {Category.VALIDATION_FAILED: 8 * 300}
    assert p.gpu == {Category.VALIDATION_FAILED: 300}


def test_no_job_is_decision_problem() -> None:
    u = PilotUsage(
        start=0, end=1000, cpus=4, memory_mb=8000, condor_started=True, condor_start=60, condor_end=990, jobs=[]
    )
    assert partition(u).cpu == {Category.DECISION_PROBLEM: 4000}


def test_before_and_after_condor_is_overhead_and_no_job_running_is_overhead() -> None:
    u = PilotUsage(
        start=0,
        end=1000,
        cpus=2,
        memory_mb=4096,
        condor_started=True,
        condor_start=100,
        condor_end=900,
        jobs=[job(200, 500, cpus=2, mem=4096)],
    )
    p = partition(u)
    # 100 s before + 100 s after + (200-100) + (900-500) without a job, all × 2 cores.
    assert p.cpu[Category.OVERHEAD] == pytest.approx(2 * (100 + 100 + 100 + 400))
    assert p.cpu[Category.GOODPUT] == pytest.approx(2 * 300)


def test_idle_cores_shared_in_proportion_to_job_cores() -> None:
    # 8 cores, 4 GB: no memory left once the jobs have it -> idle cores go to the jobs 3:1.
    u = PilotUsage(
        start=0,
        end=100,
        cpus=8,
        memory_mb=4096,
        condor_started=True,
        condor_start=0,
        condor_end=100,
        jobs=[
            job(0, 100, cpus=3, mem=3072),
            job(0, 30, cpus=1, mem=1024, exited=True, exit_by_signal=True, exit_code=None),
        ],
    )
    p = partition(u)
    # job 2 was killed by a signal after 30 s (< early_failure_seconds): misconfiguration.
    assert p.cpu[Category.MISCONFIGURATION_BADPUT] == pytest.approx(30 * (1 + 4 / 4))
    assert p.cpu[Category.GOODPUT] == pytest.approx(30 * (3 + 4 * 3 / 4) + 70 * 8)
    assert sum(p.cpu.values()) == pytest.approx(800)


def test_gpu_idle_is_overhead_and_used_goes_to_job() -> None:
    u = PilotUsage(
        start=0,
        end=100,
        cpus=4,
        memory_mb=None,
        gpus=2,
        condor_started=True,
        condor_start=0,
        condor_end=100,
        jobs=[job(0, 50, cpus=1, gpus=1)],
    )
    p = partition(u)
    assert p.gpu[Category.GOODPUT] == pytest.approx(50)
    assert p.gpu[Category.OVERHEAD] == pytest.approx(150)


@pytest.mark.parametrize(
    ("j", "expected"),
    [
        (job(0, 500, exit_code=3), Category.GOODPUT),  # any exit code is a completed job
        (job(0, None, exited=False), Category.PREEMPTION_BADPUT),  # still running at the end
        (job(0, 990, exited=False), Category.PREEMPTION_BADPUT),  # stopped with the pilot
        (job(0, 990, exited=True, exit_by_signal=True, exit_code=None), Category.PREEMPTION_BADPUT),
        (job(0, 500, exited=False), Category.MISCONFIGURATION_BADPUT),  # interrupted mid-life
        (job(0, 30, exited=True, exit_by_signal=True, exit_code=None), Category.MISCONFIGURATION_BADPUT),
        (job(0, 500, exited=True, exit_by_signal=True, exit_code=None), Category.GOODPUT),  # user crash
    ],
)
def test_classify_job(j: Job, expected: Category) -> None:
    assert classify_job(j, condor_end=1000, pilot_end=1010) == expected


def test_totals_fallback_and_unknown() -> None:
    u = PilotUsage(start=0, end=1000, cpus=8, memory_mb=None, condor_started=True, condor_start=100, condor_end=900)
    p = partition_from_totals(u, JobTotals(goodput=3000, misconfiguration=400), Accuracy.STATS)
    assert p.cpu == {
        Category.OVERHEAD: 8 * 200 + (6400 - 3400),
        Category.GOODPUT: 3000,
        Category.MISCONFIGURATION_BADPUT: 400,
    }
    p = partition_from_totals(u, None, Accuracy.STATS, claims=34)
    assert p.accuracy == Accuracy.NONE
    assert p.cpu == {Category.OVERHEAD: 1600, Category.UNKNOWN: 6400}
    assert partition_from_totals(u, None, Accuracy.STATS, claims=0).cpu == {Category.DECISION_PROBLEM: 8000}
    assert unknown_lifetime(u).cpu == {Category.UNKNOWN: 8000}


# --- exactness for random pilots -------------------------------------------------------------


@st.composite
def pilots(draw: st.DrawFn) -> PilotUsage:
    start = draw(st.floats(0, 1e6, allow_nan=False))
    life = draw(st.floats(0, 2e5, allow_nan=False))
    end = start + life
    cpus = draw(st.integers(0, 64))
    gpus = draw(st.integers(0, 8))
    mem = draw(st.one_of(st.none(), st.integers(0, 256_000)))
    started = draw(st.booleans())
    cs = draw(st.floats(start - 100, end + 100, allow_nan=False))
    ce = draw(st.floats(start - 100, end + 100, allow_nan=False))
    jobs = []
    for _ in range(draw(st.integers(0, 12))):
        js = draw(st.floats(start - 500, end + 500, allow_nan=False))
        je = draw(st.one_of(st.none(), st.floats(js - 100, end + 500, allow_nan=False)))
        sig = draw(st.booleans())
        jobs.append(
            job(
                js,
                je,
                cpus=draw(st.integers(0, 70)),
                mem=draw(st.integers(0, 300_000)),
                gpus=draw(st.integers(0, 10)),
                exited=draw(st.booleans()),
                exit_by_signal=sig,
            )
        )
    return PilotUsage(
        start=start,
        end=end,
        cpus=cpus,
        memory_mb=mem,
        gpus=gpus,
        condor_started=started,
        condor_start=cs,
        condor_end=ce,
        jobs=jobs,
    )


@settings(max_examples=300, deadline=None)
@given(pilots(), st.floats(0, 300, allow_nan=False), st.floats(0, 300, allow_nan=False))
def test_classify_all_is_classify_job_per_job(u: PilotUsage, grace: float, early: float) -> None:
    """The inlined per-pilot loop the partition runs is classify_job, job by job."""
    rules = Rules(grace_seconds=grace, early_failure_seconds=early)
    jobs = list(u.jobs or ())
    ce = u.condor_end if u.condor_end is not None else u.end
    ending_at = min(ce, u.end) - rules.grace_seconds
    assert _classify_all(jobs, ending_at, early) == [classify_job(j, ce, u.end, rules) for j in jobs]


@settings(max_examples=400, deadline=None)
@given(pilots())
def test_partition_is_exact(u: PilotUsage) -> None:
    p = partition(u)
    life = max(0.0, u.end - u.start)
    assert math.isclose(sum(p.cpu.values()), u.cpus * life, rel_tol=1e-9, abs_tol=1e-6)
    assert math.isclose(sum(p.gpu.values()), u.gpus * life, rel_tol=1e-9, abs_tol=1e-6)
    assert all(v >= -1e-9 for v in (*p.cpu.values(), *p.gpu.values()))
    if u.condor_started and u.jobs:
        assert sum(p.jobs.values()) == len(u.jobs)


@settings(max_examples=200, deadline=None)
@given(pilots(), st.floats(-1e6, 1e7, allow_nan=False), st.floats(-1e6, 1e7, allow_nan=False))
def test_totals_partition_is_exact(u: PilotUsage, good: float, bad: float) -> None:
    p = partition_from_totals(u, JobTotals(goodput=good, misconfiguration=bad), Accuracy.STATS)
    life = max(0.0, u.end - u.start)
    assert math.isclose(sum(p.cpu.values()), u.cpus * life, rel_tol=1e-9, abs_tol=1e-6)
    assert math.isclose(sum(p.gpu.values()), u.gpus * life, rel_tol=1e-9, abs_tol=1e-6)
    assert all(v >= -1e-9 for v in (*p.cpu.values(), *p.gpu.values()))
