"""The factory at a glance (operators)."""

from __future__ import annotations

from gwms_obs import catalogue
from gwms_obs.catalogue import Category, Outcome

from .. import names as N
from ..board import FACTORY_SEL, Board, Drill, Target, at_end, pilot_links, ranked
from .common import (
    BY_ENTRY,
    CPU_UNITS,
    ENTRY_HEALTH,
    ENTRY_LINKS,
    FACTORY,
    HOURS,
    LEGEND_ENTRY,
    NO_MATCH,
    OVERVIEW,
    SEL,
    SEL_ENTRY,
    TO_SITE,
    WASTE_SEL,
    hours,
    top,
)

# The factory series' name where there is no factory label (one factory's own Prometheus).
THIS_FACTORY = "this factory"
FACTORIES = 20  # most factories a global view is budgeted for: two series each on the per-factory panel


def _per_factory(expr: str) -> str:
    """``expr`` (by factory) with the absent label named: on one factory's Prometheus the one series
    has no factory label (only Thanos attaches it), and label_replace's anchored "" matches only that."""
    return f'label_replace({expr}, "{FACTORY}", "{THIS_FACTORY}", "{FACTORY}", "")'


def factory_overview() -> Board:
    b = Board(
        OVERVIEW, "GlideinWMS factory / Overview", "The factory at a glance: is every entry working?", "operators"
    )
    G = catalogue.ENTRY_GLIDEINS.name
    cpu = catalogue.CPU_SECONDS.name
    for title, description, unit, expr, q in (
        (
            "Running glideins",
            "Glideins running now, all selected entries.",
            catalogue.ENTRY_GLIDEINS.grafana_unit,
            f'sum({G}{{{SEL},state="running"}})',
            "How many pilots are running right now?",
        ),
        (
            "Held glideins",
            "Glideins held in the factory queue now.",
            catalogue.ENTRY_GLIDEINS.grafana_unit,
            f'sum({G}{{{SEL},state="held"}})',
            "Is anything stuck held in the factory queue?",
        ),
        (
            "Entries in downtime",
            "Entries whose downtime flag is set.",
            catalogue.ENTRY_DOWNTIME.grafana_unit,
            f"sum({catalogue.ENTRY_DOWNTIME.name}{{{SEL_ENTRY}}})",
            "How many entries are in downtime?",
        ),
        (
            "CPU units in use",
            "Canonical CPU units (1 core + 2 GB) of completed pilots, averaged over 5 minutes.",
            CPU_UNITS,
            f"sum({N.RR_CPU_RATE}{{{SEL}}})",
            "How much CPU is the factory delivering?",
        ),
        (
            "Goodput share",
            "Share of the canonical CPU time of pilots completed in the range that went to user jobs that finished.",
            "percentunit",
            f'sum(increase({cpu}{{{SEL},category="{Category.GOODPUT}"}}[$__range]))'
            f" / sum(increase({cpu}{{{SEL}}}[$__range]))",
            "What share of what we provisioned did user jobs use?",
        ),
        (
            "Pilots not matching",
            "Share of the pilots completed in the range whose HTCondor started but never got a job.",
            "percentunit",
            f"sum(increase({catalogue.PILOTS.name}{{{SEL},{NO_MATCH}}}[$__range]))"
            f" / sum(increase({catalogue.PILOTS.name}{{{SEL}}}[$__range]))",
            "Are pilots starting where no job wants them?",
        ),
    ):
        b.add("stat", title, description, unit, [Target(expr, instant=True)], budget=1, question=q, w=4, h=4)
    b.add(
        "timeseries",
        "CPU units and last pilot age, per factory",
        "Canonical CPU units of completed pilots per factory (left axis), and the time since each factory's"
        " newest completed pilot ended (right axis): a factory whose age climbs has stopped returning pilots;"
        " one whose lines end has stopped reporting at all. On one factory's own Prometheus the series carry"
        f" no factory label: one pair of lines, named {THIS_FACTORY!r}.",
        CPU_UNITS,
        [
            Target(_per_factory(f"sum by ({FACTORY}) ({N.RR_CPU_RATE}{{{SEL}}})"), f"{{{{{FACTORY}}}}} CPU units"),
            Target(
                _per_factory(f"time() - max by ({FACTORY}) ({catalogue.PILOT_LAST_COMPLETED.name}{{{SEL}}})"),
                f"{{{{{FACTORY}}}}} last pilot age",
                unit="s",
            ),
        ],
        budget=2 * FACTORIES,
        question="Which factory provides how much, and is any factory silent?",
        w=24,
    )
    b.add(
        "timeseries",
        "Glideins by state",
        "Factory queue per state, all selected entries.",
        catalogue.ENTRY_GLIDEINS.grafana_unit,
        [Target(f"sum by (state) ({G}{{{SEL}}})", "{{state}}")],
        budget=10,
        question="How is the factory queue split between idle, running and held?",
        stacked=True,
    )
    b.add(
        "timeseries",
        "Pilot outcomes",
        "Completed pilots per second by outcome.",
        catalogue.PILOTS.rate_grafana_unit,
        [Target(f"sum by (outcome) ({N.RR_PILOTS_RATE}{{{SEL}}})", "{{outcome}}")],
        budget=len(Outcome),
        question="What becomes of the pilots: jobs, no match, validation failure, lost?",
        stacked=True,
    )
    b.add(
        "timeseries",
        "Badput ratio, top $topn entries",
        "Share of user-job CPU time that was badput over the last hour (what GwmsEntryBadputHigh compares);"
        " the $topn entries with the highest mean over the range.",
        "percentunit",
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f"{N.RR_BADPUT_RATIO}{{{SEL_ENTRY}}}",
                    f"max by ({BY_ENTRY}) (avg_over_time({at_end(f'{N.RR_BADPUT_RATIO}{{{SEL_ENTRY}}}')}))",
                ),
                LEGEND_ENTRY,
            )
        ],
        budget=10,
        question="Which entries are failing their users' jobs right now?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "bargauge",
        "Waste by site, top $topn (canonical CPU hours)",
        f"Canonical CPU hours of pilots completed in the range that no user job used to completion"
        f" ({', '.join(catalogue.WASTE)}), by site.",
        HOURS,
        [Target(top(hours(catalogue.CPU_SECONDS, WASTE_SEL, "site")), "{{site}}")],
        budget=10,
        question="Which sites waste the most?",
        drill=(TO_SITE, *pilot_links("site")),
    )
    b.add(
        "table",
        "Alerts firing",
        "gwms-obs alerts firing now (Prometheus ALERTS series), one row per alert and entry"
        " (and factory, on the global view: each factory's Prometheus evaluates its own alerts).",
        "short",
        [
            Target(
                f"sum by (alertname, {FACTORY}, entry, site, severity)"
                f' ({N.ALERTS}{{{FACTORY_SEL},alertstate="firing"}})'
            )
        ],
        budget=5000,  # bounded by alerts x entries; a table, not a chart
        question="What is alerting, and where?",
        w=24,
        drill=(Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"), *pilot_links("entry")),
    )
    return b
