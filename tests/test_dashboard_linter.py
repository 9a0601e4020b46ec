"""Grafana's dashboard-linter (pinned in the Makefile) on every generated dashboard."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tools import ROOT

LINTER = Path(os.environ.get("GWMS_OBS_DASHBOARD_LINTER", "/nonexistent"))
BOARDS = sorted((ROOT / "dashboards/grafana").glob("*.json"))


@pytest.mark.skipif(
    not LINTER.is_file(),
    reason=f"dashboard-linter not built at {LINTER} (`make dashboard-linter` says why)",
)
@pytest.mark.parametrize("board", BOARDS, ids=[b.stem for b in BOARDS])
def test_dashboard_linter(board: Path) -> None:
    # The .lint file next to the dashboards lists the rules waived and why.
    r = subprocess.run(
        [str(LINTER), "lint", "--strict", "-c", str(ROOT / "dashboards/grafana/.lint"), str(board)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
