"""Duration distributions per entry × phase or script: count, p50, p90, p99, mean."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from .collect import Sample
from .stats import quantile


@dataclass(frozen=True, slots=True)
class Key:
    entry: str
    kind: str  # spans.KIND_PHASE or spans.KIND_SCRIPT
    phase: str
    name: str


@dataclass(slots=True)
class Distribution:
    key: Key
    site: str
    durations: list[float] = field(default_factory=list)  # sorted once complete
    pilots: set[str] = field(default_factory=set)
    units: list[float] = field(default_factory=list)  # canonical units of the pilots the accounting knows

    @property
    def count(self) -> int:
        return len(self.durations)

    @property
    def p50(self) -> float:
        return quantile(self.durations, 0.5)

    @property
    def p90(self) -> float:
        return quantile(self.durations, 0.9)

    @property
    def p99(self) -> float:
        return quantile(self.durations, 0.99)

    @property
    def mean(self) -> float:
        return sum(self.durations) / len(self.durations) if self.durations else 0.0

    @property
    def total(self) -> float:
        return sum(self.durations)

    @property
    def mean_units(self) -> float | None:
        return sum(self.units) / len(self.units) if self.units else None


def distributions(samples: Iterable[Sample]) -> dict[Key, Distribution]:
    """One distribution per (entry, kind, phase, name); durations sorted."""
    out: dict[Key, Distribution] = {}
    for s in samples:
        k = Key(s.entry, s.kind, s.phase, s.name)
        d = out.get(k)
        if d is None:
            d = out[k] = Distribution(k, s.site)
        d.durations.append(s.duration)
        d.pilots.add(s.pilot)
        if s.units is not None:
            d.units.append(s.units)
    for d in out.values():
        d.durations.sort()
    return out


def traced_pilots(samples: Iterable[Sample]) -> dict[str, int]:
    """entry -> pilots with at least one span."""
    by: dict[str, set[str]] = defaultdict(set)
    for s in samples:
        by[s.entry].add(s.pilot)
    return {e: len(p) for e, p in by.items()}
