"""The ranked action list: which entry's validation step costs the most canonical core-hours a week.

One action per (entry, phase or validation script) whose median is an
outlier against the fleet: robust z ≥ ``ACTION_Z`` *and* median ≥
``ACTION_RATIO`` × the fleet median (a fleet of near-identical entries has a
tiny MAD, so z alone would flag a few seconds' difference) *and* at least
``ACTION_MIN_EXCESS_SECONDS`` above it (2 s against 4 s is a ratio of 2 from
rounding alone), among at least
``MIN_ENTRIES`` entries that voted. The candidates are the validation
scripts (script spans outside ``main`` and ``cleanup``) and the phases before
them, ``init`` and ``pre_setup``; ``setup`` is the sum of its scripts (they
are listed instead, not counted twice), ``main`` is the payload, ``cleanup``
is after the work. A pilot traced only from the factory's files (a stock
factory, outputs/pilot_traces.py) has one validation phase, ``validation``
(its init, pre_setup and setup together): it is the candidate there.
``queued`` and ``held`` cost no core-hours (nothing runs yet) and ``condor``
is the payload's, so neither is one.

* **share**: the name's total time over the entry's validation time (the
  ``init``, ``pre_setup``, ``setup`` and ``validation`` phases' total);
* **ratio**: entry median / fleet median;
* **excess cost**: (entry median − fleet median) × the canonical CPU units of
  the pilots that ran it (their mean) × how many of the entry's pilots run it
  a week, in canonical core-hours per week. Pilots a week = the entry's
  pilots in the accounting × the share of its traced pilots that ran the
  name, over the weeks the tree (or ``--since``/``--until``) spans.

Ranked by excess cost, largest first.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from ..tracing import conventions as C
from . import spans as S
from .collect import Dataset
from .distributions import Distribution, Key
from .outliers import EntryScore, Fleet

ACTION_Z: Final = 3.5  # robust z of the entry's median against the fleet's
ACTION_RATIO: Final = 2.0  # and at least this many times the fleet median
# and at least this many seconds a pilot over the fleet median: spans of a few seconds, timed to
# the second, double by rounding alone (a clean simulated factory had a 2 s vs 4 s "action").
ACTION_MIN_EXCESS_SECONDS: Final = 10.0
MIN_ENTRIES: Final = 3  # entries with enough spans of a name for a fleet to compare against
VALIDATION_PHASES: Final = (C.PHASE_INIT, C.PHASE_PRE_SETUP, C.PHASE_SETUP, C.LOG_PHASE_VALIDATION)
ACTION_PHASES: Final = (C.PHASE_INIT, C.PHASE_PRE_SETUP, C.LOG_PHASE_VALIDATION)
NOT_VALIDATION: Final = (C.PHASE_MAIN, C.PHASE_CLEANUP, C.LOG_PHASE_CONDOR)


@dataclass(frozen=True, slots=True)
class Action:
    rank: int
    entry: str
    site: str
    kind: str
    name: str
    median: float  # seconds
    fleet_median: float
    ratio: float
    z: float
    share: float  # of the entry's validation time, 0..1
    pilots_per_week: float
    units: float  # canonical CPU units of a pilot that runs it
    core_hours_per_week: float  # excess cost

    def sentence(self) -> str:
        cost = f"{_times(self.ratio)} the fleet median, costing {self.core_hours_per_week:,.1f} core-hours/week"
        if self.name == C.LOG_PHASE_VALIDATION:  # the whole of it: its share says nothing
            return f"entry {self.entry}: validation takes {self.median:,.0f} s (median), {cost}"
        return f"entry {self.entry}: {self.name} takes {100 * self.share:.0f}% of validation time, {cost}"

    def label(self) -> str:
        return f"{self.entry}: {self.name} ({_times(self.ratio)})"


def _times(r: float) -> str:
    return "∞×" if math.isinf(r) else f"{r:.1f}×"


def is_candidate(k: Key) -> bool:
    if k.kind == S.KIND_PHASE:
        return k.name in ACTION_PHASES
    return k.kind == S.KIND_SCRIPT and k.phase not in NOT_VALIDATION


def validation_seconds(dists: Mapping[Key, Distribution]) -> dict[str, float]:
    """entry -> the total time of its traced pilots' validation phases."""
    out: dict[str, float] = {}
    for k, d in dists.items():
        if k.kind == S.KIND_PHASE and k.name in VALIDATION_PHASES:
            out[k.entry] = out.get(k.entry, 0.0) + d.total
    return out


def actions(
    data: Dataset,
    dists: Mapping[Key, Distribution],
    fleet: Mapping[tuple[str, str, str], Fleet],
    scores: Mapping[Key, EntryScore],
    traced: Mapping[str, int],
) -> list[Action]:
    valid = validation_seconds(dists)
    weeks = data.weeks
    found: list[Action] = []
    for k, sc in scores.items():
        f = fleet[(k.kind, k.phase, k.name)]
        if not is_candidate(k) or f.entries < MIN_ENTRIES or sc.z < ACTION_Z or sc.ratio < ACTION_RATIO:
            continue
        d = dists[k]
        if d.p50 - f.median < ACTION_MIN_EXCESS_SECONDS:
            continue
        entry_pilots = data.pilots.get(k.entry) or traced.get(k.entry, 0)
        ran = len(d.pilots) / traced[k.entry] if traced.get(k.entry) else 1.0
        per_week = entry_pilots * ran / weeks
        units = d.mean_units or data.units.get(k.entry) or 1.0
        cost = (d.p50 - f.median) * units * per_week / 3600.0
        total = valid.get(k.entry, 0.0)
        share = d.total / total if total > 0 else math.nan
        found.append(
            Action(0, k.entry, d.site, k.kind, k.name, d.p50, f.median, sc.ratio, sc.z, share, per_week, units, cost)
        )
    found.sort(key=lambda a: (-a.core_hours_per_week, a.entry, a.name))
    return [replace(a, rank=i + 1) for i, a in enumerate(found)]
