"""Every factory source implements the one contract (gwms_obs.ingest.stage.Stage), is simulated,
and is in the architecture doc's table: adding a format cannot skip a step silently."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gwms_obs.catalogue import ONE_SHOT_SOURCES, SCANNED_SOURCES, Source
from gwms_obs.ingest import STAGES
from gwms_obs.ingest.books import Books
from gwms_obs.ingest.outlets import NO_OUTLETS
from gwms_obs.ingest.stage import Stage
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate import WRITERS

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def test_every_source_is_read_by_exactly_one_stage() -> None:
    read = [s for stage in STAGES for s in stage.sources]
    assert sorted(read) == sorted(SCANNED_SOURCES), "a Source of the catalogue no stage reads, or one read twice"


def test_stages_run_in_precedence_order_and_implement_the_contract(tmp_path: Path) -> None:
    precedences = [s.precedence for s in STAGES]
    assert precedences == sorted(precedences) and len(set(precedences)) == len(precedences)
    books = Books(IngestConfig(str(tmp_path)), clock=lambda: 0.0)
    for cls in STAGES:
        assert issubclass(cls, Stage)
        for method in ("discover", "read"):
            assert getattr(cls, method) is not getattr(Stage, method), f"{cls.__name__} lacks {method}"
        stage = cls(books, NO_OUTLETS)
        assert set(stage.state()) == set(cls.checkpoint_keys), cls.__name__
        assert stage.source is cls.sources[0]


def test_checkpoint_keys_are_owned_once(tmp_path: Path) -> None:
    books_keys = set(Books(IngestConfig(str(tmp_path)), clock=lambda: 0.0).state())
    owned = [k for cls in STAGES for k in cls.checkpoint_keys]
    assert len(owned) == len(set(owned)) and not books_keys & set(owned)
    state = Ingest(IngestConfig(str(tmp_path))).state()
    assert set(state) == {"version", "factory_dir"} | books_keys | set(owned)


@pytest.mark.parametrize("source", SCANNED_SOURCES, ids=str)
def test_every_source_has_a_simulator_writer(source: Source) -> None:
    assert source in WRITERS, f"gwms-obs simulate writes no {source.value} files"


@pytest.mark.parametrize("source", list(Source), ids=str)
def test_every_source_is_in_the_architecture_table(source: Source) -> None:
    rows = [line for line in ARCHITECTURE.read_text().splitlines() if line.startswith("| `")]
    if source in ONE_SHOT_SOURCES:  # its row names its reader and the command that reads it
        reader = f"sources/{source.value}.py"
        assert any(f"`{source.value}`" in row and reader in row and "gwms-obs " in row for row in rows), source
        return
    stage = next(cls for cls in STAGES if source in cls.sources)
    module = stage.__module__.rsplit(".", 1)[1]
    assert any(re.search(rf"`{source.value}`", row) and f"ingest/{module}.py" in row for row in rows), (
        f"docs/architecture.md has no row for {source.value} naming ingest/{module}.py"
    )
