"""Generated files are committed and must match their generator (no drift)."""

from __future__ import annotations

import pytest

from tools import ROOT
from tools.generate import render_all


@pytest.mark.parametrize(("rel", "text"), sorted(render_all().items()))
def test_committed_file_matches_generator(rel: str, text: str) -> None:
    committed = (ROOT / rel).read_text()
    assert committed == text, f"{rel} is out of date: run `make generate` and commit"
