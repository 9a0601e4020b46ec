"""Pilot phases from the collector's span metrics, with exemplars to traces.

The phases are the spans with a gwms.phase (tracing.conventions.ALL_PHASES): the pilot tracer's
(init ... cleanup) where GlideinWMS runs it, and the ones the exporter builds from the factory's
own files on every factory (queued, held, validation, condor, cleanup; outputs/pilot_traces.py),
so a stock factory fills every panel. Scripts, user jobs and the roots are not phases.
"""

from __future__ import annotations

from gwms_obs import catalogue

from .. import names as N
from ..board import SPAN_FACTORY_SEL, TOPN, Board, Drill, Target, at_end, ranked
from .common import (
    ACCOUNTING,
    ENTRY_HEALTH,
    PHASE_SEL,
    PHASES,
    legend,
    top,
)


def pilot_phases() -> Board:
    b = Board(
        PHASES,
        "GlideinWMS factory / Pilot phases",
        "Where pilot time goes, phase by phase (queued, validation, condor... from the factory's files; init,"
        " setup, main... from the pilot tracer), from the collector's span metrics; exemplars link to Jaeger traces.",
        "pilot developers and operators",
        variables=("entry", TOPN),
    )
    # The span metrics name the factory by their own label (names.SPAN_FACTORY), chosen by the same variable.
    sel = f'{SPAN_FACTORY_SEL},service_name="{N.TRACE_SERVICE}",{PHASE_SEL},{N.SPAN_ENTRY}=~"$entry"'
    bucket = f"{N.SPAN_DURATION}_bucket"
    e = N.SPAN_ENTRY
    by_e = f"{N.SPAN_FACTORY}, {e}"  # an entry is one factory's (boards/common.py)
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
        budget=40,  # span names: the phases of both sources (tracing.conventions.ALL_PHASES)
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
                    by_e,
                    f"histogram_quantile(0.5, sum by ({by_e}, span_name, le)"
                    f" (rate({bucket}{{{sel}}}[$__rate_interval])))",
                    f"max by ({by_e}) (histogram_quantile(0.5, sum by ({by_e}, span_name, le)"
                    f" (increase({at_end(f'{bucket}{{{sel}}}')}))))",
                ),
                legend(e, "span_name", N.SPAN_FACTORY),
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
                top(f"histogram_quantile(0.99, sum by ({by_e}, span_name, le) (increase({bucket}{{{sel}}}[$__range])))")
            )
        ],
        budget=10,
        question="Which (entry, phase) pairs are the slowest?",
        w=24,
        drill=(Drill(ENTRY_HEALTH, f"Entry health of ${{__data.fields.{e}}}", "entry", e),),
    )
    return b
