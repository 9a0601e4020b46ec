"""Canonical accounting: where the provisioned resources went; ranked waste."""

from __future__ import annotations

from gwms_obs import catalogue
from gwms_obs.catalogue import Category

from .. import names as N
from ..board import Board, Drill, Target, pilot_links, ranked
from .common import (
    ACCOUNTING,
    BY_ENTRY,
    CPU_UNITS,
    ENTRY_HEALTH,
    ENTRY_LINKS,
    GPU_UNITS,
    HOURS,
    LEGEND_ENTRY,
    PHASES,
    SEL,
    TO_CLIENT,
    TO_SITE,
    WASTE_SEL,
    hours,
    in_range,
    over_range,
    rate,
    top,
)


def accounting() -> Board:
    b = Board(
        ACCOUNTING,
        "GlideinWMS factory / Canonical accounting",
        "Where the provisioned resources went, in canonical units (CPU: 1 core + 2 GB; GPU: 1 GPU);"
        " which entries and sites waste the most, and on what.",
        "VO operators, funding reports, operators",
    )
    CPU = catalogue.CPU_SECONDS
    b.add(
        "timeseries",
        "CPU units by category",
        "CPU canonical units in use, by time category.",
        CPU_UNITS,
        [Target(f"sum by (category) ({N.RR_CPU_RATE}{{{SEL}}})", "{{category}}")],
        budget=len(Category),
        question="Where did the provisioned CPU go?",
        stacked=True,
    )
    b.add(
        "timeseries",
        "CPU category shares",
        "The same, as shares of all accounted CPU time.",
        "percentunit",
        [Target(f"sum by (category) ({N.RR_CPU_RATE}{{{SEL}}})", "{{category}}")],
        budget=len(Category),
        question="Is the share of waste growing?",
        percent=True,
    )
    b.add(
        "bargauge",
        "Waste by entry, top $topn (canonical CPU hours)",
        f"Canonical CPU hours of pilots completed in the range no user job used to completion"
        f" ({', '.join(catalogue.WASTE)}).",
        HOURS,
        [Target(top(hours(CPU, WASTE_SEL, BY_ENTRY)), "{{entry}}")],
        budget=10,
        question="Which entries waste the most canonical core-hours?",
        drill=(*ENTRY_LINKS, *pilot_links("entry")),
    )
    b.add(
        "bargauge",
        "Waste share by entry, top $topn",
        "Wasted / all canonical CPU time of the entry's pilots completed in the range (small entries' problems).",
        "percentunit",
        [Target(top(f"{in_range(CPU, WASTE_SEL, BY_ENTRY)} / {in_range(CPU, SEL, BY_ENTRY)}"), LEGEND_ENTRY)],
        budget=10,
        question="Which entries waste the largest share of their pilots?",
        drill=(*ENTRY_LINKS, *pilot_links("entry")),
    )
    b.add(
        "table",
        "Waste by entry and category, top $topn entries (canonical CPU hours)",
        "The top entries' waste split by what it was, over the range, largest first.",
        HOURS,
        [
            Target(
                "sort_desc("
                + ranked(
                    BY_ENTRY,
                    hours(CPU, WASTE_SEL, f"{BY_ENTRY}, site, category"),
                    over_range(CPU, WASTE_SEL, BY_ENTRY),
                )
                + ")"
            )
        ],
        budget=10 * len(catalogue.WASTE),
        question="On what do the most wasteful entries waste it?",
        w=24,
        drill=(
            Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"),
            Drill(PHASES, "Pilot phases of ${__data.fields.entry}", "entry"),
            *pilot_links("entry"),
        ),
    )
    b.add(
        "bargauge",
        "Waste by site, top $topn (canonical CPU hours)",
        "Canonical CPU hours of pilots completed in the range no user job used to completion, per site.",
        HOURS,
        [Target(top(hours(CPU, WASTE_SEL, "site")), "{{site}}")],
        budget=10,
        question="Which sites waste the most canonical core-hours?",
        drill=(TO_SITE, *pilot_links("site")),
    )
    b.add(
        "bargauge",
        "Waste share by site, top $topn",
        "Wasted / all canonical CPU time per site, pilots completed in the range.",
        "percentunit",
        [Target(top(f"{in_range(CPU, WASTE_SEL, 'site')} / {in_range(CPU, SEL, 'site')}"), "{{site}}")],
        budget=10,
        question="Which sites waste the largest share?",
        drill=(TO_SITE, *pilot_links("site")),
    )
    b.add(
        "timeseries",
        "Preemption badput, top $topn entries",
        "CPU units of user jobs cut off because their pilot ended, the $topn entries with the most over the range.",
        CPU_UNITS,
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f'sum by ({BY_ENTRY}) ({N.RR_CPU_RATE}{{{SEL},category="{Category.PREEMPTION_BADPUT}"}})',
                    over_range(CPU, f'{SEL},category="{Category.PREEMPTION_BADPUT}"', BY_ENTRY),
                ),
                LEGEND_ENTRY,
            )
        ],
        budget=10,
        question="Where are user jobs preempted by the end of their pilot?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "timeseries",
        "CPU units by frontend and category",
        "CPU canonical units per frontend (client), the $topn frontends with the most over the range.",
        CPU_UNITS,
        [
            Target(
                ranked(
                    "client",
                    f"sum by (client, category) ({N.RR_CPU_RATE}{{{SEL}}})",
                    over_range(CPU, SEL, "client"),
                ),
                "{{client}} {{category}}",
            )
        ],
        budget=10 * len(Category),
        question="What did each frontend (VO) get, and how much of it was waste?",
        drill=(TO_CLIENT,),
    )
    b.add(
        "timeseries",
        "CPU units by category and accuracy",
        "The accuracy label says how each part was measured (exact, stats, completed_log, condor_event_log, none).",
        CPU_UNITS,
        [Target(f"sum by (category, accuracy) ({N.RR_CPU_RATE}{{{SEL}}})", "{{category}} ({{accuracy}})")],
        budget=len(Category) * len(catalogue.Accuracy),
        question="How much of the accounting is exact, and how much estimated?",
    )
    GPU = catalogue.GPU_SECONDS
    b.add(
        "timeseries",
        "GPU units by category",
        "GPUs in use by completed pilots, by time category (1 GPU = 1 canonical unit).",
        GPU_UNITS,
        [Target(f"sum by (category) ({N.RR_GPU_RATE}{{{SEL}}})", "{{category}}")],
        budget=len(Category),
        question="How are the GPUs used?",
        stacked=True,
    )
    b.add(
        "bargauge",
        "GPU hours by entry, top $topn",
        "GPU-hours of pilots completed in the range, the entries with the most.",
        HOURS,
        [Target(top(hours(GPU, SEL, BY_ENTRY)), "{{entry}}")],
        budget=10,
        question="Which entries provide the GPUs?",
        drill=(*ENTRY_LINKS, *pilot_links("entry")),
    )
    b.add(
        "table",
        "Unit-hours over the range, top $topn entries",
        "CPU and GPU canonical unit-hours of the $topn entries with the most, by frontend, category and accuracy.",
        HOURS,
        [
            Target(
                ranked(
                    BY_ENTRY,
                    hours(m, SEL, f"{BY_ENTRY}, client, site, category, accuracy"),
                    over_range(m, SEL, BY_ENTRY),
                )
            )
            for m in (CPU, GPU)
        ],
        budget=2 * 10 * 3 * len(Category) * len(catalogue.Accuracy),
        question="The numbers for a report: hours per entry, frontend and category.",
        w=24,
        drill=(Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"), *pilot_links("entry", "client")),
    )
    b.add(
        "timeseries",
        "User jobs by category",
        "User jobs per second by where their time went.",
        catalogue.USER_JOBS.rate_grafana_unit,
        [Target(f"sum by (category) ({rate(catalogue.USER_JOBS)})", "{{category}}")],
        budget=len(Category),
        question="How many user jobs ran, and how did they end?",
        w=24,
    )
    return b
