"""The red light per site (rules in dashboards/gen/health.py)."""

from __future__ import annotations

from gwms_obs import catalogue

from .. import health
from .. import names as N
from ..board import FACTORY_SEL, SPAN_FACTORY_SEL, TOPN, Board, Drill, Target, at_end, pilot_links, ranked
from ..config import CONFIG, MAD_SCALE
from .common import (
    ACCOUNTING,
    BY_ENTRY,
    ENTRY_HEALTH,
    ENTRY_LINKS,
    FACTORY,
    HOURS,
    LEGEND_ENTRY,
    PHASE_SEL,
    SEL,
    SEL_ENTRY,
    SITE_HEALTH,
    STATES,
    TO_SITE,
    WASTE_SEL,
    hours,
    legend,
    over_range,
    rate,
    top,
)


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
    site_sel = f'{FACTORY_SEL},site=~"$site"'
    # A site is one site whichever factories send it pilots: its status is the worst of them.
    site_status = f"max by (site) ({st}{{{site_sel}}})"
    for title, expr, q in (
        ("Sites failing", f"count({site_status} == 2) or on () vector(0)", "How many sites are failing?"),
        ("Sites degraded", f"count({site_status} == 1) or on () vector(0)", "How many sites are degraded?"),
        ("Sites ok", f"count({site_status} == 0) or on () vector(0)", "How many sites are green?"),
    ):
        b.add("stat", title, "Sites with this status now.", "short", [Target(expr, instant=True)], budget=1,
              question=q, w=8, h=4)  # fmt: skip
    b.add(
        "statetimeline",
        "Status of every site",
        "0 ok, 1 degraded, 2 failing: the worst problem of the site's entries (in every selected factory).",
        "short",
        [Target(site_status, "{{site}}")],
        budget=100,  # every site: 500 entries are 100 sites
        question="Which sites are failing or degraded, and since when?",
        w=24,
        h=16,
        states=STATES,
        drill=(TO_SITE, *pilot_links("site")),
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
            *pilot_links("entry"),
        ),
    )
    CPU = catalogue.CPU_SECONDS
    b.add(
        "bargauge",
        "Hours at stake at sites not green, top $topn (canonical CPU hours of waste)",
        "Waste of pilots completed in the range at each site that is degraded or failing now (has a problem).",
        HOURS,
        [
            Target(
                top(f"{hours(CPU, WASTE_SEL, 'site')} and on (site) {pr}{{{site_sel}}}"),
                "{{site}}",
            )
        ],
        budget=10,
        question="How many core-hours are at stake at the sites that are not green?",
        drill=(TO_SITE, *pilot_links("site")),
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
                    BY_ENTRY,
                    f"{N.RR_JOB_FAILURE_RATIO}{{{SEL_ENTRY}}}",
                    f"max by ({BY_ENTRY}) (max_over_time({at_end(f'{N.RR_JOB_FAILURE_RATIO}{{{SEL_ENTRY}}}')}))",
                ),
                LEGEND_ENTRY,
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
                    BY_ENTRY,
                    f"{N.RR_VALIDATION_RATIO}{{{SEL_ENTRY}}}",
                    f"max by ({BY_ENTRY}) (max_over_time({at_end(f'{N.RR_VALIDATION_RATIO}{{{SEL_ENTRY}}}')}))",
                ),
                LEGEND_ENTRY,
            ),
            Target(
                ranked(
                    BY_ENTRY,
                    f"predict_linear({N.RR_VALIDATION_RATIO}{{{SEL_ENTRY}}}[{CONFIG.timing.trend_range}],"
                    f" {CONFIG.timing.trend_horizon_seconds})",
                    f"max by ({BY_ENTRY}) (max_over_time({at_end(f'{N.RR_VALIDATION_RATIO}{{{SEL_ENTRY}}}')}))",
                ),
                legend("entry", FACTORY) + " a day ahead",
            ),
        ],
        budget=2 * 10,
        question="Is a site getting worse at validating nodes?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "timeseries",
        "Waste share robust z against the fleet, top $topn entries",
        f"(waste share - fleet median) / ({MAD_SCALE} x MAD): above {CONFIG.thresholds.outlier_z} an entry stands out"
        " from the fleet.",
        "short",
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f"{N.RR_WASTE_Z}{{{SEL_ENTRY}}}",
                    f"max by ({BY_ENTRY}) (max_over_time({at_end(f'{N.RR_WASTE_Z}{{{SEL_ENTRY}}}')}))",
                ),
                LEGEND_ENTRY,
            )
        ],
        budget=10,
        question="Which entries waste far more than the rest of the fleet?",
        drill=ENTRY_LINKS,
    )
    OV = catalogue.USER_JOB_OVERUSE_SECONDS
    b.add(
        "timeseries",
        "Jobs over their slot, share per entry, top $topn",
        "Of the entry's user jobs in the last hour, the share that used more memory, or more cores,"
        " than their slot gave them (the resource_hog reason reads it).",
        "percentunit",
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f"{N.RR_JOB_OVERUSE_RATIO}{{{SEL_ENTRY}}}",
                    f"max by ({BY_ENTRY}) (max_over_time({at_end(f'{N.RR_JOB_OVERUSE_RATIO}{{{SEL_ENTRY}}}')}))",
                ),
                legend("entry", "resource", FACTORY),
            )
        ],
        budget=2 * 10,
        question="Which entries' user jobs take more memory or cores than their slots gave them?",
        drill=ENTRY_LINKS,
    )
    b.add(
        "timeseries",
        "Resources taken beyond the slot, top $topn entries",
        "Canonical units used beyond the jobs' slots (memory: peak over the slot, so an upper bound;"
        " cores: CPU time over wall time x cores).",
        OV.rate_grafana_unit,
        [
            Target(
                ranked(
                    BY_ENTRY,
                    f"sum by ({BY_ENTRY}, resource) ({rate(OV, SEL)})",
                    over_range(OV, SEL, BY_ENTRY),
                ),
                legend("entry", "resource", FACTORY),
            )
        ],
        budget=2 * 10,
        question="How much do the hogs take beyond their slots?",
        drill=ENTRY_LINKS,
    )
    bucket = f"{N.SPAN_DURATION}_bucket"
    sel = f'{SPAN_FACTORY_SEL},service_name="{N.TRACE_SERVICE}",{PHASE_SEL},{N.SPAN_SITE}=~"$site"'
    e = N.SPAN_ENTRY
    by_e = f"{N.SPAN_FACTORY}, {e}"  # the span metrics' factory label (names.SPAN_FACTORY)
    b.add(
        "timeseries",
        "Phase p95 at the selected sites, slowest $topn entries",
        "95th percentile per entry and phase from the pilots' spans; dots are exemplars: open an example"
        " pilot's trace in Jaeger.",
        "s",
        [
            Target(
                ranked(
                    by_e,
                    f"histogram_quantile(0.95, sum by ({by_e}, span_name, le)"
                    f" (rate({bucket}{{{sel}}}[$__rate_interval])))",
                    f"max by ({by_e}) ({N.RR_PHASE_Z}{{{SPAN_FACTORY_SEL}}})",
                ),
                legend(e, "span_name", N.SPAN_FACTORY),
                exemplar=True,
            )
        ],
        budget=10 * 40,
        question="Which phases are slow at a site, and which pilots show it?",
        w=24,
        drill=(Drill(ENTRY_HEALTH, f"Entry health of ${{__field.labels.{e}}}", "entry", e),),
    )
    return b
