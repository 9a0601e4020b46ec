"""Site health: detection beyond fixed thresholds, and a red light per site.

Each *problem* is a recording rule that yields the entries that have it,
recorded as ``gwms:site_problem{entry, site, reason}`` with the problem's
status as value (1 degraded, 2 failing). ``gwms:site_status{site}`` is the
worst problem of the site's entries, 0 for every other site (every site has
entries, and every entry has a downtime flag). The reasons are a fixed,
documented set (:class:`Reason`, docs/runbooks.md#site-health). Detection:

* **black hole**: most user jobs of the entry fail for reasons not the user's
  (misconfiguration badput), in volume;
* **resource hogs**: a share of the entry's user jobs used more memory or
  cores than their slot gave them (accounting/overuse.py), in volume;
* **trends**: the validation-failure share heading over half within a day
  (``predict_linear``); the goodput share fallen a quarter below the entry's
  own share a week before;
* **outliers against the fleet**: robust z-scores (median and MAD across
  entries) of the waste share and of each phase's p95 duration (span metrics);
* the fixed-threshold conditions the alerts already use (validation failures,
  badput, held pilots), read from the same fields of config.CONFIG, so the
  light and the alerts agree.

Thresholds, windows and selectors come from config.CONFIG, as in rules.py (the
mutation test in tests/test_rules.py changes each rendered threshold and
expects the promtool tests to fail).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gwms_obs import catalogue
from gwms_obs.catalogue import Category, Outcome
from gwms_obs.tracing import conventions as C

from . import names as N
from .config import CONFIG, MAD_SCALE, Config
from .rules import Alert, ce_unreachable, mostly_held, queue_slow, submit_failing


class Status(enum.IntEnum):
    OK = 0
    DEGRADED = 1
    FAILING = 2


class Reason(enum.StrEnum):
    """Why a site is not green: the ``reason`` label of gwms:site_problem."""

    BLACK_HOLE = "black_hole"
    VALIDATION_FAILING = "validation_failing"
    VALIDATION_FAILURES = "validation_failures"
    VALIDATION_WORSENING = "validation_worsening"
    BADPUT_HIGH = "badput_high"
    GOODPUT_FALLING = "goodput_falling"
    WASTE_OUTLIER = "waste_outlier"
    PHASE_SLOW = "phase_slow"
    PILOTS_HELD = "pilots_held"
    RESOURCE_HOG = "resource_hog"
    HELD = "held"
    CE_UNREACHABLE = "ce_unreachable"
    QUEUE_SLOW = "queue_slow"
    SUBMIT_FAILING = "submit_failing"


@dataclass(frozen=True, kw_only=True)
class Problem:
    reason: Reason
    status: Status
    expr: str  # the entries (labels entry, site) that have it
    meaning: str  # for docs and the dashboard


def problems(c: Config = CONFIG) -> list[Problem]:
    t, th, s = c.timing, c.thresholds, c.selectors
    w = t.window
    P, U = catalogue.PILOTS.name, catalogue.USER_JOBS.name
    vf = f'sum by ({N.ENTRY_KEY}) (increase({P}{{outcome="{Outcome.VALIDATION_FAILED}"}}[{w}]))'
    failed = f'sum by ({N.ENTRY_KEY}) (increase({U}{{category="{Category.MISCONFIGURATION_BADPUT}"}}[{w}]))'
    held = f"sum by ({N.ENTRY_KEY}) ({catalogue.ENTRY_GLIDEINS.name}{{{s.held}}})"
    # Evidence counted over both resources: a hog short of hog_jobs on each may be well over in all.
    hogs = f"sum by ({N.ENTRY_KEY}) (increase({catalogue.USER_JOBS_OVERUSING.name}[{w}]))"
    # span labels -> ours (the factory too: a problem row is an entry's, as every other problem's)
    phase = N.RR_PHASE_Z
    for ours, span in ((catalogue.FACTORY_LABEL, N.SPAN_FACTORY), ("entry", N.SPAN_ENTRY), ("site", N.SPAN_SITE)):
        phase = f'label_replace({phase}, "{ours}", "$1", "{span}", "(.*)")'
    z = th.outlier_z
    return [
        Problem(
            reason=Reason.BLACK_HOLE,
            status=Status.FAILING,
            expr=f"{N.RR_JOB_FAILURE_RATIO} > {th.black_hole_share} and {failed} >= {th.black_hole_failed_jobs}",
            meaning=f"more than {th.black_hole_share:.0%} of the user jobs fail for reasons not the user's"
            f" (misconfiguration badput), at least {th.black_hole_failed_jobs} in the window",
        ),
        Problem(
            reason=Reason.VALIDATION_FAILING,
            status=Status.FAILING,
            expr=f"{N.RR_VALIDATION_RATIO} > {th.validation_failing_share} and {vf} >= {th.validation_failed_pilots}",
            meaning=f"more than {th.validation_failing_share:.0%} of the pilots fail worker-node validation"
            f" (at least {th.validation_failed_pilots} in the window)",
        ),
        Problem(
            reason=Reason.VALIDATION_FAILURES,
            status=Status.DEGRADED,
            expr=f"{N.RR_VALIDATION_RATIO} > {th.validation_failure_share} and {vf} >= {th.validation_failed_pilots}",
            meaning="GwmsSiteValidationFailuresRising's condition: more than"
            f" {th.validation_failure_share:.0%} of the pilots fail validation",
        ),
        Problem(
            reason=Reason.VALIDATION_WORSENING,
            status=Status.DEGRADED,
            expr=f"predict_linear({N.RR_VALIDATION_RATIO}[{t.trend_range}], {t.trend_horizon_seconds})"
            f" > {th.validation_failing_share} and {_rise_z(t.trend_range)} > {th.validation_rise_z}",
            meaning="the validation-failure share, on its recent trend, passes validation_failing's share within"
            " the horizon, and the window's share is significantly above the window a trend range before"
            f" (two-proportion z > {th.validation_rise_z}: a steady but noisy share extrapolates anywhere)",
        ),
        Problem(
            reason=Reason.BADPUT_HIGH,
            status=Status.DEGRADED,
            expr=f"{N.RR_BADPUT_RATIO} > {th.badput_share} and {N.RR_JOB_SECONDS} > {th.badput_job_seconds}",
            meaning=f"GwmsEntryBadputHigh's condition: more than {th.badput_share:.0%} of the user-job CPU time"
            " is badput",
        ),
        Problem(
            reason=Reason.GOODPUT_FALLING,
            status=Status.DEGRADED,
            expr=f"({N.RR_GOODPUT_RATIO} offset {t.baseline_offset}) / {N.RR_GOODPUT_RATIO}"
            f" > {th.goodput_fall_ratio}"
            f" and ({N.RR_GOODPUT_RATIO} offset {t.baseline_offset}) > {th.goodput_baseline_share}",
            meaning=f"the entry's goodput share {t.baseline_offset} before was over {th.goodput_fall_ratio} times"
            f" today's, and over {th.goodput_baseline_share:.0%}",
        ),
        Problem(
            reason=Reason.WASTE_OUTLIER,
            status=Status.DEGRADED,
            expr=f"{N.RR_WASTE_Z} > {z} and {N.RR_WASTE_RATIO} > {th.waste_share}",
            meaning=f"the waste share is a robust outlier against the fleet (z > {z}) and over {th.waste_share:.0%}",
        ),
        Problem(
            reason=Reason.PHASE_SLOW,
            status=Status.DEGRADED,
            expr=f"max by ({N.ENTRY_KEY}) ({phase} > {z})",
            meaning="a pilot phase's p95 duration is a robust outlier against the same phase at its factory's other"
            " entries"
            f" (z > {z}); the phases whose length is overhead ({', '.join(C.OVERHEAD_PHASES)}), from the pilot"
            " tracer or from the factory's own files",
        ),
        Problem(
            reason=Reason.PILOTS_HELD,
            status=Status.DEGRADED,
            expr=f"{held} >= {th.held_glideins}",
            meaning=f"GwmsPilotsHeld's condition without its wait: {th.held_glideins} or more glideins held in"
            " the factory queue",
        ),
        Problem(
            reason=Reason.RESOURCE_HOG,
            status=Status.DEGRADED,
            expr=f"{N.RR_JOB_OVERUSE_RATIO} > {th.hog_share} and on ({N.ENTRY_KEY}) {hogs} >= {th.hog_jobs}",
            meaning=f"more than {th.hog_share:.0%} of the user jobs used more memory, or more cores, than their"
            f" slot gave them (at least {th.hog_jobs} such jobs in the window)",
        ),
        Problem(
            reason=Reason.HELD,
            status=Status.FAILING,
            expr=mostly_held(c),
            meaning=f"GwmsEntryMostlyHeld's condition without its wait: more than {th.held_share:.0%} of the"
            f" entry's glideins in the factory queue held (at least {th.held_mostly_glideins}); the alert names"
            " the class most held",
        ),
        Problem(
            reason=Reason.CE_UNREACHABLE,
            status=Status.FAILING,
            expr=ce_unreachable(c),
            meaning="GwmsEntryCeUnreachable's condition without its wait: HTCondor-G has seen the entry's CE down"
            f" (026, no 025 since) for over {th.ce_unreachable_seconds} s",
        ),
        Problem(
            reason=Reason.QUEUE_SLOW,
            status=Status.DEGRADED,
            expr=queue_slow(c),
            meaning="GwmsEntryQueueSlow's condition without its wait: the window's median time from submission"
            f" to execution over {th.queue_slow_ratio:g} times the entry's own median of the last"
            f" {t.queue_baseline_range}, over {th.queue_slow_seconds} s, from at least"
            f" {th.queue_slow_pilots} pilots",
        ),
        Problem(
            reason=Reason.SUBMIT_FAILING,
            status=Status.FAILING,
            expr=submit_failing(c),
            meaning="GwmsEntrySubmitFailing's condition without its wait: condor_submit failed at least"
            f" {th.submit_failures} times in the last {t.window} at the entry (the factory's own log)",
        ),
    ]


def _rise_z(offset: str) -> str:
    """Two-proportion z of the validation-failure share: this window against the window ``offset``
    before, from the recorded counts (pooled variance). Few failures never make a large z."""
    vf, n = N.RR_VALIDATION_FAILURES, N.RR_PILOTS_ENDED
    vf0, n0 = f"({vf} offset {offset})", f"({n} offset {offset})"
    pooled = f"(({vf} + {vf0}) / ({n} + {n0}))"
    return f"(({vf} / {n} - {vf0} / {n0}) / sqrt({pooled} * (1 - {pooled}) * (1 / {n} + 1 / {n0})))"


def _ratio(num: str, den: str) -> str:
    return f"{num} / {den}"


def recording_rules(c: Config = CONFIG) -> list[dict[str, str]]:
    """Appended to the gwms-recording group after rules.recording_rules (rules in a group run in order)."""
    t, th = c.timing, c.thresholds
    w, b = t.window, t.baseline_window
    P, U, cpu = catalogue.PILOTS.name, catalogue.USER_JOBS.name, catalogue.CPU_SECONDS.name
    waste = "|".join(catalogue.WASTE)
    fac = catalogue.FACTORY_LABEL

    def by_entry(sel: str, metric: str, window: str) -> str:
        return f"sum by ({N.ENTRY_KEY}) (increase({metric}{sel}[{window}]))"

    bucket = f"{N.SPAN_DURATION}_bucket{{{c.selectors.pilot_spans},{c.selectors.overhead_phases}}}"
    e = N.SPAN_ENTRY
    # A phase's fleet is its factory's entries, as the waste's: the span metrics' factory label
    # (names.SPAN_FACTORY) where several factories' collectors write to one Prometheus.
    sf = N.SPAN_FACTORY
    failed = by_entry(f'{{category="{Category.MISCONFIGURATION_BADPUT}"}}', U, w)
    all_jobs = by_entry("", U, w)
    out = [
        {
            # 0, not absent, for an entry whose jobs never failed: its line is drawn.
            "record": N.RR_JOB_FAILURE_RATIO,
            "expr": _ratio(f"({failed} or {all_jobs} * 0)", all_jobs),
        },
        {"record": N.RR_VALIDATION_FAILURES, "expr": by_entry(f'{{outcome="{Outcome.VALIDATION_FAILED}"}}', P, w)},
        {"record": N.RR_PILOTS_ENDED, "expr": by_entry("", P, w)},
        {"record": N.RR_VALIDATION_RATIO, "expr": _ratio(N.RR_VALIDATION_FAILURES, N.RR_PILOTS_ENDED)},
        {
            # Per resource: of all the entry's jobs, the share that overused it.
            "record": N.RR_JOB_OVERUSE_RATIO,
            "expr": f"sum by ({N.ENTRY_KEY}, resource) (increase({catalogue.USER_JOBS_OVERUSING.name}[{w}]))"
            f" / on ({N.ENTRY_KEY}) group_left {by_entry('', U, w)}",
        },
        {
            "record": N.RR_GOODPUT_RATIO,
            "expr": _ratio(by_entry(f'{{category="{Category.GOODPUT}"}}', cpu, b), by_entry("", cpu, b)),
        },
        {
            "record": N.RR_WASTE_RATIO,
            "expr": _ratio(by_entry(f'{{category=~"{waste}"}}', cpu, w), by_entry("", cpu, w)),
        },
        # The fleet is the factory's entries (as on each factory's own Prometheus, whose rules the
        # global view's Thanos sees): one median and MAD per factory label, none when it is absent.
        {"record": N.RR_WASTE_MEDIAN, "expr": f"quantile by ({fac}) (0.5, {N.RR_WASTE_RATIO})"},
        {
            "record": N.RR_WASTE_MAD,
            "expr": f"quantile by ({fac}) (0.5, abs({N.RR_WASTE_RATIO} - on ({fac}) group_left {N.RR_WASTE_MEDIAN}))",
        },
        {
            "record": N.RR_WASTE_Z,
            "expr": f"({N.RR_WASTE_RATIO} - on ({fac}) group_left {N.RR_WASTE_MEDIAN}) / {MAD_SCALE}"
            f" / on ({fac}) group_left clamp_min({N.RR_WASTE_MAD}, {th.mad_floor_share})",
        },
        {
            "record": N.RR_PHASE_P95,
            "expr": f"histogram_quantile(0.95, sum by ({sf}, {e}, {N.SPAN_SITE}, span_name, le) (rate({bucket}[{w}])))",
        },
        {"record": N.RR_PHASE_MEDIAN, "expr": f"quantile by ({sf}, span_name) (0.5, {N.RR_PHASE_P95})"},
        {
            "record": N.RR_PHASE_MAD,
            "expr": f"quantile by ({sf}, span_name) (0.5, abs({N.RR_PHASE_P95}"
            f" - on ({sf}, span_name) group_left {N.RR_PHASE_MEDIAN}))",
        },
        {
            "record": N.RR_PHASE_Z,
            "expr": f"({N.RR_PHASE_P95} - on ({sf}, span_name) group_left {N.RR_PHASE_MEDIAN})"
            f" / on ({sf}, span_name) group_left clamp_min({MAD_SCALE} * {N.RR_PHASE_MAD}, {th.mad_floor_seconds})",
        },
    ]
    for p in problems(c):
        out.append(
            {
                "record": N.RR_SITE_PROBLEM,
                "expr": f'label_replace(max by ({N.ENTRY_KEY}) ({p.expr}) * 0 + {int(p.status)}, "reason",'
                f' "{p.reason}", "", "")',
            }
        )
    out.append(
        {
            "record": N.RR_SITE_STATUS,
            # Every site, 0 unless one of its entries has a problem; per factory (the boards take the
            # worst of the factories chosen).
            "expr": f"max by ({fac}, site) ({N.RR_SITE_PROBLEM})"
            f" or on ({fac}, site) max by ({fac}, site) ({catalogue.ENTRY_DOWNTIME.name}) * 0",
        }
    )
    return out


FAILING, OK = int(Status.FAILING), int(Status.OK)
FAILING_REASONS = (
    f'{{{{ range printf "{N.RR_SITE_PROBLEM}{{site=%q}} == {FAILING}" $labels.site | query }}}}'
    "{{ .Labels.reason }} at {{ .Labels.entry }}; {{ end }}"
)
NOT_GREEN = f'{{{{ range query "{N.RR_SITE_STATUS} > {OK}" }}}}' + "{{ .Labels.site }}={{ .Value }} {{ end }}"
SHIFTERS = "shifters"  # the audience of the daily summary (the alertmanager role routes it)


def alerts(c: Config = CONFIG) -> list[Alert]:
    t = c.timing
    return [
        Alert(
            name="GwmsSiteFailing",
            expr=f"{N.RR_SITE_STATUS} == {FAILING}",
            for_=t.for_site,
            severity="critical",
            audience="site",
            summary="Site {{ $labels.site }} is failing",
            description=f"Site {{{{ $labels.site }}}} is failing: {FAILING_REASONS}see the Site health dashboard.",
        ),
        Alert(
            name="GwmsSitesNotGreen",
            expr=f"count({N.RR_SITE_STATUS} > {OK}) > 0",
            for_="0s",
            severity="info",
            audience=SHIFTERS,
            summary="{{ $value }} sites are not green",
            description=f"{{{{ $value }}}} sites degraded ({int(Status.DEGRADED)}) or failing ({FAILING}):"
            f" {NOT_GREEN}- the shifters' daily summary.",
        ),
    ]
