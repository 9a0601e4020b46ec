"""The Grafana dashboards: one panel per operator question, readable at 500 entries.

Pinned in pyproject.toml to the SDK build for **Grafana 11.6** (the version
ansible/roles/grafana deploys; schemaVersion 41, classic JSON for the file
provisioner). One module per board in ``boards/`` (their shared selectors,
units, uids and drill-down links in ``boards/common.py``; the panel machinery
in ``board.py``). Every expression selects names from gwms_obs.catalogue or
names.py; every panel's unit comes from the metric it shows
(``MetricDef.grafana_unit``, or ``rate_grafana_unit`` for a rate). Wherever a
series per entry, site or frontend would be drawn, the panel ranks them and
keeps the Top N over the whole range (board.ranked), so a 500-entry factory
draws N lines, not 500. dashboards/README.md lists the questions
(:func:`questions_markdown`).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from .board import Board
from .boards.accounting import accounting
from .boards.common import SITE_HEALTH  # noqa: F401 - the live test names the board by it
from .boards.entry_health import entry_health
from .boards.frontend import frontend
from .boards.overview import factory_overview
from .boards.pilot_phases import pilot_phases
from .boards.provisioning import provisioning
from .boards.site_health import site_health
from .boards.stack_health import stack_health

BOARDS: tuple[Callable[[], Board], ...] = (
    factory_overview,
    site_health,
    entry_health,
    provisioning,
    accounting,
    pilot_phases,
    stack_health,
    frontend,
)


def boards() -> list[Board]:
    return [fn() for fn in BOARDS]


def grafana_json() -> dict[str, str]:
    """``dashboards/grafana/<uid>.json`` (relative to the repository) -> text."""
    return {
        f"dashboards/grafana/{b.uid}.json": json.dumps(b.build(), indent=2, sort_keys=True) + "\n" for b in boards()
    }


def questions_markdown() -> str:
    """The question list of dashboards/README.md: each question with the panel that answers it."""
    out = []
    for b in boards():
        out += [f"### {b.title.split(' / ')[-1]} (`{b.uid}`), for {b.audience}", ""]
        out += ["| question | panel |", "|---|---|"]
        out += [f"| {s.question} | {s.title} |" for s in b.specs if s.question]
        out.append("")
    return "\n".join(out) + "\n"
