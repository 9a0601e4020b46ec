"""Plausibility bounds on what a pilot says about itself.

A .out and .err are written on a worker node: anyone who controls the node
controls every number in them, and the completed_jobs line the factory writes
is derived from that same .out. Each self-reported value is checked against
what the pilot's entry gives (descript.xml) or, where the entry says nothing,
a configurable global bound (:class:`Limits`):

* resources (cores, memory, GPUs) out of bounds are replaced by the entry's
  configuration: the pilot is still counted, with what the factory asked for;
* times, durations and counts out of bounds mean the file is not believed:
  the pilot is counted from the factory's own records instead (its
  completed_jobs line if that is plausible, else the event log, as
  ``unknown``).

Every replaced or refused value is one ``implausible`` parse error, logged
with the file (docs/accounting.md, "Plausibility bounds").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..model import CompletedJob, GlideinErr, GlideinOut, Job
    from .pilot import EntryDefaults

REASON = "implausible"


@dataclass(frozen=True, slots=True)
class Limits:
    """Global bounds, for what an entry's configuration does not bound itself."""

    max_cpus: int = 1024  # cores, where the entry's GLIDEIN_CPUS is not a number (auto/node/slot)
    max_gpus: int = 64  # where the entry's GLIDEIN_Resource_Slots names no GPUs
    max_memory_mb_per_core: int = 64 << 10
    max_lifetime: float = 8 * 86400.0  # where the entry sets no GLIDEIN_Max_Walltime
    # A glidein stops at GLIDEIN_ToDie (start + GLIDEIN_Max_Walltime); its shutdown takes minutes.
    walltime_margin: float = 3600.0
    # How far a worker node's clock may run ahead of the factory's.
    clock_skew: float = 86400.0
    earliest: float = 946_684_800.0  # 2000-01-01: no glidein ran before
    # User jobs per core-second of life: a job takes at least this long.
    min_job_seconds: float = 1.0


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True, slots=True)
class Bounds:
    """One entry's bounds."""

    cpus: int
    gpus: int
    memory_mb: int  # per pilot
    lifetime: float
    earliest: float
    latest: float  # no time reported may be later (the factory's clock plus skew)
    min_job_seconds: float = 1.0
    # The most cores a job may keep busy: not the pilot's (a job can overuse its slot,
    # which is what gwms_user_jobs_overusing_total counts), the global bound.
    node_cpus: int = 1024

    def max_jobs(self, cpus: int | None = None) -> int:
        n = cpus or self.cpus
        return max(1000, int(n * self.lifetime / self.min_job_seconds))

    def time_ok(self, t: float | None) -> bool:
        return t is None or self.earliest <= t <= self.latest

    def job_out_of_time(self, jobs: list[Job]) -> Job | None:
        """The first job whose start or end is not :meth:`time_ok` (inlined: every job of every pilot)."""
        lo, hi = self.earliest, self.latest
        for j in jobs:
            t0, t1 = j.start, j.end
            if (t0 is not None and not lo <= t0 <= hi) or (t1 is not None and not lo <= t1 <= hi):
                return j
        return None

    def duration_ok(self, d: float | None) -> bool:
        return d is None or 0 <= d <= self.lifetime


def bounds(d: EntryDefaults | None, limits: Limits, now: float) -> Bounds:
    """The bounds of an entry whose configuration is ``d`` (None: not described)."""
    cpus = limits.max_cpus
    gpus = limits.max_gpus
    walltime = limits.max_lifetime
    memory = cpus * limits.max_memory_mb_per_core
    if d is not None:
        if d.cpus_fixed and d.cpus:
            cpus = d.cpus
        if d.gpus:
            gpus = d.gpus
        if d.max_walltime:
            walltime = float(d.max_walltime)
        # Not d.memory_mb: frontends raise GLIDEIN_MaxMemMBs per request, and memory
        # cannot inflate a total (it only decides which idle cores are usable).
        memory = cpus * limits.max_memory_mb_per_core
    return Bounds(
        cpus=cpus,
        gpus=gpus,
        memory_mb=memory,
        lifetime=walltime + limits.walltime_margin,
        earliest=limits.earliest,
        latest=now + limits.clock_skew,
        min_job_seconds=limits.min_job_seconds,
        node_cpus=max(cpus, limits.max_cpus),
    )


@dataclass(slots=True)
class Verdict:
    """What the check found: each entry one value out of bounds (for the log)."""

    problems: list[str] = field(default_factory=list)
    believed: bool = True  # False: times or counts forged; count the pilot from the factory's records

    def refuse(self, what: str) -> None:
        self.problems.append(what)
        self.believed = False


def check_glidein(out: GlideinOut, err: GlideinErr | None, b: Bounds) -> Verdict:
    """Check a pilot's .out/.err in place: resources out of bounds are set to None
    (the accounting then takes the entry's configuration); times and counts
    out of bounds make the verdict not believed."""
    v = Verdict()

    def resource(name: str, value: int | None, bound: int, low: int = 1) -> int | None:
        if value is None or low <= value <= bound:
            return value
        v.problems.append(f"{name}={value} outside [{low}, {bound}]")
        return None

    out.cpus = resource("GLIDEIN_CPUS", out.cpus, b.cpus)
    out.normalization = resource("normalization factor", out.normalization, b.cpus)
    out.memory_mb = resource("GLIDEIN_MaxMemMBs", out.memory_mb, b.memory_mb)
    if err is not None:
        err.cpus = resource("glidein_config GLIDEIN_CPUS", err.cpus, b.cpus)
        err.memory_mb = resource("glidein_config MEMORY", err.memory_mb, b.memory_mb)
        err.gpus = resource("GPUs", err.gpus, b.gpus, low=0)
    for name, t in (
        ("start", out.startup_time),
        ("validation end", out.validation_end),
        ("HTCondor start", out.condor_start),
        ("HTCondor end", out.condor_end),
        ("end", out.glidein_end),
    ):
        if not b.time_ok(t):
            v.refuse(f"{name} time {t} outside [{b.earliest:.0f}, {b.latest:.0f}]")
    for name, dur in (
        ("glidein duration", out.glidein_duration),
        ("HTCondor duration", out.condor_duration),
        ("validation duration", out.validation_duration),
    ):
        if not b.duration_ok(dur):
            v.refuse(f"{name} {dur} s outside [0, {b.lifetime:.0f}]")
    start = out.startup_time
    end = out.glidein_end
    if start is not None and end is not None and not b.duration_ok(end - start):
        v.refuse(f"lifetime {end - start:.0f} s outside [0, {b.lifetime:.0f}]")
    max_jobs = b.max_jobs(out.cpus)
    # The names are built only for a value out of bounds: this runs for every pilot.
    for k, s in out.stats.items():
        if not 0 <= s.jobsnr <= max_jobs:
            v.refuse(f"{k} jobs {s.jobsnr} outside [0, {max_jobs}]")
    if out.stats_real_total is not None and not 0 <= out.stats_real_total.jobsnr <= max_jobs:
        v.refuse(f"(Real) Total jobs {out.stats_real_total.jobsnr} outside [0, {max_jobs}]")
    claims = out.activations_claims or 0
    if not 0 <= claims <= max_jobs:
        v.refuse(f"activations/claims {claims} outside [0, {max_jobs}]")
    most = b.cpus * b.lifetime
    for name, s in out.stats.items():
        if not 0 <= s.secs <= most:
            v.refuse(f"{name} utilization {s.secs} s outside [0, {most:.0f}]")
    if err is not None and err.jobs:
        bad = b.job_out_of_time(err.jobs)
        if bad is not None:
            # One forged ad makes the job history untrustworthy; the Stats block stands in.
            v.problems.append(f"job time {bad.start}..{bad.end} outside [{b.earliest:.0f}, {b.latest:.0f}]")
            err.jobs = None
        else:
            _check_usage(err, b, v)
    return v


# CPU seconds a job may report beyond wall x cores: times are whole seconds, CPU times are not.
CPU_SLACK = 60.0


def _check_usage(err: GlideinErr, b: Bounds, v: Verdict) -> None:
    """A job's usage beyond what its node could give is dropped (the job still counts)."""
    most_mb, lifetime, node_cpus = b.memory_mb, b.lifetime, b.node_cpus
    for j in err.jobs or ():
        mem, cpu = j.memory_usage_mb, j.cpu_seconds
        if mem is not None and mem > most_mb:
            v.problems.append(f"job {_job_name(j)} MemoryUsage {mem} MB over {most_mb}")
            j.memory_usage_mb = None
        if cpu is not None:
            wall = j.end - j.start if j.end is not None else lifetime
            cap = (wall if wall > 0.0 else 0.0) * node_cpus + CPU_SLACK  # max(0.0, wall)
            if cpu > cap:
                v.problems.append(f"job {_job_name(j)} CPU {cpu:.0f} s over {cap:.0f} (wall x {node_cpus})")
                j.cpu_seconds = None


def _job_name(j: Job) -> str:
    return (j.global_job_id or f"started {j.start:.0f}")[:200]


def check_line(line: CompletedJob, b: Bounds) -> list[str]:
    """What is out of bounds on a completed_jobs line (empty: plausible).

    The factory writes the line, but from the pilot's .out: the same forgery
    shows here, and a line out of bounds is not used.
    """
    problems: list[str] = []
    if not b.duration_ok(max(line.duration, 0)):
        problems.append(f"duration {line.duration} s outside [0, {b.lifetime:.0f}]")
    if not b.duration_ok(max(line.condor_duration, 0)):
        problems.append(f"HTCondor duration {line.condor_duration} s outside [0, {b.lifetime:.0f}]")
    if not b.time_ok(line.terminated):
        problems.append(f"terminated {line.terminated} outside [{b.earliest:.0f}, {b.latest:.0f}]")
    capacity = b.cpus * b.lifetime
    for name, n in (("user duration", line.user_duration), ("user terminated", line.user_terminated)):
        if not 0 <= n <= capacity:
            problems.append(f"{name} {n} s outside [0, {capacity:.0f}]")
    if not 0 <= line.jobsnr <= b.max_jobs():
        problems.append(f"jobsnr {line.jobsnr} outside [0, {b.max_jobs()}]")
    return problems
