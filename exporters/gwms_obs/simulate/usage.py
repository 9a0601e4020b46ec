"""What each user job used: the MemoryUsage, ResidentSetSize and CPU times of its StartdHistoryLog ad.

Real job ads carry them (the glidein's condor_config adds MemoryUsage and
ResidentSetSize to STARTD_JOB_ATTRS, shared/reference/glideinwms/
glideFactoryLogParser_glidein_stdout.out), so every simulated ad does:
``ResidentSetSize`` in KiB, ``MemoryUsage`` in MiB as HTCondor's default
expression ``(ResidentSetSize + 1023) / 1024`` evaluates it, ``RemoteUserCpu``
and ``RemoteSysCpu`` in seconds. A job stays within its request (memory below
RequestMemory, CPU below wall time x RequestCpus) unless it is a resource hog
(``EntrySpec.hog``): then its memory is 1.5-3x RequestMemory and/or its CPU
time 1.6-3x wall time x RequestCpus.

The draws come from a stream seeded by a hash of (seed, pilot cluster, proc),
never from the planner's: every other byte of a tree is what it was before
usage existed, and a pilot's usage does not depend on any other pilot's.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .scenario import EntrySpec


class _Job(Protocol):
    """What :func:`fill` reads and sets of a plan.SimJob (plan imports Usage from here)."""

    start: int
    end: int | None
    cpus: int
    memory_mb: int
    usage: Usage | None


class _Pilot(Protocol):
    """What :func:`fill` reads of a plan.SimPilot."""

    @property
    def cluster(self) -> int: ...
    @property
    def proc(self) -> int: ...
    @property
    def blackhole(self) -> bool: ...
    @property
    def condor_end(self) -> int | None: ...
    @property
    def jobs(self) -> Sequence[_Job]: ...


HOG_MEMORY = (1.5, 3.0)  # x RequestMemory
HOG_CPU = (1.6, 3.0)  # x wall time x RequestCpus (a detector's threshold: 1.5)


@dataclass(frozen=True, slots=True)
class Usage:
    """One job's resource use as its ad reports it; ``hog`` says what it overused, if anything."""

    resident_kib: int  # ResidentSetSize
    user_cpu: int  # RemoteUserCpu, seconds
    sys_cpu: int  # RemoteSysCpu, seconds
    hog_memory: bool = False
    hog_cpu: bool = False

    @property
    def memory_mb(self) -> int:
        """MemoryUsage: HTCondor's ((ResidentSetSize + 1023) / 1024)."""
        return (self.resident_kib + 1023) // 1024

    @property
    def hog(self) -> bool:
        return self.hog_memory or self.hog_cpu


def _stream(seed: int, cluster: int, proc: int) -> random.Random:
    digest = hashlib.sha256(f"usage/{seed}/{cluster}/{proc}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def fill(p: _Pilot, spec: EntrySpec, seed: int) -> None:
    """Set ``usage`` on each of the pilot's jobs, once its fate is drawn."""
    if not p.jobs:
        return
    rng = _stream(seed, p.cluster, p.proc)
    for j in p.jobs:
        end = j.end if j.end is not None else p.condor_end
        assert end is not None
        wall = max(1, end - j.start)
        request_kib = j.memory_mb * 1024
        r_hog, r_kind, r_mem, r_eff, r_sys = (rng.random() for _ in range(5))
        if p.blackhole:  # dies within seconds of starting: little memory, little CPU
            rss = int(request_kib * (0.02 + 0.13 * r_mem))
            cpu = wall * (0.05 + 0.45 * r_eff)
            hog_memory = hog_cpu = False
        else:
            hog = r_hog < spec.hog
            hog_memory = hog and r_kind < 0.65  # memory only (< 0.45), both (0.45-0.65), CPU only (>= 0.65)
            hog_cpu = hog and r_kind >= 0.45
            lo, hi = HOG_MEMORY if hog_memory else (0.35, 0.95)
            rss = int(request_kib * (lo + (hi - lo) * r_mem))
            lo, hi = HOG_CPU if hog_cpu else (0.55, 0.95)
            cpu = wall * j.cpus * (lo + (hi - lo) * r_eff)
        total = math.ceil(cpu) if hog_cpu else int(cpu)  # a hog stays above its bound once rounded
        sys_cpu = int(total * (0.02 + 0.06 * r_sys))
        j.usage = Usage(rss, total - sys_cpu, sys_cpu, hog_memory, hog_cpu)
