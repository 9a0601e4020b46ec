"""The scan's order is the one pipeline.py's docstring lists (issue 32: written once, in code
that reads like the docs): each step of each stage, the walk, the checkpoints, recorded in a scan."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gwms_obs import pipeline
from gwms_obs.ingest import checkpoint
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate

# pipeline.py's list, step by step (steps 1-8 of its docstring).
ORDER = [
    "descript discover",
    "descript read",  # 1
    "list_clients",  # 2
    "completed_jobs name_clients",  # 2: listed users with no frontend name (none configured here)
    "completed_jobs discover",  # the logs it looks in for their names
    "condor_event_log discover",
    "condor_event_log read",  # 3: before the .out files, whose pilots take their queue from it
    "glidein_out discover",
    "glidein_out read",  # 4
    "checkpoint",
    "completed_jobs discover",
    "completed_jobs read",  # 5
    "glidein_out settle",  # 5: the pilots whose frontend the lines named
    "checkpoint",
    "schedd_status discover",
    "schedd_status read",  # 6
    "frontend_status discover",
    "frontend_status read",  # 6: nothing without frontend_monitor_dir
    "factory_log discover",
    "factory_log read",  # 6: the entry processes' own logs
    "completed_jobs settle",  # 7
    "condor_event_log settle",
    "prune",  # 8
    "checkpoint",
]


def _record(calls: list[str], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def step(*a: Any, **kw: Any) -> Any:
        calls.append(name)
        return fn(*a, **kw)

    return step


def test_a_scan_runs_its_steps_in_the_documented_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    simulate(tmp_path / "f", 30, seed=4)
    ing = Ingest(IngestConfig(factory_dir=str(tmp_path / "f"), checkpoint=str(tmp_path / "c.json"), settle_seconds=0.0))
    calls: list[str] = []
    for stage in ing.stages:
        for method in ("discover", "read", "settle", "name_clients"):
            if hasattr(stage, method):
                setattr(stage, method, _record(calls, f"{stage.source.value} {method}", getattr(stage, method)))
    monkeypatch.setattr(ing.books, "list_clients", _record(calls, "list_clients", ing.books.list_clients))
    monkeypatch.setattr(ing, "_prune", _record(calls, "prune", ing._prune))
    monkeypatch.setattr(checkpoint, "write", _record(calls, "checkpoint", checkpoint.write))
    assert ing.scan().pilots > 20
    assert calls == ORDER
    # The docstring lists the same steps, numbered 1 to 8.
    doc = pipeline.__doc__ or ""
    assert all(f"\n{n}. " in doc for n in range(1, 9)) and "\n9. " not in doc
