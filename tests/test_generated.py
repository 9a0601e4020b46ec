"""Generated files are committed and must match their generator (no drift), every one of them.

The one generator is ``make generate`` (tools/generate.py): docs/metrics.md,
compose/config/ and everything dashboards/gen renders.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import ROOT
from tools.generate import GENERATED_ONLY, render_all, stale, write

RENDERED = render_all()


@pytest.mark.parametrize("rel", sorted(RENDERED))
def test_committed_file_matches_generator(rel: str) -> None:
    path = ROOT / rel
    assert path.is_file(), f"{rel} missing: run `make generate` and commit"
    assert path.read_text() == RENDERED[rel], f"{rel} is out of date: run `make generate` and commit"


def test_no_stale_file_in_generated_directories() -> None:
    """A file the generators dropped (a removed dashboard, a renamed config) must not linger."""
    assert list(stale(RENDERED)) == [], "not generated any more: run `make generate` and commit the removal"


def test_every_generator_is_covered() -> None:
    """Each source of generated files contributes, and each generated-only directory has files."""
    assert "docs/metrics.md" in RENDERED
    assert any(p.startswith("compose/config/") for p in RENDERED)
    assert any(p.startswith("dashboards/grafana/") for p in RENDERED)
    assert any(p.startswith("dashboards/rules/") for p in RENDERED)
    for pattern in GENERATED_ONLY:  # else writing would empty a directory
        assert any(p.startswith(pattern.split("*")[0]) for p in RENDERED), pattern


def test_write_replaces_stale_files_and_the_check_sees_them(tmp_path: Path) -> None:
    """Against a scratch tree: a stray dashboard is reported, then removed by writing; hand-written files stay."""
    files = {"dashboards/grafana/a.json": "{}\n", "compose/config/x.yml": "x: 1\n"}
    (tmp_path / "dashboards/grafana").mkdir(parents=True)
    (tmp_path / "dashboards/grafana/old.json").write_text("{}\n")
    (tmp_path / "dashboards/grafana/.lint").write_text("hand-written\n")
    assert list(stale(files, tmp_path)) == ["dashboards/grafana/old.json"]
    write(files, tmp_path)
    assert list(stale(files, tmp_path)) == []
    assert not (tmp_path / "dashboards/grafana/old.json").exists()
    assert (tmp_path / "dashboards/grafana/.lint").read_text() == "hand-written\n"
    assert (tmp_path / "compose/config/x.yml").read_text() == "x: 1\n"
