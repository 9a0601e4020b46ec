"""Frontend demand against provisioning: requested vs running vs idle, bottlenecks."""

from __future__ import annotations

from gwms_obs import catalogue

from ..board import Board, Drill, Target, pilot_links, ranked
from .common import (
    BY_ENTRY,
    CLIENTS,
    ENTRY_HEALTH,
    FACTORY,
    HOURS,
    IDLE_STATES,
    PROVISIONING,
    SEL,
    TO_CLIENT,
    TO_ENTRY,
    TO_PROVISIONING,
    add_by_state,
    hours,
    legend,
    over_range,
    rate,
    top,
)


def provisioning() -> Board:
    b = Board(
        PROVISIONING,
        "GlideinWMS factory / Frontend demand and provisioning",
        "What the frontends ask of each entry against what runs: requested vs running vs idle,"
        " insufficient demand and provisioning bottlenecks.",
        "VO operators and factory operators",
    )
    G, R = catalogue.ENTRY_GLIDEINS, catalogue.ENTRY_REQUESTED
    b.add(
        "timeseries",
        "Requested vs running vs idle, per frontend",
        "Idle glideins the frontend asks for, glideins running and idle in the factory queue, per frontend.",
        G.grafana_unit,
        [
            Target(f'sum by (client) ({R.name}{{{SEL},kind="idle"}})', "{{client}} requested idle"),
            Target(f'sum by (client) ({G.name}{{{SEL},state="running"}})', "{{client}} running"),
            Target(f"sum by (client) ({G.name}{{{SEL},{IDLE_STATES}}})", "{{client}} idle"),
        ],
        budget=3 * CLIENTS,
        question="Does each frontend get the glideins it asks for?",
        w=24,
        drill=(TO_CLIENT,),
    )
    b.add(
        "timeseries",
        "Requested idle, top $topn entries",
        "Idle glideins the frontends ask of the entry (after the factory's adjustment), the $topn entries"
        " asked most over the range.",
        R.grafana_unit,
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f'sum by ({BY_ENTRY}, kind) ({R.name}{{{SEL},kind=~"idle|adjusted_idle"}})',
                    over_range(R, f'{SEL},kind="idle"', BY_ENTRY, "avg_over_time"),
                ),
                legend("entry", "kind", FACTORY),
            )
        ],
        budget=2 * 10,
        question="Which entries are the frontends asking most of?",
        drill=(TO_PROVISIONING, TO_ENTRY),
    )
    b.add(
        "table",
        "Per entry: requested, running, idle, max running; top $topn by requested",
        "Now, per entry and frontend: what the frontend asks, what the factory queue holds.",
        G.grafana_unit,
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f"sum by ({BY_ENTRY}, client, kind) ({R.name}{{{SEL}}})",
                    f'sum by ({BY_ENTRY}) ({R.name}{{{SEL},kind="idle"}})',
                )
            ),
            Target(
                ranked(
                    BY_ENTRY,
                    f'sum by ({BY_ENTRY}, client, state) ({G.name}{{{SEL},state=~"running|held"}})',
                    f'sum by ({BY_ENTRY}) ({R.name}{{{SEL},kind="idle"}})',
                )
            ),
        ],
        budget=2 * 3 * 10 * 3,
        question="For one entry, what is asked and what is there?",
        w=24,
        drill=(Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"), *pilot_links("entry", "client")),
    )
    U, VG, VC = catalogue.ENTRY_USER_JOBS, catalogue.ENTRY_VO_GLIDEINS, catalogue.ENTRY_VO_CORES
    add_by_state(
        b,
        "User jobs matching, per frontend",
        "Frontend-reported user jobs matching the selected entries: idle (waiting) and running.",
        U,
        "client",
        SEL,
        ("idle", "running"),
        "How many user jobs wait, and how many run, per frontend?",
        drill=(TO_CLIENT,),
    )
    b.add(
        "timeseries",
        "VO pool: glideins and cores, per frontend",
        "The entries' glideins and cores registered in each frontend's pool: idle (unclaimed) and running.",
        VG.grafana_unit,
        [
            Target(f"sum by (client, state) ({VG.name}{{{SEL}}})", "{{client}} glideins {{state}}"),
            Target(f"sum by (client, state) ({VC.name}{{{SEL}}})", "{{client}} cores {{state}}"),
        ],
        budget=2 * 2 * CLIENTS,
        question="Are the pilots in the VO pool claimed?",
        drill=(TO_CLIENT,),
    )
    ID, BN = catalogue.ENTRY_INSUFFICIENT_DEMAND, catalogue.ENTRY_BOTTLENECK
    b.add(
        "timeseries",
        "Insufficient demand, per frontend",
        "Idle cores of the entries' pilots in the VO pool while no matching user job waits.",
        ID.grafana_unit,
        [Target(f"sum by (client) ({ID.name}{{{SEL}}})", "{{client}}")],
        budget=CLIENTS,
        question="When do pilots sit idle for lack of jobs (insufficient demand)?",
        drill=(TO_CLIENT,),
    )
    b.add(
        "timeseries",
        "Provisioning bottleneck, per frontend",
        "Idle matching user jobs while none of the entries' pilots is idle in the VO pool.",
        BN.grafana_unit,
        [Target(f"sum by (client) ({BN.name}{{{SEL}}})", "{{client}}")],
        budget=CLIENTS,
        question="When do jobs wait for lack of pilots (provisioning bottleneck)?",
        drill=(TO_CLIENT,),
    )
    IDS, BNS = catalogue.ENTRY_INSUFFICIENT_DEMAND_SECONDS, catalogue.ENTRY_BOTTLENECK_SECONDS
    b.add(
        "bargauge",
        "Insufficient demand over the range, top $topn entries (core-hours)",
        "Idle pilot core-hours with no matching job waiting, per entry, in the time range.",
        HOURS,
        [Target(top(hours(IDS, SEL, BY_ENTRY)), "{{entry}}")],
        budget=10,
        question="Which entries have the most idle cores for lack of demand?",
        drill=(TO_PROVISIONING, TO_ENTRY, *pilot_links("entry")),
    )
    b.add(
        "bargauge",
        "Provisioning bottleneck over the range, top $topn entries (job-hours)",
        "Hours user jobs waited at the entry while none of its pilots was idle, in the time range.",
        HOURS,
        [Target(top(hours(BNS, SEL, BY_ENTRY)), "{{entry}}")],
        budget=10,
        question="Which entries need more pilots (the most job-hours waiting)?",
        drill=(TO_PROVISIONING, TO_ENTRY, *pilot_links("entry")),
    )
    b.add(
        "timeseries",
        "Insufficient demand, rate",
        "Core-seconds per second of insufficient demand (idle cores), all selected entries:"
        " the integral the range panel sums.",
        IDS.rate_grafana_unit,
        [Target(f"sum({rate(IDS)})", "insufficient demand (cores)")],
        budget=1,
        question="Is idle capacity growing or shrinking?",
    )
    b.add(
        "timeseries",
        "Provisioning bottleneck, rate",
        "Job-seconds per second the selected entries' matching jobs waited with no idle pilot.",
        BNS.rate_grafana_unit,
        [Target(f"sum({rate(BNS)})", "bottleneck (jobs)")],
        budget=1,
        question="Is the provisioning backlog growing or shrinking?",
    )
    return b
