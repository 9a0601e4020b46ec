"""Outliers, with the robust z (stats.py): entries against the fleet, pilots against their entry.

* **Entries.** For each phase or script, the fleet median is the median of the
  entries' medians (each entry one vote, however many pilots it runs), and
  the scale is ``robust_scale`` of those medians. An entry's robust z is its
  median's. Entries with fewer than ``MIN_SAMPLES`` spans of that name have no
  vote and no z (their median is noise).
* **Pilots.** Within an entry, a pilot's span is flagged when its robust z
  against the entry's own durations of that name is at least ``PILOT_Z``, it is
  at least ``PILOT_RATIO`` × the entry's median and ``PILOT_MIN_EXCESS_SECONDS``
  above it. These are single pilots slower than their own entry (a bad node);
  a script slow at a whole entry is an entry outlier and an action instead
  (benchmarks/results/detection.md scores both).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from .collect import Sample
from .distributions import Distribution, Key
from .stats import median, robust_scale, robust_z

MIN_SAMPLES: Final = 5  # spans an entry needs for its median of a name to count
PILOT_Z: Final = 3.5  # Iglewicz and Hoaglin's threshold for a modified z
PILOT_RATIO: Final = 2.0  # and at least twice the entry's median: a tight entry's +2 s is no outlier
PILOT_MIN_EXCESS_SECONDS: Final = 10.0  # and 10 s above it: 6 s against 3 s is whole-second rounding


@dataclass(frozen=True, slots=True)
class Fleet:
    median: float  # the median of the entries' medians
    scale: float  # stats.robust_scale of the entries' medians
    entries: int  # entries that voted


@dataclass(frozen=True, slots=True)
class EntryScore:
    z: float
    ratio: float  # entry median / fleet median (inf when the fleet median is 0 and the entry's is not)


@dataclass(frozen=True, slots=True)
class PilotFlag:
    entry: str
    pilot: str
    kind: str
    name: str
    duration: float
    entry_median: float
    z: float


def fleet(dists: Mapping[Key, Distribution]) -> dict[tuple[str, str, str], Fleet]:
    """(kind, phase, name) -> the fleet's median and scale across entries."""
    medians: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for k, d in dists.items():
        if d.count >= MIN_SAMPLES:
            medians[(k.kind, k.phase, k.name)].append(d.p50)
    return {n: Fleet(median(m), robust_scale(m), len(m)) for n, m in medians.items()}


def ratio(x: float, ref: float) -> float:
    if ref > 0:
        return x / ref
    return 1.0 if x == ref else math.inf


def entry_scores(dists: Mapping[Key, Distribution], fl: Mapping[tuple[str, str, str], Fleet]) -> dict[Key, EntryScore]:
    out: dict[Key, EntryScore] = {}
    for k, d in dists.items():
        f = fl.get((k.kind, k.phase, k.name))
        if f is None or d.count < MIN_SAMPLES:
            continue
        out[k] = EntryScore(robust_z(d.p50, f.median, f.scale), ratio(d.p50, f.median))
    return out


def pilot_flags(samples: Iterable[Sample], dists: Mapping[Key, Distribution]) -> list[PilotFlag]:
    """Spans far above their entry's own distribution, worst z first."""
    scales = {k: (d.p50, robust_scale(d.durations)) for k, d in dists.items() if d.count >= MIN_SAMPLES}
    out: list[PilotFlag] = []
    for s in samples:
        ms = scales.get(Key(s.entry, s.kind, s.phase, s.name))
        if ms is None:
            continue
        m, scale = ms
        z = robust_z(s.duration, m, scale)
        if z >= PILOT_Z and s.duration >= PILOT_RATIO * m and s.duration - m >= PILOT_MIN_EXCESS_SECONDS:
            out.append(PilotFlag(s.entry, s.pilot, s.kind, s.name, s.duration, m, z))
    out.sort(key=lambda f: (-f.z, -f.duration, f.entry, f.pilot, f.name))
    return out
