"""The simulated factory that the simulator and scan tests check against: one tree per module, ground truth kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from gwms_obs.simulate.factory import SimulationSummary, simulate
from gwms_obs.simulate.plan import SimPilot


def simulated_factory(
    tmp_path_factory: pytest.TempPathFactory, pilots: int, seed: int
) -> tuple[Path, SimulationSummary]:
    """A fresh tree of ``pilots`` pilots for a module-scoped fixture, and its summary with the ground truth."""
    out = tmp_path_factory.mktemp("factory")
    return out, simulate(out, pilots, seed=seed, ground_truth=True)


def truth(summary: SimulationSummary) -> list[SimPilot]:
    """The pilots a tree was simulated from (its ground truth)."""
    assert summary.ground_truth is not None
    return summary.ground_truth
