"""The one place the rules' numbers live: thresholds, windows and selectors (kubernetes-mixin's ``_config``).

The alerts (rules.py), the site red light (health.py) and the site-health board
read :data:`CONFIG`; none of them spells a threshold of its own, so an alert and
the light's problem with the same condition cannot drift apart
(tests/test_rule_config.py fails on a comparison literal in those modules).
The promtool unit tests (rule_tests.py, health_tests.py) spell their own
numbers on purpose: a threshold changed here without its tests fails CI.

The live tests render the same rules with windows of seconds instead of hours
(``Config(timing=Timing(window="20s", ...))``), thresholds unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gwms_obs import catalogue as K
from gwms_obs.tracing import conventions as C

from . import names as N


@dataclass(frozen=True)
class Timing:
    """Windows (PromQL durations) and ``for:`` waits."""

    # counters' increase() window for site alerts; the :increase1h/:rate1h recording rules use it too
    window: str = f"{K.ALERT_WINDOW_HOURS}h"
    short_window: str = "5m"  # rate() window for the stack's own health
    rate_window: str = "5m"  # the :rate5m recording rules (CPU, GPU, pilots) the boards draw
    for_site: str = "15m"
    for_held: str = "30m"
    for_stack: str = "5m"
    # Site health (health.py): the trend's history and horizon, the goodput baseline.
    trend_range: str = "6h"
    trend_horizon_seconds: int = 86400
    baseline_window: str = "1d"
    baseline_offset: str = "7d"
    # The entry's own queue time over this range is its baseline (queue_slow, GwmsEntryQueueSlow).
    queue_baseline_range: str = f"{K.QUEUE_BASELINE_DAYS}d"


@dataclass(frozen=True)
class Thresholds:
    """Every comparison constant of the alerts and the site-health problems.

    Shares are fractions (0.25 = 25 %); counts are pilots, jobs or glideins within
    :attr:`Timing.window`; ages are seconds. A field read by both an alert and a
    problem is that alert's condition on the site's light.
    """

    # Validation failures: GwmsSiteValidationFailuresRising = validation_failures (degraded);
    # more than validation_failing_share is the failing light, and the trend predicts crossing it.
    validation_failed_pilots: int = 10  # fewest failed pilots in the window for either
    validation_failure_share: float = 0.25
    validation_failing_share: float = 0.5
    validation_rise_z: float = 3  # two-proportion z of the window against the window a trend range before
    # Glideins held in the factory queue: GwmsPilotsHeld = pilots_held.
    held_glideins: int = 20
    # Most of an entry's queued glideins held: GwmsEntryMostlyHeld = held (a failing light).
    held_share: float = K.ENTRY_HELD_SHARE  # the entry thresholds analyze applies too live in the catalogue
    held_mostly_glideins: int = K.ENTRY_HELD_MIN  # fewest held glideins for it
    # The entry's CE down (the gridmanager's 026) this long: GwmsEntryCeUnreachable = ce_unreachable.
    ce_unreachable_seconds: int = 1800
    # Time in queue (submit -> first execute, the window's median) over queue_slow_ratio times the
    # entry's own median of the last queue_baseline_range, and over queue_slow_seconds, from at least
    # queue_slow_pilots pilots: GwmsEntryQueueSlow = queue_slow.
    queue_slow_ratio: float = K.QUEUE_SLOW_RATIO
    queue_slow_seconds: int = K.QUEUE_SLOW_SECONDS
    queue_slow_pilots: int = K.QUEUE_SLOW_PILOTS
    # condor_submit refused at the entry this many times in the window (the factory's own log):
    # GwmsEntrySubmitFailing = submit_failing.
    submit_failures: int = K.ENTRY_SUBMIT_FAILURES
    # Pilots that ended without running a job (GwmsPilotsNeverMatched).
    never_matched_pilots: int = 10
    never_matched_share: float = 0.5
    # Badput share of user-job CPU time: GwmsEntryBadputHigh = badput_high.
    badput_share: float = 0.3
    badput_job_seconds: int = 36000  # CPU seconds of user jobs in the window: 10 h, so a few jobs never fire it
    # Black hole: most user jobs fail for reasons not the user's.
    black_hole_share: float = 0.5
    black_hole_failed_jobs: int = 20
    # Goodput falling: the share a week before over today's (1.33: a quarter lower), and the floor of
    # the week-before share below which a fall means nothing.
    goodput_fall_ratio: float = 1.33
    goodput_baseline_share: float = 0.3
    # Robust outliers against the fleet (waste share, pilot phases' p95): z = (x - median) / (1.4826 MAD).
    outlier_z: float = 3.5
    waste_share: float = 0.2  # an outlier's waste must also be this large
    mad_floor_share: float = 0.01  # MAD floor of the waste share: a fleet of equal entries is no infinite z
    mad_floor_seconds: float = 1  # MAD floor of a phase's p95 duration
    # Jobs using more memory or cores than their slot gave (resource_hog).
    hog_share: float = 0.1
    hog_jobs: int = 10
    # The stack's own health.
    entry_stale_seconds: int = 3600  # age of an entry's status file (GwmsEntryInfoStale)
    exporter_stalled_seconds: int = 900  # since the exporter's last scan ended (GwmsExporterStalled)
    exporter_lag_seconds: int = 1800  # age of the oldest input not yet accounted (GwmsExporterFallingBehind)
    parse_errors: int = 50  # unreadable inputs skipped in the window (GwmsExporterParseErrors)
    collector_queue_share: float = 0.8  # export queue fill (GwmsCollectorQueueNearlyFull)


@dataclass(frozen=True)
class Selectors:
    """Label matchers (without braces) naming the stack's jobs and the series the rules pick."""

    exporter: str = f'job="{N.JOB_EXPORTER}"'
    collector: str = f'job="{N.JOB_COLLECTOR}"'
    controller: str = f'job="{N.JOB_CONTROLLER}"'
    held: str = 'state="held"'
    pilot_spans: str = f'service_name="{N.TRACE_SERVICE}"'
    # phase_slow's phases: those whose length is overhead (tracing.conventions.OVERHEAD_PHASES), from
    # the live tracer or from the factory's files; not main/condor, as long as the entry's walltime.
    overhead_phases: str = f'{N.SPAN_PHASE}=~"{"|".join(C.OVERHEAD_PHASES)}"'


@dataclass(frozen=True)
class Config:
    timing: Timing = field(default_factory=Timing)
    thresholds: Thresholds = field(default_factory=Thresholds)
    selectors: Selectors = field(default_factory=Selectors)


# 1.4826 x MAD estimates a standard deviation for normal data (a constant of the method, not a tunable).
MAD_SCALE = 1.4826

CONFIG = Config()


def share_words(share: float) -> str:
    """A share as the alert descriptions say it: "half", else a percentage."""
    return "half" if share == 0.5 else f"{share:.0%}"
