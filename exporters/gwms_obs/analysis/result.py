"""The whole analysis of a :class:`~.collect.Dataset`: distributions, outliers, actions."""

from __future__ import annotations

from dataclasses import dataclass

from .actions import Action, actions
from .collect import Dataset
from .distributions import Distribution, Key, distributions, traced_pilots
from .entry_actions import EntryAction, entry_actions
from .outliers import EntryScore, Fleet, PilotFlag, entry_scores, fleet, pilot_flags


@dataclass
class Analysis:
    data: Dataset
    dists: dict[Key, Distribution]
    fleet: dict[tuple[str, str, str], Fleet]
    scores: dict[Key, EntryScore]
    flags: list[PilotFlag]
    actions: list[Action]
    traced: dict[str, int]  # entry -> pilots with spans
    entry_actions: list[EntryAction]  # entries whose glideins do not run (held, submit failing, slow queue)


def analyze(data: Dataset) -> Analysis:
    dists = distributions(data.samples)
    fl = fleet(dists)
    scores = entry_scores(dists, fl)
    traced = traced_pilots(data.samples)
    return Analysis(
        data,
        dists,
        fl,
        scores,
        pilot_flags(data.samples, dists),
        actions(data, dists, fl, scores, traced),
        traced,
        entry_actions(data.health, data.pilots),
    )
