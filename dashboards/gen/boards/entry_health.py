"""Per entry and site: queue, validation, unmatched pilots, time to start, efficiency."""

from __future__ import annotations

from gwms_obs import catalogue
from gwms_obs.catalogue import Category

from .. import names as N
from ..board import TOPN, Board, Drill, Target, at_end, pilot_links, ranked
from ..config import CONFIG
from .common import (
    BY_ENTRY,
    ENTRY_HEALTH,
    ENTRY_LINKS,
    FACTORY,
    GOODPUT_SEL,
    LEGEND_ENTRY,
    NO_MATCH,
    PROVISIONING,
    SEL,
    SEL_ENTRY,
    TO_ENTRY,
    TO_PHASES,
    TO_SITE,
    VALIDATION_FAILED,
    in_range,
    legend,
    over_range,
    rate,
    top,
)


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
                    BY_ENTRY,
                    f"sum by ({BY_ENTRY}, state) ({G}{{{SEL}}})",
                    over_range(catalogue.ENTRY_GLIDEINS, SEL, BY_ENTRY, "avg_over_time"),
                ),
                legend("entry", "state", FACTORY),
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
                    BY_ENTRY,
                    f'sum by ({BY_ENTRY}) ({G}{{{SEL},state="held"}})',
                    over_range(catalogue.ENTRY_GLIDEINS, f'{SEL},state="held"', BY_ENTRY, "max_over_time"),
                ),
                LEGEND_ENTRY,
            )
        ],
        budget=10,
        question="Which entries have held glideins?",
        drill=ENTRY_LINKS,
    )
    HG, H = catalogue.HELD_GLIDEINS, catalogue.HOLDS
    b.add(
        "timeseries",
        "Held now by reason class, top $topn entries",
        "Glideins held now (the schedd's event log), by the class of their newest hold, the $topn entries with"
        " the most held over the range. The reason's text is in the exporter's log ('hold at entry ...').",
        HG.grafana_unit,
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f"sum by ({BY_ENTRY}, class) ({HG.name}{{{SEL}}})",
                    over_range(HG, SEL, BY_ENTRY, "max_over_time"),
                ),
                legend("entry", "class", FACTORY),
            )
        ],
        budget=10 * len(catalogue.HoldClass),
        question="Why are an entry's glideins held now?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "table",
        "Holds by reason class, top $topn entries and classes",
        "Holds (012 events) over the range per entry and reason class, glideins still queued included: which"
        " codes recur where (GlideinWMS removes every hold not listed in the entry's RecoverableExitcodes).",
        H.grafana_unit,
        [Target(top(in_range(H, SEL, f"{BY_ENTRY}, site, class")))],
        budget=10,
        question="Which hold reasons recur, and where?",
        drill=(
            Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"),
            *pilot_links("entry"),
        ),
    )
    HS = catalogue.HELD_SECONDS
    b.add(
        "timeseries",
        "Glideins held on average, top $topn entries",
        "Seconds held per second (glideins held on average), counted as each hold ends, the $topn entries"
        " with the most time held over the range.",
        HS.rate_grafana_unit,
        [
            Target(
                ranked(BY_ENTRY, f"sum by ({BY_ENTRY}) ({rate(HS)})", over_range(HS, SEL, BY_ENTRY)),
                LEGEND_ENTRY,
            )
        ],
        budget=10,
        question="Which entries lose the most glidein time to holds?",
        drill=ENTRY_LINKS,
    )
    CE, SINCE = catalogue.ENTRY_CE_DOWN, catalogue.ENTRY_CE_DOWN_SINCE
    b.add(
        "timeseries",
        "CE unreachable, top $topn entries",
        "1 while HTCondor-G finds the entry's CE down (026 Detected Down Grid Resource, not yet 025 back up),"
        " the $topn entries down longest over the range.",
        CE.grafana_unit,
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f"max by ({BY_ENTRY}) ({CE.name}{{{SEL_ENTRY}}})",
                    over_range(CE, SEL_ENTRY, BY_ENTRY, "avg_over_time"),
                ),
                LEGEND_ENTRY,
            )
        ],
        budget=10,
        question="Which entries' CEs are unreachable, and since when?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "table",
        "CEs down now, longest first, top $topn",
        "How long each entry's CE has been down (since the first 026 of this outage); GwmsEntryCeUnreachable"
        " mails the site after 30 minutes. Empty while every CE is up.",
        "s",
        [Target(top(f"time() - max by ({BY_ENTRY}, site) ({SINCE.name}{{{SEL_ENTRY}}})"))],
        budget=10,
        question="How long has each unreachable CE been down?",
        drill=(Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"), *pilot_links("entry")),
    )
    SUB, REM, FAIL = catalogue.GLIDEINS_SUBMITTED, catalogue.GLIDEINS_REMOVED, catalogue.SUBMIT_FAILURES
    ACC = catalogue.GLIDEIN_SUBMIT_EVENTS
    submitted = over_range(SUB, SEL, BY_ENTRY)  # one ranking: the three lines of an entry come together
    b.add(
        "timeseries",
        "Submitted, running and removed glideins, top $topn entries",
        "Glideins per second the factory submitted (its entry log's 'Submitted N glideins') and set out to"
        " remove (unrecoverable held, stale, excess: its 'Removing' and sanitize lines), beside the glideins"
        " running in the factory queue (right axis), for the $topn entries that submitted the most over the"
        " range; beside them, the glideins the schedd accepted (its 000 events): the two lines part when"
        " the entry log and the event log disagree. Submissions with nothing running after them: the"
        " glideins die or wait at the CE.",
        SUB.rate_grafana_unit,
        [
            Target(
                ranked(BY_ENTRY, f"sum by ({BY_ENTRY}) ({rate(SUB)})", submitted),
                legend("entry", FACTORY) + " submitted",
            ),
            Target(
                ranked(BY_ENTRY, f"sum by ({BY_ENTRY}) ({rate(ACC)})", submitted),
                legend("entry", FACTORY) + " accepted by the schedd",
            ),
            Target(
                ranked(BY_ENTRY, f"sum by ({BY_ENTRY}) ({rate(REM, SEL_ENTRY)})", submitted),
                legend("entry", FACTORY) + " removed",
            ),
            Target(
                ranked(BY_ENTRY, f'sum by ({BY_ENTRY}) ({G}{{{SEL},state="running"}})', submitted),
                legend("entry", FACTORY) + " running",
                unit=catalogue.ENTRY_GLIDEINS.grafana_unit,
            ),
        ],
        budget=10 * 4,
        question="Are submissions going out, and is the factory removing what it submitted?",
        drill=ENTRY_LINKS,
    )
    removed = f"increase({REM.name}{{{SEL_ENTRY}}}[$__range])"
    b.add(
        "table",
        "Glideins removed by the factory by reason, top $topn entries and reasons",
        "Glideins the factory set out to remove over the range, per entry and reason (its entry log):"
        " unrecoverable_held and held, stale_idle and stale_running (older than the entry's stale age),"
        " excess_idle and excess_running (the frontend asked for fewer).",
        REM.grafana_unit,
        [Target(top(f"sum by ({BY_ENTRY}, site, reason) ({removed})"))],
        budget=10,
        question="Why does the factory remove an entry's glideins?",
        drill=(Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"), *pilot_links("entry")),
    )
    failed = over_range(FAIL, SEL_ENTRY, BY_ENTRY)
    b.add(
        "timeseries",
        "condor_submit failures, top $topn entries",
        "condor_submit calls that failed per second at the entry (the factory's ERROR 'condor_submit failed'),"
        " the $topn entries with the most over the range; GwmsEntrySubmitFailing mails the site at 3 in an"
        " hour. The failure's text is in the exporter's log ('condor_submit failed at entry ...').",
        FAIL.rate_grafana_unit,
        [
            Target(
                ranked(BY_ENTRY, f"sum by ({BY_ENTRY}) ({rate(FAIL, SEL_ENTRY)})", failed),
                LEGEND_ENTRY,
            )
        ],
        budget=10,
        question="Where does condor_submit fail?",
        drill=ENTRY_LINKS,
    )
    why_not_running(b)
    b.add(
        "timeseries",
        "Validation failures by site, top $topn",
        "Pilots per second that failed worker-node validation, per site.",
        P.rate_grafana_unit,
        [
            Target(
                ranked(
                    "site",
                    f"sum by (site) ({rate(P, extra=VALIDATION_FAILED)})",
                    over_range(P, f"{SEL},{VALIDATION_FAILED}", "site"),
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
                    BY_ENTRY,
                    f"sum by ({BY_ENTRY}) ({rate(P, extra=VALIDATION_FAILED)}) / sum by ({BY_ENTRY}) ({rate(P)})",
                    over_range(P, f"{SEL},{VALIDATION_FAILED}", BY_ENTRY),
                ),
                LEGEND_ENTRY,
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
        [Target(top(in_range(P, f"{SEL},{NO_MATCH}", f"{BY_ENTRY}, site, client")))],
        budget=10,
        question="Where do pilots start but find no job, and for which frontend?",
        drill=(
            Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"),
            Drill(PROVISIONING, "Provisioning of ${__data.fields.entry}", "entry"),
            *pilot_links("entry", "client"),
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
                    BY_ENTRY,
                    f"histogram_quantile(0.9, sum by ({BY_ENTRY}, le)"
                    f" ({rate(catalogue.PILOT_VALIDATION, suffix='_bucket')}))",
                    f"histogram_quantile(0.9, sum by ({BY_ENTRY}, le)"
                    f" (increase({at_end(f'{catalogue.PILOT_VALIDATION.name}_bucket{{{SEL}}}')})))",
                ),
                LEGEND_ENTRY,
                exemplar=True,
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
                    BY_ENTRY,
                    f"histogram_quantile(0.5, sum by ({BY_ENTRY}, le)"
                    f" ({rate(catalogue.PILOT_LIFETIME, suffix='_bucket')}))",
                    f"histogram_quantile(0.5, sum by ({BY_ENTRY}, le)"
                    f" (increase({at_end(f'{catalogue.PILOT_LIFETIME.name}_bucket{{{SEL}}}')})))",
                    "bottomk",
                ),
                LEGEND_ENTRY,
                exemplar=True,
            )
        ],
        budget=10,
        question="Where are pilots killed early?",
        drill=ENTRY_LINKS,
    )
    Q = catalogue.PILOT_QUEUE_TIME
    b.add(
        "timeseries",
        "Time in queue p90, slowest $topn entries",
        "90th percentile of the time pilots waited from the factory's submit to their first execute (the"
        " schedd's event log), the $topn slowest entries over the range; dots are exemplars: a pilot's trace.",
        Q.grafana_unit,
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f"histogram_quantile(0.9, sum by ({BY_ENTRY}, le) ({rate(Q, suffix='_bucket')}))",
                    f"histogram_quantile(0.9, sum by ({BY_ENTRY}, le)"
                    f" (increase({at_end(f'{Q.name}_bucket{{{SEL}}}')})))",
                ),
                LEGEND_ENTRY,
                exemplar=True,
            )
        ],
        budget=10,
        question="Where do pilots wait longest before they run?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "timeseries",
        "Time in queue p50, slowest $topn entries",
        "Median time pilots waited from the factory's submit to their first execute, the $topn slowest entries"
        " over the range; GwmsEntryQueueSlow compares an entry's with its own last week.",
        Q.grafana_unit,
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f"histogram_quantile(0.5, sum by ({BY_ENTRY}, le) ({rate(Q, suffix='_bucket')}))",
                    f"histogram_quantile(0.5, sum by ({BY_ENTRY}, le)"
                    f" (increase({at_end(f'{Q.name}_bucket{{{SEL}}}')})))",
                ),
                LEGEND_ENTRY,
                exemplar=True,
            )
        ],
        budget=10,
        question="How long does a typical pilot wait in each entry's queue?",
        drill=ENTRY_LINKS,
    )
    GQ = catalogue.PILOT_GRID_QUEUE_TIME
    b.add(
        "timeseries",
        "Time in the CE's queue p90, slowest $topn entries",
        "90th percentile of the time from the CE accepting the job (grid submit) to its first execute: the"
        " site's batch queue alone, without the factory's own wait; the $topn slowest entries over the range.",
        GQ.grafana_unit,
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f"histogram_quantile(0.9, sum by ({BY_ENTRY}, le) ({rate(GQ, suffix='_bucket')}))",
                    f"histogram_quantile(0.9, sum by ({BY_ENTRY}, le)"
                    f" (increase({at_end(f'{GQ.name}_bucket{{{SEL}}}')})))",
                ),
                LEGEND_ENTRY,
                exemplar=True,
            )
        ],
        budget=10,
        question="Is the wait at the site's batch system or before the CE accepts the job?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "heatmap",
        "Time in queue, every selected entry",
        "Pilots that started, by their time in the queue (submit to first execute); dots are exemplars:"
        " a pilot of that bucket, linked to its trace.",
        Q.grafana_unit,
        [Target(f"sum by (le) (increase({Q.name}_bucket{{{SEL}}}[$__rate_interval]))", "{{le}}", exemplar=True)],
        budget=len(Q.buckets) + 1,
        question="How long do pilots wait in the queue, and which pilot is an example?",
    )
    b.add(
        "timeseries",
        "Efficiency (goodput share), least efficient $topn entries",
        "Goodput / all accounted CPU time, the $topn entries with the lowest share over the range.",
        "percentunit",
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f'sum by ({BY_ENTRY}) ({N.RR_CPU_RATE}{{{SEL},category="{Category.GOODPUT}"}})'
                    f" / sum by ({BY_ENTRY}) ({N.RR_CPU_RATE}{{{SEL}}})",
                    over_range(catalogue.CPU_SECONDS, GOODPUT_SEL, BY_ENTRY)
                    + " / "
                    + over_range(catalogue.CPU_SECONDS, SEL, BY_ENTRY),
                    "bottomk",
                ),
                LEGEND_ENTRY,
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
        [Target(top(f"time() - max by ({BY_ENTRY}, site) ({catalogue.PILOT_LAST_COMPLETED.name}{{{SEL}}})"))],
        budget=10,
        question="Which entries have stopped returning pilots?",
        drill=(Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"), *pilot_links("entry")),
    )
    b.add(
        "timeseries",
        "Frontend information age, oldest $topn entries",
        "Age of the frontend's information about the entry.",
        catalogue.ENTRY_INFO_AGE.grafana_unit,
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f"max by ({BY_ENTRY}) ({catalogue.ENTRY_INFO_AGE.name}{{{SEL}}})",
                    over_range(catalogue.ENTRY_INFO_AGE, SEL, BY_ENTRY, "max_over_time"),
                ),
                LEGEND_ENTRY,
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
                    BY_ENTRY,
                    f"time() - max by ({BY_ENTRY}) ({catalogue.ENTRY_UPDATED.name}{{{SEL_ENTRY}}})",
                    f"-max by ({BY_ENTRY}) ({catalogue.ENTRY_UPDATED.name}{{{SEL_ENTRY}}} @ end())",
                ),
                LEGEND_ENTRY,
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
                    BY_ENTRY,
                    f"max by ({BY_ENTRY}) ({catalogue.ENTRY_DOWNTIME.name}{{{SEL_ENTRY}}})",
                    over_range(catalogue.ENTRY_DOWNTIME, SEL_ENTRY, BY_ENTRY, "avg_over_time"),
                ),
                LEGEND_ENTRY,
            )
        ],
        budget=10,
        question="Which entries are in downtime?",
        drill=ENTRY_LINKS,
    )
    return b


def why_not_running(b: Board) -> None:
    """The factory-wide table: a row per entry with a reason its glideins are not running (issue 33)."""
    HG, CE, Q = catalogue.HELD_GLIDEINS, catalogue.ENTRY_CE_DOWN, catalogue.PILOT_QUEUE_TIME
    FAIL, REM = catalogue.SUBMIT_FAILURES, catalogue.GLIDEINS_REMOVED
    ratio = CONFIG.thresholds.queue_slow_ratio
    by = f"{BY_ENTRY}, site"
    zero = f"0 * max by ({by}) ({catalogue.ENTRY_GLIDEINS.name}{{{SEL}}})"  # every entry the factory lists
    held = f"sum by ({by}) ({HG.name}{{{SEL}}})"
    down = f"max by ({by}) ({CE.name}{{{SEL_ENTRY}}})"
    slow = f"{N.RR_QUEUE_P50}{{{SEL_ENTRY}}} / {N.RR_QUEUE_BASELINE}{{{SEL_ENTRY}}}"
    failed, removed = in_range(FAIL, SEL_ENTRY, by), in_range(REM, SEL_ENTRY, by)
    # One ranking, so every column shows the same entries: glideins held, refused and removed, a CE
    # down (as 100), a queue over GwmsEntryQueueSlow's ratio (the ratio). With fewer troubled entries than
    # $topn, healthy ones fill the table with their zeros: the table is never empty while entries report.
    score = (
        f"(({held} or {zero}) + 100 * ({down} or {zero}) + ({failed} or {zero}) + ({removed} or {zero})"
        f" + (({slow}) >= {ratio:g} or {zero}))"
    )
    keep = f" and on ({by}) topk(${TOPN}, {score})"  # a column with nothing to count shows 0, not a gap
    b.add(
        "table",
        "Why are glideins not running? Top $topn entries",
        "A row per entry with glideins held now (and the class most held, by each glidein's newest hold), its"
        " CE down (1: the gridmanager's 026, no 025 since), the time in queue's p90 over the range and the last"
        f" hour's median over the entry's own weekly median (GwmsEntryQueueSlow at {ratio:g}), condor_submit"
        " failures and glideins the factory removed over the range; the $topn entries with the most of these.",
        HG.grafana_unit,
        [
            Target(f"({held} or {zero}){keep}", "held now", unit=HG.grafana_unit),
            Target(
                f"topk by ({by}) (1, sum by ({by}, class) ({HG.name}{{{SEL}}})){keep}",
                "held of the newest class",
                unit=HG.grafana_unit,
            ),
            Target(f"({down} or {zero}){keep}", "CE down", unit=CE.grafana_unit),
            Target(
                f"histogram_quantile(0.9, sum by ({by}, le) (increase({Q.name}_bucket{{{SEL}}}[$__range]))){keep}",
                "queue p90",
                unit=Q.grafana_unit,
            ),
            # NaN where no pilot started in the window, as the p90's histogram_quantile: every row has a cell
            Target(f"(({slow}) or ({zero}) / 0){keep}", "queue median / its week's", unit="none"),
            Target(f"({failed} or {zero}){keep}", "submit failures", unit=FAIL.grafana_unit),
            Target(f"({removed} or {zero}){keep}", "removed", unit=REM.grafana_unit),
        ],
        budget=7 * 10,
        question="Why are an entry's glideins not running: held, CE down, a slow queue, refused or removed?",
        w=24,
        drill=(Drill(ENTRY_HEALTH, "Entry health of ${__data.fields.entry}", "entry"), *pilot_links("entry")),
        merge=True,
    )
