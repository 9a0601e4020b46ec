"""docs/migration.md: every GlideinWMS monitoring page listed, every panel it names generated."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dashboards.gen.board import HISTORY_IMPORTED, HISTORY_NONE, HISTORY_PARTLY

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "migration.md"
GRAFANA = ROOT / "dashboards" / "grafana"
# GlideinWMS's monitoring pages: the factory's and the frontend's under creation/web_base/
# (factory/index.html and frontend/index.html link them all), as of glideinWMS/glideinwms efdc530a5.
PAGES = {
    "factory/index.html",
    "factoryStatus.html",
    "factoryStatusNow.html",
    "factoryEntryStatusNow.html",
    "factoryLogStatus.html",
    "factoryCompletedStats.html",
    "factoryRRDBrowse.html",
    "factoryRRDEntryMatrix.html",
    "factoryFrontendMonitorLink.html",
    "frontend/index.html",
    "frontendStatus.html",
    "frontendStatusNow.html",
    "frontendGroupGraphStatusNow.html",
    "frontendRRDBrowse.html",
    "frontendRRDGroupMatrix.html",
}
PANEL = re.compile(r"`(gwms-[a-z-]+): ([^`]+)`")


def rows() -> Iterator[list[str]]:
    """The page tables' rows: page, graphs, panels, history, notes."""
    for line in DOC.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 5 and cells[0].endswith(".html`"):
            yield cells


def titles(board: Path) -> set[str]:
    def walk(panels: list[dict[str, Any]]) -> Iterator[str]:
        for p in panels:
            yield p.get("title", "")
            yield from walk(p.get("panels", []))

    return set(walk(json.loads(board.read_text())["panels"]))


def test_every_page_is_listed() -> None:
    listed = {r[0].strip("`") for r in rows()}
    assert listed == PAGES


def test_every_named_panel_is_in_the_generated_dashboards() -> None:
    named = [m for r in rows() for m in PANEL.findall(r[2])]
    assert len(named) > 20
    for board, title in named:
        path = GRAFANA / f"{board}.json"
        assert path.is_file(), f"no dashboard {board}"
        assert title in titles(path), f"{board} has no panel {title!r}"


def test_a_page_without_a_panel_says_why() -> None:
    for page, _, panels, _, notes in rows():
        if panels == "none":
            assert len(notes) > 10, f"{page}: no panel and no reason"
        else:
            assert PANEL.findall(panels), f"{page}: {panels!r} names no panel as `dashboard: title`"


def test_the_dashboards_readme_links_it() -> None:
    assert "../docs/migration.md" in (ROOT / "dashboards" / "README.md").read_text()


def panels() -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for board in GRAFANA.glob("gwms-*.json"):
        stack = list(json.loads(board.read_text())["panels"])
        while stack:
            p = stack.pop()
            stack.extend(p.get("panels", []))
            out[(board.stem, p.get("title", ""))] = p
    return out


def test_a_panel_over_time_says_whether_it_has_the_rrd_history() -> None:
    """Each panel over time of the factory's series says if import-rrd fills its past, and the
    pages' table agrees: a page whose history is imported names panels that show it, and a page
    whose history is not, none that claim it."""
    notes = (HISTORY_IMPORTED, HISTORY_NONE, HISTORY_PARTLY.split("{")[0])
    every = panels()
    over_time = [p for p in every.values() if p["type"] in ("timeseries", "heatmap", "state-timeline")]
    said = [p for p in over_time if any(n in p.get("description", "") for n in notes)]
    assert len(said) > 30
    for p in over_time:
        if "gwms_entry_glideins" in json.dumps(p.get("targets")):
            assert HISTORY_NONE not in p["description"], p["title"]
    for _, _, named, history, _ in rows():
        for board, title in PANEL.findall(named):
            p = every[(board, title)]
            if p["type"] != "timeseries":
                continue
            if history.startswith("yes"):
                assert HISTORY_NONE not in p["description"], (board, title)
            elif history.startswith(("no", "legacy")):
                assert HISTORY_IMPORTED not in p["description"], (board, title)
