"""Resource hogs: user jobs that used more memory or cores than their slot gave them.

Pure functions over the jobs of a StartdHistoryLog (docs/accounting.md,
"Jobs using more than their slot"). The slot is what the pilot's startd
provisioned for the job (``MemoryProvisioned``/``CpusProvisioned``, else the
job's request; :attr:`Job.memory_mb`, :attr:`Job.cpus`):

* memory: the job's peak ``MemoryUsage`` over the slot's memory times
  :data:`MEMORY_TOLERANCE` (1.0: more than the slot gave is over; many pools
  already hold or kill a job at that point);
* cpu: user + system CPU seconds over wall time x the slot's cores times
  :data:`CPU_TOLERANCE` (1.25: HTCondor does not cap cores, and a job's
  short bursts of extra threads are not a hog).

How much beyond the slot, in canonical unit-seconds (1 core + 2 GB), from the
slot's edge, not from the tolerance: CPU seconds over wall x cores, and the
peak memory over the slot's, per 2 GB, times the wall time (an upper bound:
the peak is all the ad says).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..catalogue import CANONICAL_MB_PER_CORE, Overused
from ..model import Job

MEMORY_TOLERANCE = 1.0
CPU_TOLERANCE = 1.25


@dataclass(slots=True)
class Overuse:
    """Of one resource, over a pilot's jobs: how many had a usage, how many overused, by how much."""

    measured: int = 0  # jobs whose ad gave a usage of the resource
    jobs: int = 0  # of those, jobs over their slot
    seconds: float = 0.0  # canonical unit-seconds beyond their slots


def job_overuse(j: Job, end: float | None = None) -> dict[Overused, float | None]:
    """Per resource with a usage in the ad: the canonical unit-seconds beyond the slot when
    the job overused it, else None. ``end`` stands in for a job without one (HTCondor's end)."""
    return {res: o.seconds if o.jobs else None for res, o in overuse((j,), end).items()}


def overuse(jobs: Iterable[Job], end: float | None = None) -> dict[Overused, Overuse]:
    """Per resource measured on at least one job; ``end``: see :func:`job_overuse`.

    One pass, no per-job objects: this runs for every job of every pilot.
    """
    out: dict[Overused, Overuse] = {}
    mem = cpu = None
    # max() and the module constants hoisted: ~20 jobs a pilot, every pilot.
    mem_tol, cpu_tol, per_unit = MEMORY_TOLERANCE, CPU_TOLERANCE, CANONICAL_MB_PER_CORE
    for j in jobs:
        stop = j.end if j.end is not None else end
        wall: float | None = None
        if stop is not None:
            wall = stop - j.start
            if not wall > 0.0:  # max(0.0, wall), as a float
                wall = 0.0
        used, slot = j.memory_usage_mb, j.memory_mb
        if used is not None and slot > 0:
            if mem is None:
                mem = out[Overused.MEMORY] = Overuse()
            mem.measured += 1
            if used > slot * mem_tol:
                mem.jobs += 1
                mem.seconds += (used - slot) / per_unit * (wall or 0.0)
        secs = j.cpu_seconds
        if secs is not None and wall:  # a job of no known wall time has no CPU share
            if cpu is None:
                cpu = out[Overused.CPU] = Overuse()
            cpu.measured += 1
            cores = j.cpus if j.cpus > 1 else 1
            if secs > wall * cores * cpu_tol:
                cpu.jobs += 1
                cpu.seconds += secs - wall * cores
    return out
