"""The Grafana dashboards: one panel per operator question, readable at 500 entries.

Pinned in pyproject.toml to the SDK build for **Grafana 11.6** (the version
ansible/roles/grafana deploys; schemaVersion 41, classic JSON for the file
provisioner). Every expression selects names from gwms_obs.catalogue or
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

from gwms_obs import catalogue
from gwms_obs.catalogue import Category, Outcome

from . import health
from . import names as N
from .board import TOPN, Board, Drill, Target, at_end, ranked

SEL = 'entry=~"$entry",client=~"$client",site=~"$site"'  # POOL-labelled metrics
SEL_ENTRY = 'entry=~"$entry",site=~"$site"'  # ENTRY-labelled metrics
WASTE = "|".join(catalogue.WASTE)
WASTE_SEL = f'{SEL},category=~"{WASTE}"'
GOODPUT_SEL = f'{SEL},category="{Category.GOODPUT}"'
VALIDATION_FAILED = f'outcome="{Outcome.VALIDATION_FAILED}"'
NO_MATCH = f'outcome="{Outcome.NO_MATCH}"'
# Queue states that together make "idle" (gwms_entry_glideins' help says which).
IDLE_STATES = 'state=~"wait|pending|stagein|idleother"'
CPU_UNITS = catalogue.CPU_SECONDS.rate_grafana_unit  # what the CPU recording rule is in
GPU_UNITS = catalogue.GPU_SECONDS.rate_grafana_unit
HOURS = "h"

# Boards by uid, for the drill-down links.
OVERVIEW = "gwms-factory-overview"
ENTRY_HEALTH = "gwms-entry-health"
PROVISIONING = "gwms-provisioning"
ACCOUNTING = "gwms-accounting"
PHASES = "gwms-pilot-phases"
STACK = "gwms-stack-health"
SITE_HEALTH = "gwms-site-health"
STATES = (
    (int(health.Status.OK), "ok", "green"),
    (int(health.Status.DEGRADED), "degraded", "yellow"),
    (int(health.Status.FAILING), "failing", "red"),
)

TO_ENTRY = Drill(ENTRY_HEALTH, "Entry health of ${__field.labels.entry}", "entry")
TO_SITE = Drill(ENTRY_HEALTH, "Entry health of site ${__field.labels.site}", "site")
TO_PHASES = Drill(PHASES, "Pilot phases of ${__field.labels.entry}", "entry")
TO_ACCOUNTING = Drill(ACCOUNTING, "Accounting of ${__field.labels.entry}", "entry")
TO_CLIENT = Drill(ACCOUNTING, "Accounting of frontend ${__field.labels.client}", "client")
TO_PROVISIONING = Drill(PROVISIONING, "Provisioning of ${__field.labels.entry}", "entry")
ENTRY_LINKS = (TO_ENTRY, TO_ACCOUNTING, TO_PHASES)
RUNTIME_SEL = f'job="{N.JOB_EXPORTER}"'


def rate_unit(m: catalogue.MetricDef) -> str:
    """The Grafana unit of ``rate(m)`` (kept for the unit test)."""
    return m.rate_grafana_unit


def _rate(m: catalogue.MetricDef, sel: str = SEL, extra: str = "", suffix: str = "") -> str:
    inner = f"{sel},{extra}" if extra else sel
    return f"rate({m.name}{suffix}{{{inner}}}[$__rate_interval])"


def _over_range(m: catalogue.MetricDef, sel: str, by: str, fn: str = "increase") -> str:
    """``sum by (by) (fn(m{sel}[$__range] @ end()))``: one value per ``by`` for the whole range."""
    return f"sum by ({by}) ({fn}({at_end(f'{m.name}{{{sel}}}')}))"


def _hours(m: catalogue.MetricDef, sel: str, by: str) -> str:
    return f"sum by ({by}) (increase({m.name}{{{sel}}}[$__range])) / 3600"


def _or_zero(expr: str) -> str:
    # Counters some processes create only at their first event: 0, not "No data", when healthy.
    return f"({expr}) or on () vector(0)"  # the 0 only when there is no series at all


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
                    "entry",
                    f"{N.RR_BADPUT_RATIO}{{{SEL_ENTRY}}}",
                    f"max by (entry) (avg_over_time({at_end(f'{N.RR_BADPUT_RATIO}{{{SEL_ENTRY}}}')}))",
                ),
                "{{entry}}",
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
        [
            Target(
                f"sort_desc(topk(${TOPN}, {_hours(catalogue.CPU_SECONDS, WASTE_SEL, 'site')}))",
                "{{site}}",
            )
        ],
        budget=10,
        question="Which sites waste the most?",
        drill=(TO_SITE,),
    )
    b.add(
        "table",
        "Alerts firing",
        "gwms-obs alerts firing now (Prometheus ALERTS series), one row per alert and entry.",
        "short",
        [Target(f'sum by (alertname, entry, site, severity) ({N.ALERTS}{{alertstate="firing"}})')],
        budget=5000,  # bounded by alerts x entries; a table, not a chart
        question="What is alerting, and where?",
        w=24,
        drill=(Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"),),
    )
    return b


def entry_health() -> Board:
    b = Board(
        ENTRY_HEALTH,
        "GlideinWMS factory / Entry and site health",
        "Per entry and site: queue, held, validation failures, unmatched pilots, time to start, efficiency;"
        " every per-entry panel shows the Top N.",
        "site admins and operators",
    )
    G = catalogue.ENTRY_GLIDEINS.name
    P = catalogue.PILOTS
    b.add(
        "timeseries",
        "Glideins by entry and state, top $topn entries",
        "Factory queue of the $topn entries with the most glideins over the range.",
        catalogue.ENTRY_GLIDEINS.grafana_unit,
        [
            Target(
                ranked(
                    "entry",
                    f"sum by (entry, state) ({G}{{{SEL}}})",
                    _over_range(catalogue.ENTRY_GLIDEINS, SEL, "entry", "avg_over_time"),
                ),
                "{{entry}} {{state}}",
            )
        ],
        budget=10 * 10,
        question="Where are the glideins queued, and in what state?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "timeseries",
        "Held glideins, top $topn entries",
        "Held glideins of the $topn entries with the most held over the range.",
        catalogue.ENTRY_GLIDEINS.grafana_unit,
        [
            Target(
                ranked(
                    "entry",
                    f'sum by (entry) ({G}{{{SEL},state="held"}})',
                    _over_range(catalogue.ENTRY_GLIDEINS, f'{SEL},state="held"', "entry", "max_over_time"),
                ),
                "{{entry}}",
            )
        ],
        budget=10,
        question="Which entries have held glideins?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "timeseries",
        "Validation failures by site, top $topn",
        "Pilots per second that failed worker-node validation, per site.",
        P.rate_grafana_unit,
        [
            Target(
                ranked(
                    "site",
                    f"sum by (site) ({_rate(P, extra=VALIDATION_FAILED)})",
                    _over_range(P, f"{SEL},{VALIDATION_FAILED}", "site"),
                ),
                "{{site}}",
            )
        ],
        budget=10,
        question="Which sites fail worker-node validation?",
        drill=(TO_SITE,),
    )
    b.add(
        "timeseries",
        "Validation failure ratio, top $topn entries",
        "Validation failures / all completed pilots, the $topn entries with the most failures over the range.",
        "percentunit",
        [
            Target(
                ranked(
                    "entry",
                    f"sum by (entry) ({_rate(P, extra=VALIDATION_FAILED)}) / sum by (entry) ({_rate(P)})",
                    _over_range(P, f"{SEL},{VALIDATION_FAILED}", "entry"),
                ),
                "{{entry}}",
            )
        ],
        budget=10,
        question="Which entries' pilots fail validation most often?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "table",
        "Pilots not matching, by entry and frontend, top $topn",
        "Pilots completed in the range whose HTCondor started but never got a job, per entry and frontend.",
        P.grafana_unit,
        [
            Target(
                f"sort_desc(topk(${TOPN}, sum by (entry, site, client)"
                f" (increase({P.name}{{{SEL},{NO_MATCH}}}[$__range]))))"
            )
        ],
        budget=10,
        question="Where do pilots start but find no job, and for which frontend?",
        drill=(
            Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"),
            Drill(PROVISIONING, "Provisioning of ${__data.fields.entry}", "entry"),
        ),
    )
    b.add(
        "timeseries",
        "Time to start (validation) p90, slowest $topn entries",
        "90th percentile of the validation time before HTCondor, the $topn slowest entries over the range.",
        catalogue.PILOT_VALIDATION.grafana_unit,
        [
            Target(
                ranked(
                    "entry",
                    f"histogram_quantile(0.9, sum by (entry, le)"
                    f" ({_rate(catalogue.PILOT_VALIDATION, suffix='_bucket')}))",
                    f"histogram_quantile(0.9, sum by (entry, le)"
                    f" (increase({at_end(f'{catalogue.PILOT_VALIDATION.name}_bucket{{{SEL}}}')})))",
                ),
                "{{entry}}",
            )
        ],
        budget=10,
        question="Where do pilots take longest to start?",
        drill=(TO_ENTRY, TO_PHASES),
    )
    b.add(
        "timeseries",
        "Pilot lifetime p50, shortest-lived $topn entries",
        "Median wall-clock lifetime of completed pilots, the $topn entries whose pilots die youngest.",
        catalogue.PILOT_LIFETIME.grafana_unit,
        [
            Target(
                ranked(
                    "entry",
                    f"histogram_quantile(0.5, sum by (entry, le)"
                    f" ({_rate(catalogue.PILOT_LIFETIME, suffix='_bucket')}))",
                    f"histogram_quantile(0.5, sum by (entry, le)"
                    f" (increase({at_end(f'{catalogue.PILOT_LIFETIME.name}_bucket{{{SEL}}}')})))",
                    "bottomk",
                ),
                "{{entry}}",
            )
        ],
        budget=10,
        question="Where are pilots killed early?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "timeseries",
        "Efficiency (goodput share), least efficient $topn entries",
        "Goodput / all accounted CPU time, the $topn entries with the lowest share over the range.",
        "percentunit",
        [
            Target(
                ranked(
                    "entry",
                    f'sum by (entry) ({N.RR_CPU_RATE}{{{SEL},category="{Category.GOODPUT}"}})'
                    f" / sum by (entry) ({N.RR_CPU_RATE}{{{SEL}}})",
                    _over_range(catalogue.CPU_SECONDS, GOODPUT_SEL, "entry")
                    + " / "
                    + _over_range(catalogue.CPU_SECONDS, SEL, "entry"),
                    "bottomk",
                ),
                "{{entry}}",
            )
        ],
        budget=10,
        question="Which entries use their pilots least efficiently?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "table",
        "Entries without a completed pilot for longest, top $topn",
        "Time since each entry's newest completed pilot ended: an entry that stopped returning pilots.",
        "s",
        [
            Target(
                f"sort_desc(topk(${TOPN}, time() - max by (entry, site)"
                f" ({catalogue.PILOT_LAST_COMPLETED.name}{{{SEL}}})))"
            )
        ],
        budget=10,
        question="Which entries have stopped returning pilots?",
        drill=(Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"),),
    )
    b.add(
        "timeseries",
        "Frontend information age, oldest $topn entries",
        "Age of the frontend's information about the entry.",
        catalogue.ENTRY_INFO_AGE.grafana_unit,
        [
            Target(
                ranked(
                    "entry",
                    f"max by (entry) ({catalogue.ENTRY_INFO_AGE.name}{{{SEL}}})",
                    _over_range(catalogue.ENTRY_INFO_AGE, SEL, "entry", "max_over_time"),
                ),
                "{{entry}}",
            )
        ],
        budget=10,
        question="Is a frontend no longer talking to an entry?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "timeseries",
        "Status file age, oldest $topn entries",
        "Time since the factory last wrote the entry's status.",
        "s",
        [
            Target(
                ranked(
                    "entry",
                    f"time() - max by (entry) ({catalogue.ENTRY_UPDATED.name}{{{SEL_ENTRY}}})",
                    f"-max by (entry) ({catalogue.ENTRY_UPDATED.name}{{{SEL_ENTRY}}} @ end())",
                ),
                "{{entry}}",
            )
        ],
        budget=10,
        question="Has the factory stopped updating an entry?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "timeseries",
        "Entries in downtime",
        "1 while in downtime: the $topn entries in downtime longest over the range.",
        catalogue.ENTRY_DOWNTIME.grafana_unit,
        [
            Target(
                ranked(
                    "entry",
                    f"max by (entry) ({catalogue.ENTRY_DOWNTIME.name}{{{SEL_ENTRY}}})",
                    _over_range(catalogue.ENTRY_DOWNTIME, SEL_ENTRY, "entry", "avg_over_time"),
                ),
                "{{entry}}",
            )
        ],
        budget=10,
        question="Which entries are in downtime?",
        drill=ENTRY_LINKS,
    )
    return b


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
        budget=3 * 20,
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
                    "entry",
                    f'sum by (entry, kind) ({R.name}{{{SEL},kind=~"idle|adjusted_idle"}})',
                    _over_range(R, f'{SEL},kind="idle"', "entry", "avg_over_time"),
                ),
                "{{entry}} {{kind}}",
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
                    "entry",
                    f"sum by (entry, client, kind) ({R.name}{{{SEL}}})",
                    f'sum by (entry) ({R.name}{{{SEL},kind="idle"}})',
                )
            ),
            Target(
                ranked(
                    "entry",
                    f'sum by (entry, client, state) ({G.name}{{{SEL},state=~"running|held"}})',
                    f'sum by (entry) ({R.name}{{{SEL},kind="idle"}})',
                )
            ),
        ],
        budget=2 * 3 * 10 * 3,
        question="For one entry, what is asked and what is there?",
        w=24,
        drill=(Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"),),
    )
    U, VG, VC = catalogue.ENTRY_USER_JOBS, catalogue.ENTRY_VO_GLIDEINS, catalogue.ENTRY_VO_CORES
    b.add(
        "timeseries",
        "User jobs matching, per frontend",
        "Frontend-reported user jobs matching the selected entries: idle (waiting) and running.",
        U.grafana_unit,
        [Target(f'sum by (client, state) ({U.name}{{{SEL},state=~"idle|running"}})', "{{client}} {{state}}")],
        budget=2 * 20,
        question="How many user jobs wait, and how many run, per frontend?",
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
        budget=2 * 2 * 20,
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
        budget=20,
        question="When do pilots sit idle for lack of jobs (insufficient demand)?",
        drill=(TO_CLIENT,),
    )
    b.add(
        "timeseries",
        "Provisioning bottleneck, per frontend",
        "Idle matching user jobs while none of the entries' pilots is idle in the VO pool.",
        BN.grafana_unit,
        [Target(f"sum by (client) ({BN.name}{{{SEL}}})", "{{client}}")],
        budget=20,
        question="When do jobs wait for lack of pilots (provisioning bottleneck)?",
        drill=(TO_CLIENT,),
    )
    IDS, BNS = catalogue.ENTRY_INSUFFICIENT_DEMAND_SECONDS, catalogue.ENTRY_BOTTLENECK_SECONDS
    b.add(
        "bargauge",
        "Insufficient demand over the range, top $topn entries (core-hours)",
        "Idle pilot core-hours with no matching job waiting, per entry, in the time range.",
        HOURS,
        [Target(f"sort_desc(topk(${TOPN}, {_hours(IDS, SEL, 'entry')}))", "{{entry}}")],
        budget=10,
        question="Which entries have the most idle cores for lack of demand?",
        drill=(TO_PROVISIONING, TO_ENTRY),
    )
    b.add(
        "bargauge",
        "Provisioning bottleneck over the range, top $topn entries (job-hours)",
        "Hours user jobs waited at the entry while none of its pilots was idle, in the time range.",
        HOURS,
        [Target(f"sort_desc(topk(${TOPN}, {_hours(BNS, SEL, 'entry')}))", "{{entry}}")],
        budget=10,
        question="Which entries need more pilots (the most job-hours waiting)?",
        drill=(TO_PROVISIONING, TO_ENTRY),
    )
    b.add(
        "timeseries",
        "Insufficient demand, rate",
        "Core-seconds per second of insufficient demand (idle cores), all selected entries:"
        " the integral the range panel sums.",
        IDS.rate_grafana_unit,
        [Target(f"sum({_rate(IDS)})", "insufficient demand (cores)")],
        budget=1,
        question="Is idle capacity growing or shrinking?",
    )
    b.add(
        "timeseries",
        "Provisioning bottleneck, rate",
        "Job-seconds per second the selected entries' matching jobs waited with no idle pilot.",
        BNS.rate_grafana_unit,
        [Target(f"sum({_rate(BNS)})", "bottleneck (jobs)")],
        budget=1,
        question="Is the provisioning backlog growing or shrinking?",
    )
    return b


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
        [Target(f"sort_desc(topk(${TOPN}, {_hours(CPU, WASTE_SEL, 'entry')}))", "{{entry}}")],
        budget=10,
        question="Which entries waste the most canonical core-hours?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "bargauge",
        "Waste share by entry, top $topn",
        "Wasted / all canonical CPU time of the entry's pilots completed in the range (small entries' problems).",
        "percentunit",
        [
            Target(
                f"sort_desc(topk(${TOPN}, sum by (entry) (increase({CPU.name}{{{WASTE_SEL}}}[$__range]))"
                f" / sum by (entry) (increase({CPU.name}{{{SEL}}}[$__range]))))",
                "{{entry}}",
            )
        ],
        budget=10,
        question="Which entries waste the largest share of their pilots?",
        drill=ENTRY_LINKS,
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
                    "entry",
                    _hours(CPU, WASTE_SEL, "entry, site, category"),
                    _over_range(CPU, WASTE_SEL, "entry"),
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
        ),
    )
    b.add(
        "bargauge",
        "Waste by site, top $topn (canonical CPU hours)",
        "Canonical CPU hours of pilots completed in the range no user job used to completion, per site.",
        HOURS,
        [Target(f"sort_desc(topk(${TOPN}, {_hours(CPU, WASTE_SEL, 'site')}))", "{{site}}")],
        budget=10,
        question="Which sites waste the most canonical core-hours?",
        drill=(TO_SITE,),
    )
    b.add(
        "bargauge",
        "Waste share by site, top $topn",
        "Wasted / all canonical CPU time per site, pilots completed in the range.",
        "percentunit",
        [
            Target(
                f"sort_desc(topk(${TOPN}, sum by (site) (increase({CPU.name}{{{WASTE_SEL}}}[$__range]))"
                f" / sum by (site) (increase({CPU.name}{{{SEL}}}[$__range]))))",
                "{{site}}",
            )
        ],
        budget=10,
        question="Which sites waste the largest share?",
        drill=(TO_SITE,),
    )
    b.add(
        "timeseries",
        "Preemption badput, top $topn entries",
        "CPU units of user jobs cut off because their pilot ended, the $topn entries with the most over the range.",
        CPU_UNITS,
        [
            Target(
                ranked(
                    "entry",
                    f'sum by (entry) ({N.RR_CPU_RATE}{{{SEL},category="{Category.PREEMPTION_BADPUT}"}})',
                    _over_range(CPU, f'{SEL},category="{Category.PREEMPTION_BADPUT}"', "entry"),
                ),
                "{{entry}}",
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
                    _over_range(CPU, SEL, "client"),
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
        "The accuracy label says how each part was measured (exact, stats, completed_log, eventlog, none).",
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
        [Target(f"sort_desc(topk(${TOPN}, {_hours(GPU, SEL, 'entry')}))", "{{entry}}")],
        budget=10,
        question="Which entries provide the GPUs?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "table",
        "Unit-hours over the range, top $topn entries",
        "CPU and GPU canonical unit-hours of the $topn entries with the most, by frontend, category and accuracy.",
        HOURS,
        [
            Target(
                ranked(
                    "entry",
                    f"sum by (entry, client, site, category, accuracy) (increase({m.name}{{{SEL}}}[$__range])) / 3600",
                    _over_range(m, SEL, "entry"),
                )
            )
            for m in (CPU, GPU)
        ],
        budget=2 * 10 * 3 * len(Category) * len(catalogue.Accuracy),
        question="The numbers for a report: hours per entry, frontend and category.",
        w=24,
        drill=(Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"),),
    )
    b.add(
        "timeseries",
        "User jobs by category",
        "User jobs per second by where their time went.",
        catalogue.USER_JOBS.rate_grafana_unit,
        [Target(f"sum by (category) ({_rate(catalogue.USER_JOBS)})", "{{category}}")],
        budget=len(Category),
        question="How many user jobs ran, and how did they end?",
        w=24,
    )
    return b


def pilot_phases() -> Board:
    b = Board(
        PHASES,
        "GlideinWMS factory / Pilot phases",
        "Where pilot startup time goes, from the collector's span metrics; exemplars link to Jaeger traces.",
        "pilot developers and operators",
        variables=("entry", TOPN),
    )
    sel = f'service_name="{N.TRACE_SERVICE}",{N.SPAN_ENTRY}=~"$entry"'
    bucket = f"{N.SPAN_DURATION}_bucket"
    e = N.SPAN_ENTRY
    phase_links = (
        Drill(ENTRY_HEALTH, f"Entry health of ${{__field.labels.{e}}}", "entry", e),
        Drill(ACCOUNTING, f"Accounting of ${{__field.labels.{e}}}", "entry", e),
    )
    b.add(
        "timeseries",
        "Phase duration p90",
        "90th percentile per pilot phase; dots are exemplars (open the trace).",
        "s",
        [
            Target(
                f"histogram_quantile(0.9, sum by (span_name, le) (rate({bucket}{{{sel}}}[$__rate_interval])))",
                "{{span_name}}",
                exemplar=True,
            )
        ],
        budget=40,  # span names: the glidein's phases and validation scripts (tracing.conventions)
        question="Which phase of a pilot's startup takes the time?",
        w=24,
    )
    b.add(
        "timeseries",
        "Phase duration p50, slowest $topn entries",
        "Median per phase and entry, the $topn entries whose phases took longest over the range.",
        "s",
        [
            Target(
                ranked(
                    e,
                    f"histogram_quantile(0.5, sum by ({e}, span_name, le) (rate({bucket}{{{sel}}}[$__rate_interval])))",
                    f"max by ({e}) (histogram_quantile(0.5, sum by ({e}, span_name, le)"
                    f" (increase({at_end(f'{bucket}{{{sel}}}')}))))",
                ),
                f"{{{{{e}}}}} {{{{span_name}}}}",
                exemplar=True,
            )
        ],
        budget=10 * 40,
        question="At which entries are the phases slow?",
        drill=phase_links,
    )
    b.add(
        "timeseries",
        "Phases per second",
        "Spans per second by phase and status.",
        catalogue.PILOTS.rate_grafana_unit,
        [
            Target(
                f"sum by (span_name, status_code) (rate({N.SPAN_CALLS}{{{sel}}}[$__rate_interval]))",
                "{{span_name}} {{status_code}}",
            )
        ],
        budget=40 * 3,
        question="How many phases run, and how many fail?",
    )
    b.add(
        "table",
        "Slowest phases (p99 over the range), top $topn",
        "The slowest (entry, phase) pairs; the exemplars in the panels above link to the slowest pilots' traces.",
        "s",
        [
            Target(
                f"sort_desc(topk(${TOPN}, histogram_quantile(0.99, sum by ({e}, span_name, le)"
                f" (increase({bucket}{{{sel}}}[$__range])))))"
            )
        ],
        budget=10,
        question="Which (entry, phase) pairs are the slowest?",
        w=24,
        drill=(Drill(ENTRY_HEALTH, f"Entry health of ${{__data.fields.{e}}}", "entry", e),),
    )
    return b


def stack_health() -> Board:
    b = Board(
        STACK,
        "GlideinWMS factory / Monitoring stack health",
        "Is the monitoring itself working: exporter, collector, Prometheus, Alertmanager.",
        "whoever runs gwms-obs",
        variables=(),
    )
    b.add(
        "stat",
        "Targets up",
        "Scrape targets up, by job.",
        "short",
        [Target("sum by (job) (up)", "{{job}}", instant=True)],
        budget=10,
        question="Is every part of the stack being scraped?",
        w=16,
        h=4,
    )
    b.add(
        "table",
        "Exporter build",
        "Which gwms-obs version runs where, on which Python.",
        "short",
        [Target(f"max by (instance, version, python_version) ({catalogue.BUILD_INFO.name})")],
        budget=10,
        question="Which gwms-obs version is running?",
        w=8,
        h=4,
    )
    b.add(
        "timeseries",
        "Exporter lag",
        "Age of the oldest input not yet accounted.",
        catalogue.LAG.grafana_unit,
        [Target(f"max by (instance, source) ({catalogue.LAG.name})", "{{instance}} {{source}}")],
        budget=10,
        question="Is the exporter keeping up with the factory?",
    )
    b.add(
        "timeseries",
        "Time since the last scan",
        "Seconds since the exporter's last scan of the factory tree ended.",
        "s",
        [Target(f"time() - max by (instance) ({catalogue.LAST_SCAN.name})", "{{instance}}")],
        budget=5,
        question="Is the exporter still scanning?",
    )
    b.add(
        "timeseries",
        "Exporter parse errors",
        "Inputs skipped as unreadable per second (0 when none).",
        catalogue.PARSE_ERRORS.rate_grafana_unit,
        [
            Target(
                _or_zero(f"sum by (source, reason) (rate({catalogue.PARSE_ERRORS.name}[$__rate_interval]))"),
                "{{source}} {{reason}}",
            )
        ],
        budget=50,
        question="Is the exporter rejecting input, and why?",
    )
    b.add(
        "timeseries",
        "Labels over the cardinality budget",
        "Pilots and entry updates pooled under _overflow because their label was over budget, per second.",
        catalogue.LABEL_OVERFLOW.rate_grafana_unit,
        [
            Target(
                _or_zero(f"sum by (label) (rate({catalogue.LABEL_OVERFLOW.name}[$__rate_interval]))"),
                "{{label}}",
            )
        ],
        budget=len(catalogue.LABEL_CAPS) + 1,  # + the 0 drawn where there was no series
        question="Has the factory outgrown the cardinality budget?",
    )
    b.add(
        "timeseries",
        "Exporter scan duration",
        "How long the last scan took.",
        catalogue.SCAN_DURATION.grafana_unit,
        [Target(f"max by (instance) ({catalogue.SCAN_DURATION.name})", "{{instance}}")],
        budget=5,
        question="How long does a scan take?",
    )
    b.add(
        "timeseries",
        "Exporter read rate",
        "Bytes read per second by source.",
        catalogue.BYTES_READ.rate_grafana_unit,
        [Target(f"sum by (source) (rate({catalogue.BYTES_READ.name}[$__rate_interval]))", "{{source}}")],
        budget=len(catalogue.Source),
        question="How much does the exporter read?",
    )
    b.add(
        "timeseries",
        "Exporter records read",
        "Records read per second by source.",
        catalogue.RECORDS.rate_grafana_unit,
        [Target(f"sum by (source) (rate({catalogue.RECORDS.name}[$__rate_interval]))", "{{source}}")],
        budget=len(catalogue.Source),
        question="How many records does the exporter process?",
    )
    b.add(
        "timeseries",
        "Files followed",
        "Files the exporter follows, by source.",
        catalogue.FILES_TRACKED.grafana_unit,
        [Target(f"sum by (source) ({catalogue.FILES_TRACKED.name})", "{{source}}")],
        budget=len(catalogue.Source),
        question="How many files does the exporter follow?",
    )
    b.add(
        "timeseries",
        "Exporter CPU",
        "CPU seconds per second of the exporter process: 100 % is one core busy (its unit's CPUQuota bounds it).",
        "percentunit",
        [
            Target(
                f"sum by (instance) (rate({catalogue.PROCESS_CPU_SECONDS}{{{RUNTIME_SEL}}}[$__rate_interval]))",
                "{{instance}}",
            )
        ],
        budget=5,
        question="What does the exporter cost the factory host in CPU?",
    )
    b.add(
        "timeseries",
        "Exporter resident memory",
        "Resident memory of the exporter process (its unit's MemoryMax bounds it).",
        "bytes",
        [Target(f"max by (instance) ({catalogue.PROCESS_RESIDENT_MEMORY}{{{RUNTIME_SEL}}})", "{{instance}}")],
        budget=5,
        question="What does the exporter cost the factory host in memory?",
    )
    b.add(
        "timeseries",
        "Pilot span spools",
        "Span spools returned in pilots' stderr, by what the forwarder did, per second (0 when none).",
        catalogue.TRACE_SPOOLS.rate_grafana_unit,
        [
            Target(
                _or_zero(f"sum by (result) (rate({catalogue.TRACE_SPOOLS.name}[$__rate_interval]))"),
                "{{result}}",
            ),
        ],
        budget=5,
        question="Do the spans of pilots without network reach the collector?",
    )
    b.add(
        "timeseries",
        "Spool spans and requests",
        "Spans of the spools by result, and the forwarder's OTLP requests by result, per second (0 when none).",
        catalogue.TRACE_SPANS.rate_grafana_unit,
        [
            Target(
                _or_zero(f"sum by (result) (rate({catalogue.TRACE_SPANS.name}[$__rate_interval]))"),
                "spans {{result}}",
            ),
            Target(
                _or_zero(f"sum by (result) (rate({catalogue.TRACE_REQUESTS.name}[$__rate_interval]))"),
                "requests {{result}}",
            ),
        ],
        budget=10,
        question="Is the spool forwarder failing to send?",
    )
    b.add(
        "timeseries",
        "Collector spans in/out",
        "Spans accepted and exported per second.",
        "cps",
        [
            Target(f"sum(rate({N.OTELCOL_RECEIVER_ACCEPTED}[$__rate_interval]))", "accepted"),
            Target(f"sum(rate({N.OTELCOL_EXPORTER_SENT}[$__rate_interval]))", "sent"),
        ],
        budget=2,
        question="Are traces flowing through the collector?",
    )
    b.add(
        "timeseries",
        "Collector drops",
        "Spans refused, failed or not enqueued per second (0 when none).",
        "cps",
        [
            Target(_or_zero(f"sum(rate({N.OTELCOL_RECEIVER_REFUSED}[$__rate_interval]))"), "refused"),
            Target(_or_zero(f"sum(rate({N.OTELCOL_EXPORTER_FAILED}[$__rate_interval]))"), "send failed"),
            Target(_or_zero(f"sum(rate({N.OTELCOL_EXPORTER_ENQUEUE_FAILED}[$__rate_interval]))"), "enqueue failed"),
        ],
        budget=3,
        question="Is the collector losing spans?",
    )
    b.add(
        "timeseries",
        "Collector queue fill",
        "Export queue size / capacity.",
        "percentunit",
        [
            Target(
                f"max by (instance, exporter) ({N.OTELCOL_QUEUE_SIZE} / {N.OTELCOL_QUEUE_CAPACITY})",
                "{{instance}} {{exporter}}",
            )
        ],
        budget=10,
        question="Is the collector's queue to Jaeger filling?",
    )
    b.add(
        "timeseries",
        "Prometheus rule failures and dropped notifications",
        "Per second (0 when none).",
        "cps",
        [
            Target(f"sum(rate({N.PROM_RULE_EVAL_FAILURES}[$__rate_interval]))", "rule evaluation failures"),
            Target(f"sum(rate({N.PROM_NOTIFICATIONS_DROPPED}[$__rate_interval]))", "notifications dropped"),
        ],
        budget=2,
        question="Do the rules evaluate and the alerts leave Prometheus?",
    )
    b.add(
        "timeseries",
        "Prometheus head series",
        "Series in memory.",
        "short",
        [Target(f"max by (instance) ({N.PROM_HEAD_SERIES})", "{{instance}}")],
        budget=5,
        question="How many series does Prometheus hold?",
    )
    b.add(
        "timeseries",
        "Alertmanager notifications",
        "Notifications sent and failed per second, by integration.",
        "cps",
        [
            Target(f"sum by (integration) (rate({N.AM_NOTIFICATIONS}[$__rate_interval]))", "{{integration}} sent"),
            Target(
                f"sum by (integration) (rate({N.AM_NOTIFICATIONS_FAILED}[$__rate_interval]))", "{{integration}} failed"
            ),
        ],
        budget=40,
        question="Do alert mails go out?",
    )
    b.add(
        "timeseries",
        "Alertmanager alerts",
        "Alerts held by Alertmanager, by state.",
        "short",
        [Target(f"sum by (state) ({N.AM_ALERTS})", "{{state}}")],
        budget=5,
        question="How many alerts does Alertmanager hold?",
    )
    return b


def site_health() -> Board:
    b = Board(
        SITE_HEALTH,
        "GlideinWMS factory / Site health",
        "The red light per site: ok, degraded or failing, why, and what is at stake"
        " (gwms:site_status and gwms:site_problem, dashboards/gen/health.py; reasons in docs/runbooks.md).",
        "shifters and site admins",
        variables=("entry", "site", TOPN),
    )
    st, pr = N.RR_SITE_STATUS, N.RR_SITE_PROBLEM
    site_sel = 'site=~"$site"'
    for title, expr, q in (
        ("Sites failing", f"count({st}{{{site_sel}}} == 2) or on () vector(0)", "How many sites are failing?"),
        ("Sites degraded", f"count({st}{{{site_sel}}} == 1) or on () vector(0)", "How many sites are degraded?"),
        ("Sites ok", f"count({st}{{{site_sel}}} == 0) or on () vector(0)", "How many sites are green?"),
    ):
        b.add("stat", title, "Sites with this status now.", "short", [Target(expr, instant=True)], budget=1,
              question=q, w=8, h=4)  # fmt: skip
    b.add(
        "statetimeline",
        "Status of every site",
        "0 ok, 1 degraded, 2 failing: the worst problem of the site's entries.",
        "short",
        [Target(f"max by (site) ({st}{{{site_sel}}})", "{{site}}")],
        budget=100,  # every site: 500 entries are 100 sites
        question="Which sites are failing or degraded, and since when?",
        w=24,
        h=16,
        states=STATES,
        drill=(TO_SITE,),
    )
    b.add(
        "table",
        "Problems now",
        "Each entry's problems with their reason (docs/runbooks.md#site-health) and status (1 degraded, 2 failing).",
        "short",
        [Target(f"sort_desc({pr}{{{site_sel}}})")],
        budget=500 * len(health.Reason),
        question="What is wrong at each site that is not green, and at which entry?",
        w=24,
        drill=(
            Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"),
            Drill(ACCOUNTING, "Accounting of ${__data.fields.entry}", "entry"),
        ),
    )
    CPU = catalogue.CPU_SECONDS
    b.add(
        "bargauge",
        "Hours at stake at sites not green, top $topn (canonical CPU hours of waste)",
        "Waste of pilots completed in the range at each site that is degraded or failing now.",
        HOURS,
        [
            Target(
                f"sort_desc(topk(${TOPN}, {_hours(CPU, f'{WASTE_SEL},{site_sel}', 'site')} and on (site) ({st} > 0)))",
                "{{site}}",
            )
        ],
        budget=10,
        question="How many core-hours are at stake at the sites that are not green?",
        drill=(TO_SITE,),
    )
    b.add(
        "timeseries",
        "Problems by reason",
        "Entries with each problem over time.",
        "short",
        [Target(f"count by (reason) ({pr}{{{site_sel}}})", "{{reason}}")],
        budget=len(health.Reason),
        question="Which problems are most common, and are they growing?",
        stacked=True,
    )
    b.add(
        "timeseries",
        "Job failure ratio, top $topn entries (black holes)",
        "User jobs failing for reasons not the user's / all jobs, over the last hour.",
        "percentunit",
        [
            Target(
                ranked(
                    "entry",
                    f"{N.RR_JOB_FAILURE_RATIO}{{{SEL_ENTRY}}}",
                    f"max by (entry) (max_over_time({at_end(f'{N.RR_JOB_FAILURE_RATIO}{{{SEL_ENTRY}}}')}))",
                ),
                "{{entry}}",
            )
        ],
        budget=10,
        question="Is an entry a black hole, eating jobs and failing them?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "timeseries",
        "Validation failure share and its trend, top $topn entries",
        "The share over the last hour, and where its 6-hour trend puts it a day ahead.",
        "percentunit",
        [
            Target(
                ranked(
                    "entry",
                    f"{N.RR_VALIDATION_RATIO}{{{SEL_ENTRY}}}",
                    f"max by (entry) (max_over_time({at_end(f'{N.RR_VALIDATION_RATIO}{{{SEL_ENTRY}}}')}))",
                ),
                "{{entry}}",
            ),
            Target(
                ranked(
                    "entry",
                    f"predict_linear({N.RR_VALIDATION_RATIO}{{{SEL_ENTRY}}}[6h], 86400)",
                    f"max by (entry) (max_over_time({at_end(f'{N.RR_VALIDATION_RATIO}{{{SEL_ENTRY}}}')}))",
                ),
                "{{entry}} a day ahead",
            ),
        ],
        budget=2 * 10,
        question="Is a site getting worse at validating nodes?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "timeseries",
        "Waste share robust z against the fleet, top $topn entries",
        "(waste share - fleet median) / (1.4826 x MAD): above 3.5 an entry stands out from the fleet.",
        "short",
        [
            Target(
                ranked(
                    "entry",
                    f"{N.RR_WASTE_Z}{{{SEL_ENTRY}}}",
                    f"max by (entry) (max_over_time({at_end(f'{N.RR_WASTE_Z}{{{SEL_ENTRY}}}')}))",
                ),
                "{{entry}}",
            )
        ],
        budget=10,
        question="Which entries waste far more than the rest of the fleet?",
        drill=ENTRY_LINKS,
    )
    bucket = f"{N.SPAN_DURATION}_bucket"
    sel = f'service_name="{N.TRACE_SERVICE}",{N.SPAN_SITE}=~"$site"'
    e = N.SPAN_ENTRY
    b.add(
        "timeseries",
        "Phase p95 at the selected sites, slowest $topn entries",
        "95th percentile per entry and phase from the pilots' spans; dots are exemplars: open an example"
        " pilot's trace in Jaeger.",
        "s",
        [
            Target(
                ranked(
                    e,
                    f"histogram_quantile(0.95, sum by ({e}, span_name, le)"
                    f" (rate({bucket}{{{sel}}}[$__rate_interval])))",
                    f"max by ({e}) ({N.RR_PHASE_Z})",
                ),
                f"{{{{{e}}}}} {{{{span_name}}}}",
                exemplar=True,
            )
        ],
        budget=10 * 40,
        question="Which phases are slow at a site, and which pilots show it?",
        w=24,
        drill=(Drill(ENTRY_HEALTH, f"Entry health of ${{__field.labels.{e}}}", "entry", e),),
    )
    return b


BOARDS: tuple[Callable[[], Board], ...] = (
    factory_overview,
    site_health,
    entry_health,
    provisioning,
    accounting,
    pilot_phases,
    stack_health,
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
