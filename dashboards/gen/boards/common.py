"""What every board shares: selectors, units, board uids and the drill-down links between them,
and the PromQL building blocks (board.ranked and board.at_end rank over the whole range)."""

from __future__ import annotations

from gwms_obs import catalogue
from gwms_obs.catalogue import Category, Outcome
from gwms_obs.tracing import conventions as C

from .. import health
from .. import names as N
from ..board import FACTORY_SEL, TOPN, Board, Drill, Link, Target, at_end

FACTORY = catalogue.FACTORY_LABEL  # the label Thanos attaches; the boards' factory variable

SEL = f'{FACTORY_SEL},entry=~"$entry",client=~"$client",site=~"$site"'  # POOL-labelled metrics
SEL_ENTRY = f'{FACTORY_SEL},entry=~"$entry",site=~"$site"'  # ENTRY-labelled metrics
# Aggregating across factories (the global Thanos view): sites, frontends, categories, states and
# outcomes are summed across factories, which is what that view is for; an entry is one factory's
# (two factories may configure entries of the same name, each with its own queue, status and
# downtime), and so is each of our own processes (instance and job names repeat, localhost:9090 in
# every factory) and each alert: series per entry, per process or per alert keep the factory label.
# On one factory's Prometheus the label is absent and "by (factory, ...)" is "by (...)".
BY_ENTRY = f"{FACTORY}, entry"
# The pilots' phase spans in the span metrics, of either source (the pilot tracer's, the factory files'):
# user jobs, roots and scripts carry no gwms.phase, and would mix into a phase's percentiles.
PHASE_SEL = f'{N.SPAN_PHASE}=~"{"|".join(C.ALL_PHASES)}"'
WASTE = "|".join(catalogue.WASTE)
WASTE_SEL = f'{SEL},category=~"{WASTE}"'
GOODPUT_SEL = f'{SEL},category="{Category.GOODPUT}"'
VALIDATION_FAILED = f'outcome="{Outcome.VALIDATION_FAILED}"'
NO_MATCH = f'outcome="{Outcome.NO_MATCH}"'
# Queue states that together make "idle" (gwms_entry_glideins' help says which).
IDLE_STATES = 'state=~"wait|pending|stagein|idleother"'
CLIENTS = 20  # most frontend clients, or groups of one frontend, a panel of one line each is budgeted for
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
RUNTIME_SEL = f'{FACTORY_SEL},job="{N.JOB_EXPORTER}"'


def rate(m: catalogue.MetricDef, sel: str = SEL, extra: str = "", suffix: str = "") -> str:
    inner = f"{sel},{extra}" if extra else sel
    return f"rate({m.name}{suffix}{{{inner}}}[$__rate_interval])"


def over_range(m: catalogue.MetricDef, sel: str, by: str, fn: str = "increase") -> str:
    """``sum by (by) (fn(m{sel}[$__range] @ end()))``: one value per ``by`` for the whole range."""
    return f"sum by ({by}) ({fn}({at_end(f'{m.name}{{{sel}}}')}))"


def in_range(m: catalogue.MetricDef, sel: str, by: str) -> str:
    """``sum by (by) (increase(m{sel}[$__range]))``: what the range added, per ``by``."""
    return f"sum by ({by}) (increase({m.name}{{{sel}}}[$__range]))"


def hours(m: catalogue.MetricDef, sel: str, by: str) -> str:
    return f"{in_range(m, sel, by)} / 3600"


def top(expr: str) -> str:
    """The $topn largest series of ``expr``, largest first: a bargauge's bars, a table's rows."""
    return f"sort_desc(topk(${TOPN}, {expr}))"


def or_zero(expr: str) -> str:
    # Counters some processes create only at their first event: 0, not "No data", when healthy.
    return f"({expr}) or on () vector(0)"  # the 0 only when there is no series at all


def legend(*labels: str) -> str:
    """A legend naming the series by ``labels``: ``{{a}} {{b}}``; an absent label shows as nothing."""
    return " ".join(f"{{{{{label}}}}}" for label in labels)


# Per-entry legends name the factory after the entry: nothing (a trailing space) on one factory's Prometheus.
LEGEND_ENTRY = legend("entry", FACTORY)


def sel(name: str, matchers: str = "") -> str:
    """``name{factory=~"$factory"[,matchers]}``: a selector of a series with no other variable to match."""
    return f"{name}{{{FACTORY_SEL},{matchers}}}" if matchers else f"{name}{{{FACTORY_SEL}}}"


def add_by_state(
    b: Board,
    title: str,
    description: str,
    m: catalogue.MetricDef,
    by: str,
    sel: str,
    states: tuple[str, ...],
    question: str,
    drill: tuple[Link, ...] = (),
) -> None:
    """A timeseries of ``m`` in ``states``, a line per ``by`` (client or group) and state."""
    expr = f'sum by ({by}, state) ({m.name}{{{sel},state=~"{"|".join(states)}"}})'
    b.add(
        "timeseries",
        title,
        description,
        m.grafana_unit,
        [Target(expr, legend(by, "state"))],
        budget=len(states) * CLIENTS,
        question=question,
        drill=drill,
    )
