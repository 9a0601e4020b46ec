"""Partition a pilot's life into time categories, in canonical units.

Pure functions, no I/O. The rules and their reasons are in docs/accounting.md;
the one place they are configured is :class:`Rules`.

Canonical CPU unit = 1 core + 2048 MB; canonical GPU unit = 1 GPU. Whatever
happens, the CPU categories of a pilot sum to ``cpus × lifetime`` and the GPU
categories to ``gpus × lifetime`` (tests/test_partition.py checks it with
hypothesis).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from .. import native
from ..catalogue import CANONICAL_MB_PER_CORE, Accuracy, Category, Overused
from ..model import Job
from .overuse import Overuse, overuse


@dataclass(frozen=True, slots=True)
class Rules:
    """How a user job's time is classified. Defaults explained in docs/accounting.md."""

    # A job that stops this close to the end of HTCondor (or of the pilot)
    # stopped because the pilot was ending.
    grace_seconds: float = 60.0
    # A job killed by a signal sooner than this after its start, while the
    # pilot was not ending, is the black-hole signature: misconfiguration.
    early_failure_seconds: float = 120.0


DEFAULT_RULES = Rules()


@dataclass(slots=True)
class PilotUsage:
    """The facts the partition needs about one pilot."""

    start: float
    end: float
    cpus: int
    memory_mb: int | None  # None: unknown, idle cores are never memory-bound
    gpus: int = 0
    condor_started: bool = False
    condor_start: float | None = None
    condor_end: float | None = None
    jobs: Sequence[Job] | None = None  # None: no per-job information


@dataclass(slots=True)
class Partition:
    cpu: dict[Category, float] = field(default_factory=dict)  # canonical unit-seconds
    gpu: dict[Category, float] = field(default_factory=dict)  # GPU-seconds
    jobs: dict[Category, int] = field(default_factory=dict)  # user jobs by category
    accuracy: Accuracy = Accuracy.EXACT

    def add(self, cat: Category, cpu: float = 0.0, gpu: float = 0.0) -> None:
        if cpu:
            self.cpu[cat] = self.cpu.get(cat, 0.0) + cpu
        if gpu:
            self.gpu[cat] = self.gpu.get(cat, 0.0) + gpu


def canonical_idle_units(idle_cores: float, idle_mb: float | None) -> float:
    """Canonical units that idle resources make: min(cores, floor(MB / 2048))."""
    if idle_cores <= 0:
        return 0.0
    if idle_mb is None:
        return idle_cores
    return min(idle_cores, float(max(0, int(idle_mb // CANONICAL_MB_PER_CORE))))


def classify_job(job: Job, condor_end: float, pilot_end: float, rules: Rules = DEFAULT_RULES) -> Category:
    """The category a user job's resources go to."""
    if job.exited and not job.exit_by_signal:
        return Category.GOODPUT  # completed normally, whatever its exit code
    end = job.end
    ending = end is None or end >= min(condor_end, pilot_end) - rules.grace_seconds
    if ending:
        return Category.PREEMPTION_BADPUT  # stopped because the pilot ended
    if not job.exited:
        return Category.MISCONFIGURATION_BADPUT  # starter/shadow failure, eviction mid-life
    assert end is not None
    if end - job.start < rules.early_failure_seconds:
        return Category.MISCONFIGURATION_BADPUT
    return Category.GOODPUT  # the user's process was killed after using the resource


def _classify_all(jobs: list[Job], ending_at: float, early: float) -> list[Category]:
    """:func:`classify_job` of each job, inlined: ``ending_at`` is ``min(condor_end, pilot_end)
    - grace_seconds``, ``early`` the rules' ``early_failure_seconds``."""
    good, preempt, misconf = Category.GOODPUT, Category.PREEMPTION_BADPUT, Category.MISCONFIGURATION_BADPUT
    cats: list[Category] = []
    add = cats.append
    for j in jobs:
        if j.exited and not j.exit_by_signal:
            add(good)
            continue
        end = j.end
        if end is None or end >= ending_at:
            add(preempt)
        elif not j.exited or end - j.start < early:
            add(misconf)
        else:
            add(good)
    return cats


def _whole(p: Partition, cat: Category, u: PilotUsage, seconds: float) -> None:
    p.add(cat, u.cpus * seconds, u.gpus * seconds)


def partition(u: PilotUsage, rules: Rules = DEFAULT_RULES) -> Partition:
    """Exact partition from per-job records (or the no-job cases)."""
    lifetime = max(0.0, u.end - u.start)
    p = Partition()
    if not u.condor_started:
        _whole(p, Category.VALIDATION_FAILED, u, lifetime)
        return p
    jobs = list(u.jobs) if u.jobs is not None else None
    if jobs is None:
        raise ValueError("partition() needs jobs; use partition_from_totals() without them")
    if not jobs:
        _whole(p, Category.DECISION_PROBLEM, u, lifetime)
        return p
    return _partition_jobs(u, jobs, rules, hogs=False)[0]


def partition_and_overuse(u: PilotUsage, rules: Rules = DEFAULT_RULES) -> tuple[Partition, dict[Overused, Overuse]]:
    """``partition(u, rules)`` and ``overuse(u.jobs, u.condor_end)`` of a pilot."""
    jobs = list(u.jobs) if u.jobs is not None else []
    if u.condor_started and jobs:
        return _partition_jobs(u, jobs, rules, hogs=True)
    return partition(u, rules), overuse(jobs, u.condor_end)


_CATEGORIES = tuple(Category)
_INDEX = {c: i for i, c in enumerate(_CATEGORIES)}
_OVERUSED = (Overused.MEMORY, Overused.CPU)  # sweep_jobs's resource indexes


def _condor_span(u: PilotUsage) -> tuple[float, float]:
    """HTCondor's start and end, clamped into the pilot's life."""
    cs = min(max(u.condor_start if u.condor_start is not None else u.start, u.start), u.end)
    ce = min(max(u.condor_end if u.condor_end is not None else u.end, cs), u.end)
    return cs, ce


def _partition_jobs(
    u: PilotUsage, jobs: list[Job], rules: Rules, hogs: bool
) -> tuple[Partition, dict[Overused, Overuse]]:
    """The partition of a pilot whose HTCondor ran ``jobs`` (and, with ``hogs``, their overuse).

    Compiled, in one pass over the jobs (native/src/sweep.rs ``sweep_jobs``: each
    job's category, the job counts, the sweep and the overuse, bit for bit and in
    dict order the same, tests/test_native.py); the Python below stays the
    reference, and reads what the compiled pass declines.
    """
    p = Partition()
    cs, ce = _condor_span(u)
    _whole(p, Category.OVERHEAD, u, (cs - u.start) + (u.end - ce))  # before and after HTCondor
    ending_at = min(ce, u.end) - rules.grace_seconds  # a job ending after this ended with the pilot
    if native.core is not None:
        found = native.core.sweep_jobs(
            jobs,
            _INDEX[Category.GOODPUT],
            _INDEX[Category.PREEMPTION_BADPUT],
            _INDEX[Category.MISCONFIGURATION_BADPUT],
            ending_at,
            rules.early_failure_seconds,
            len(_CATEGORIES),
            _INDEX[Category.OVERHEAD],
            cs,
            ce,
            u.cpus,
            u.gpus,
            u.memory_mb,
            p.cpu.get(Category.OVERHEAD),
            p.gpu.get(Category.OVERHEAD),
            u.condor_end,
        )
        if found is not None:
            counts, cpu, gpu, over = found
            cats = _CATEGORIES
            p.jobs = {cats[i]: n for i, n in counts}
            p.cpu = {cats[i]: v for i, v in cpu}
            p.gpu = {cats[i]: v for i, v in gpu}
            return p, {_OVERUSED[r]: Overuse(m, n, x) for r, m, n, x in over}
    classes = _classify_all(jobs, ending_at, rules.early_failure_seconds)
    counted = p.jobs
    for c in classes:
        counted[c] = counted.get(c, 0) + 1
    _sweep(p, u, jobs, classes, cs, ce)
    return p, overuse(jobs, u.condor_end) if hogs else {}


def _sweep(p: Partition, u: PilotUsage, jobs: list[Job], cats: list[Category], cs: float, ce: float) -> None:
    """Walk HTCondor's lifetime segment by segment, between job starts and ends.

    What runs at each instant is kept as running totals (all ints, so exact),
    per category too: every job of a category gets the same treatment, so a
    segment costs O(categories), not O(running jobs). This is the hot loop of
    the exporter (two events per user job), hence everything inlined and in
    locals; the arithmetic, and its order, is that of the plain version.
    """
    # Events: (time, +1 start / -1 end, job index, cores, GPUs, MB, category);
    # ends sort before starts at a tie, the unique index settles the rest.
    events: list[tuple[float, int, int, int, int, int, Category]] = []
    for i, j in enumerate(jobs):
        s = min(max(j.start, cs), ce)
        e = min(max(j.end if j.end is not None else ce, s), ce)
        if e > s:
            c, g, m, cat = max(0, j.cpus), max(0, j.gpus), max(0, j.memory_mb), cats[i]
            events.append((s, 1, i, c, g, m, cat))
            events.append((e, -1, i, -c, -g, -m, cat))
    events.sort()
    # A last, empty event at HTCondor's end closes the final segment inside the loop.
    events.append((ce, 0, len(jobs), 0, 0, 0, Category.OVERHEAD))
    cpu_out, gpu_out = p.cpu, p.gpu
    cpus, gpus, memory_mb = u.cpus, u.gpus, u.memory_mb
    overhead = Category.OVERHEAD
    count = cores = act_gpus = mb = 0
    cat_count: dict[Category, int] = {}
    cat_cpus: dict[Category, int] = {}
    cat_gpus: dict[Category, int] = {}
    t = cs
    for when, sign, _, c, g, m, cat in events:
        if when > t:
            _segment(
                cpu_out,
                gpu_out,
                cpus,
                gpus,
                memory_mb,
                count,
                cores,
                act_gpus,
                mb,
                cat_count,
                cat_cpus,
                cat_gpus,
                when - t,
                overhead,
            )
            t = when
        count += sign
        cores += c
        act_gpus += g
        mb += m
        cat_count[cat] = cat_count.get(cat, 0) + sign
        cat_cpus[cat] = cat_cpus.get(cat, 0) + c
        cat_gpus[cat] = cat_gpus.get(cat, 0) + g


def _segment(
    cpu_out: dict[Category, float],
    gpu_out: dict[Category, float],
    cpus: int,
    gpus: int,
    memory_mb: int | None,
    count: int,
    cores: int,
    act_gpus: int,
    mb: int,
    cat_count: dict[Category, int],
    cat_cpus: dict[Category, int],
    cat_gpus: dict[Category, int],
    dt: float,
    overhead: Category,
) -> None:
    """One segment of constant activity, added to the partition (Partition.add inlined)."""
    if count == 0:
        v = cpus * dt
        if v:
            cpu_out[overhead] = cpu_out.get(overhead, 0.0) + v
        v = gpus * dt
        if v:
            gpu_out[overhead] = gpu_out.get(overhead, 0.0) + v
        return
    # CPU. Records claiming more cores than the pilot has are scaled down so
    # the pilot's total stays exact.
    if cores > cpus:
        per_core, per_job = cpus / cores, 0.0
    else:
        idle = cpus - cores
        idle_mb = None if memory_mb is None else max(0, memory_mb - mb)
        k = canonical_idle_units(idle, idle_mb)
        v = k * dt
        if v:
            cpu_out[overhead] = cpu_out.get(overhead, 0.0) + v
        rest = idle - k  # idle but unusable for lack of memory: charged to the jobs that took it
        if cores > 0:
            per_core, per_job = 1 + rest / cores, 0.0
        else:
            per_core, per_job = 0.0, rest / count
    for cat, n in cat_count.items():
        if n:
            v = (cat_cpus[cat] * per_core + n * per_job) * dt
            if v:
                cpu_out[cat] = cpu_out.get(cat, 0.0) + v
    # GPU: the canonical unit is one GPU, so idle GPUs are always overhead.
    if gpus > 0:
        scale = gpus / act_gpus if act_gpus > gpus else 1.0
        for cat, g in cat_gpus.items():
            if g:
                v = g * scale * dt
                if v:
                    gpu_out[cat] = gpu_out.get(cat, 0.0) + v
        v = max(0.0, gpus - act_gpus) * dt
        if v:
            gpu_out[overhead] = gpu_out.get(overhead, 0.0) + v


@dataclass(slots=True)
class JobTotals:
    """Per-category core-seconds of user jobs when no per-job timeline exists."""

    goodput: float = 0.0  # jobs that exited (any code), or were killed after running
    misconfiguration: float = 0.0  # "badOther"
    jobs: dict[Category, int] = field(default_factory=dict)


def partition_from_totals(
    u: PilotUsage, totals: JobTotals | None, accuracy: Accuracy, claims: int | None = None
) -> Partition:
    """Approximate partition from the Stats block or a completed_jobs line.

    Assumptions (docs/accounting.md): idle cores are never memory-bound, jobs
    still running at the end are invisible (so no preemption badput can be
    seen), and GPU time is split in the same ratios as the CPU time of
    HTCondor's lifetime. ``totals=None`` with claims > 0 means jobs ran but
    nothing says how long: HTCondor's time becomes ``unknown``.
    """
    lifetime = max(0.0, u.end - u.start)
    p = Partition(accuracy=accuracy)
    if not u.condor_started:
        _whole(p, Category.VALIDATION_FAILED, u, lifetime)
        return p
    if totals is not None and totals.goodput + totals.misconfiguration <= 0 and claims:
        # HTCondor claimed jobs but the block counted none: they were all still
        # running at the end (the block cannot see those), so nobody knows.
        totals = None
    ran = (totals.goodput + totals.misconfiguration) > 0 if totals is not None else bool(claims)
    if not ran:
        _whole(p, Category.DECISION_PROBLEM, u, lifetime)
        return p
    cs = min(max(u.condor_start if u.condor_start is not None else u.start, u.start), u.end)
    ce = min(max(u.condor_end if u.condor_end is not None else u.end, cs), u.end)
    _whole(p, Category.OVERHEAD, u, (cs - u.start) + (u.end - ce))
    condor = ce - cs
    if totals is None:
        p.accuracy = Accuracy.NONE
        _whole(p, Category.UNKNOWN, u, condor)
        return p
    budget = u.cpus * condor
    good = min(max(0.0, totals.goodput), budget)
    bad = min(max(0.0, totals.misconfiguration), budget - good)
    idle = budget - good - bad
    p.add(Category.GOODPUT, cpu=good)
    p.add(Category.MISCONFIGURATION_BADPUT, cpu=bad)
    p.add(Category.OVERHEAD, cpu=idle)
    p.jobs.update(totals.jobs)
    if u.gpus > 0:
        gpu_budget = u.gpus * condor
        if budget <= 0:  # a GPU-only pilot: nothing to take ratios from
            p.add(Category.OVERHEAD, gpu=gpu_budget)
            return p
        for cat, share in (
            (Category.GOODPUT, good),
            (Category.MISCONFIGURATION_BADPUT, bad),
            (Category.OVERHEAD, idle),
        ):
            p.add(cat, gpu=gpu_budget * share / budget)
    return p


def unknown_lifetime(u: PilotUsage) -> Partition:
    """A pilot seen only in the event log: its whole life is ``unknown``."""
    p = Partition(accuracy=Accuracy.CONDOR_EVENT_LOG)
    _whole(p, Category.UNKNOWN, u, max(0.0, u.end - u.start))
    return p
