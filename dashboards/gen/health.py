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
  badput, held pilots), so the light and the alerts agree.

Thresholds are literals here (the mutation test changes each and expects the
promtool tests to fail); windows come from rules.Timing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gwms_obs import catalogue
from gwms_obs.catalogue import Category, Outcome

from . import names as N
from .rules import Alert, Timing

# 1.4826 x MAD estimates a standard deviation for normal data; a floor keeps a fleet
# of identical entries (MAD 0) from making every small difference infinite.
MAD_SCALE = 1.4826
MAD_FLOOR = 0.01


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


@dataclass(frozen=True)
class Problem:
    reason: Reason
    status: Status
    expr: str  # the entries (labels entry, site) that have it
    meaning: str  # for docs and the dashboard


def problems(t: Timing = Timing()) -> list[Problem]:  # noqa: B008 - frozen, as in rules.py
    w = t.window
    P, U = catalogue.PILOTS.name, catalogue.USER_JOBS.name
    vf = f'sum by (entry, site) (increase({P}{{outcome="{Outcome.VALIDATION_FAILED}"}}[{w}]))'
    failed = f'sum by (entry, site) (increase({U}{{category="{Category.MISCONFIGURATION_BADPUT}"}}[{w}]))'
    held = f'sum by (entry, site) ({catalogue.ENTRY_GLIDEINS.name}{{state="held"}})'
    # Evidence counted over both resources: a hog short of 10 on each may be well over 10 in all.
    hogs = f"sum by (entry, site) (increase({catalogue.USER_JOBS_OVERUSING.name}[{w}]))"
    phase = f'label_replace({N.RR_PHASE_Z}, "entry", "$1", "{N.SPAN_ENTRY}", "(.*)")'  # span labels -> ours
    phase = f'label_replace({phase}, "site", "$1", "{N.SPAN_SITE}", "(.*)")'
    return [
        Problem(
            Reason.BLACK_HOLE,
            Status.FAILING,
            f"{N.RR_JOB_FAILURE_RATIO} > 0.5 and {failed} >= 20",
            "most user jobs fail for reasons not the user's (misconfiguration badput), at least 20 in the window",
        ),
        Problem(
            Reason.VALIDATION_FAILING,
            Status.FAILING,
            f"{N.RR_VALIDATION_RATIO} > 0.5 and {vf} >= 10",
            "more than half of the pilots fail worker-node validation (at least 10 in the window)",
        ),
        Problem(
            Reason.VALIDATION_FAILURES,
            Status.DEGRADED,
            f"{N.RR_VALIDATION_RATIO} > 0.25 and {vf} >= 10",
            "more than a quarter of the pilots fail validation (GwmsSiteValidationFailuresRising's condition)",
        ),
        Problem(
            Reason.VALIDATION_WORSENING,
            Status.DEGRADED,
            f"predict_linear({N.RR_VALIDATION_RATIO}[{t.trend_range}], {t.trend_horizon_seconds}) > 0.5"
            f" and {_rise_z(t.trend_range)} > 3",
            "the validation-failure share, on its recent trend, passes one half within the horizon, and the"
            " window's share is significantly above the window a trend range before (two-proportion z > 3:"
            " a steady but noisy share extrapolates anywhere)",
        ),
        Problem(
            Reason.BADPUT_HIGH,
            Status.DEGRADED,
            f"{N.RR_BADPUT_RATIO} > 0.3 and {N.RR_JOB_SECONDS} > 36000",
            "more than 30% of the user-job CPU time is badput (GwmsEntryBadputHigh's condition)",
        ),
        Problem(
            Reason.GOODPUT_FALLING,
            Status.DEGRADED,
            f"({N.RR_GOODPUT_RATIO} offset {t.baseline_offset}) / {N.RR_GOODPUT_RATIO} > 1.33"
            f" and ({N.RR_GOODPUT_RATIO} offset {t.baseline_offset}) > 0.3",
            "the goodput share is a quarter below the entry's own share a week before",
        ),
        Problem(
            Reason.WASTE_OUTLIER,
            Status.DEGRADED,
            f"{N.RR_WASTE_Z} > 3.5 and {N.RR_WASTE_RATIO} > 0.2",
            "the waste share is a robust outlier against the fleet (z > 3.5) and over 20%",
        ),
        Problem(
            Reason.PHASE_SLOW,
            Status.DEGRADED,
            f"max by (entry, site) ({phase} > 3.5)",
            "a pilot phase's p95 duration is a robust outlier against the same phase at other entries (z > 3.5)",
        ),
        Problem(
            Reason.PILOTS_HELD,
            Status.DEGRADED,
            f"{held} >= 20",
            "20 or more glideins held in the factory queue (GwmsPilotsHeld's condition, without its wait)",
        ),
        Problem(
            Reason.RESOURCE_HOG,
            Status.DEGRADED,
            f"{N.RR_JOB_OVERUSE_RATIO} > 0.1 and on (entry, site) {hogs} >= 10",
            "more than 10% of the user jobs used more memory, or more cores, than their slot gave them"
            " (at least 10 such jobs in the window)",
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


def recording_rules(t: Timing = Timing()) -> list[dict[str, str]]:  # noqa: B008
    """Appended to the gwms-recording group after rules.recording_rules (rules in a group run in order)."""
    w, b = t.window, t.baseline_window
    P, U, cpu = catalogue.PILOTS.name, catalogue.USER_JOBS.name, catalogue.CPU_SECONDS.name
    waste = "|".join(catalogue.WASTE)

    def by_entry(sel: str, metric: str, window: str) -> str:
        return f"sum by (entry, site) (increase({metric}{sel}[{window}]))"

    bucket = f'{N.SPAN_DURATION}_bucket{{service_name="{N.TRACE_SERVICE}"}}'
    e = N.SPAN_ENTRY
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
            "expr": f"sum by (entry, site, resource) (increase({catalogue.USER_JOBS_OVERUSING.name}[{w}]))"
            f" / on (entry, site) group_left {by_entry('', U, w)}",
        },
        {
            "record": N.RR_GOODPUT_RATIO,
            "expr": _ratio(by_entry(f'{{category="{Category.GOODPUT}"}}', cpu, b), by_entry("", cpu, b)),
        },
        {
            "record": N.RR_WASTE_RATIO,
            "expr": _ratio(by_entry(f'{{category=~"{waste}"}}', cpu, w), by_entry("", cpu, w)),
        },
        {"record": N.RR_WASTE_MEDIAN, "expr": f"quantile(0.5, {N.RR_WASTE_RATIO})"},
        {
            "record": N.RR_WASTE_MAD,
            "expr": f"quantile(0.5, abs({N.RR_WASTE_RATIO} - on () group_left {N.RR_WASTE_MEDIAN}))",
        },
        {
            "record": N.RR_WASTE_Z,
            "expr": f"({N.RR_WASTE_RATIO} - on () group_left {N.RR_WASTE_MEDIAN})"
            f" / scalar({MAD_SCALE} * clamp_min({N.RR_WASTE_MAD}, {MAD_FLOOR}))",
        },
        {
            "record": N.RR_PHASE_P95,
            "expr": f"histogram_quantile(0.95, sum by ({e}, {N.SPAN_SITE}, span_name, le) (rate({bucket}[{w}])))",
        },
        {"record": N.RR_PHASE_MEDIAN, "expr": f"quantile by (span_name) (0.5, {N.RR_PHASE_P95})"},
        {
            "record": N.RR_PHASE_MAD,
            "expr": f"quantile by (span_name) (0.5, abs({N.RR_PHASE_P95}"
            f" - on (span_name) group_left {N.RR_PHASE_MEDIAN}))",
        },
        {
            "record": N.RR_PHASE_Z,
            "expr": f"({N.RR_PHASE_P95} - on (span_name) group_left {N.RR_PHASE_MEDIAN})"
            f" / on (span_name) group_left clamp_min({MAD_SCALE} * {N.RR_PHASE_MAD}, 1)",  # a floor of 1 s
        },
    ]
    for p in problems(t):
        out.append(
            {
                "record": N.RR_SITE_PROBLEM,
                "expr": f'label_replace(max by (entry, site) ({p.expr}) * 0 + {int(p.status)}, "reason",'
                f' "{p.reason}", "", "")',
            }
        )
    out.append(
        {
            "record": N.RR_SITE_STATUS,
            # Every site, 0 unless one of its entries has a problem.
            "expr": f"max by (site) ({N.RR_SITE_PROBLEM})"
            f" or on (site) max by (site) ({catalogue.ENTRY_DOWNTIME.name}) * 0",
        }
    )
    return out


FAILING_REASONS = (
    '{{ range printf "' + N.RR_SITE_PROBLEM + '{site=%q} == 2" $labels.site | query }}'
    "{{ .Labels.reason }} at {{ .Labels.entry }}; {{ end }}"
)
NOT_GREEN = '{{ range query "' + N.RR_SITE_STATUS + ' > 0" }}{{ .Labels.site }}={{ .Value }} {{ end }}'
SHIFTERS = "shifters"  # the audience of the daily summary (the alertmanager role routes it)


def alerts(t: Timing = Timing()) -> list[Alert]:  # noqa: B008
    return [
        Alert(
            "GwmsSiteFailing",
            f"{N.RR_SITE_STATUS} == 2",
            t.for_site,
            "critical",
            "site",
            "Site {{ $labels.site }} is failing",
            f"Site {{{{ $labels.site }}}} is failing: {FAILING_REASONS}see the Site health dashboard.",
        ),
        Alert(
            "GwmsSitesNotGreen",
            f"count({N.RR_SITE_STATUS} > 0) > 0",
            "0s",
            "info",
            SHIFTERS,
            "{{ $value }} sites are not green",
            f"{{{{ $value }}}} sites degraded (1) or failing (2): {NOT_GREEN}- the shifters' daily summary.",
        ),
    ]
