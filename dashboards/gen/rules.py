"""Recording and alert rules, rendered to dashboards/rules/*.rules.yml.

Thresholds, windows and selectors come from config.CONFIG (the site red light,
health.py, reads the same object), so the live tests can render the same rules
with seconds instead of hours without touching the committed files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gwms_obs import catalogue
from gwms_obs.catalogue import Category, Outcome

from . import names as N
from .config import CONFIG, Config, share_words

# Alerts link to their section of the runbook document (anchor = alert name, lower case).
# The default base is the document on the forge; an operator's own copy is set at
# deploy time, without regenerating, as Prometheus's external label RUNBOOK_BASE_LABEL
# (global.external_labels in prometheus.yml), which the annotation template prefers.
RUNBOOK_DOC = "docs/runbooks.md"
RUNBOOK_BASE_URL = f"https://github.com/gwms-obs/gwms-obs/blob/main/{RUNBOOK_DOC}"
RUNBOOK_BASE_LABEL = "runbook_base"

# Job time that went to user jobs: the denominator of the badput ratio.
BADPUT = (Category.MISCONFIGURATION_BADPUT, Category.PREEMPTION_BADPUT)
JOB_TIME = (Category.GOODPUT, *BADPUT)


def _re(values: tuple[str, ...]) -> str:
    return "|".join(values)


@dataclass(frozen=True, kw_only=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    audience: str  # "site": mail the site's admins; "factory": factory-ops
    summary: str
    description: str

    @property
    def anchor(self) -> str:
        return self.name.lower()

    def rule(self) -> dict[str, Any]:
        out: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_ not in ("0s", "0m", ""):
            out["for"] = self.for_
        out["labels"] = {"severity": self.severity, "audience": self.audience}
        out["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "runbook_url": runbook_url(self.anchor),
        }
        return out


def site_alert(name: str, expr: str, for_: str, summary: str, description: str) -> Alert:
    """A warning for the site's admins: Alertmanager routes audience="site" by its site label,
    GwmsEntryInDowntime inhibits it on its entry, and Alert.rule links its runbook section."""
    return Alert(
        name=name, expr=expr, for_=for_, severity="warning", audience="site", summary=summary, description=description
    )


def factory_alert(name: str, expr: str, for_: str, summary: str, description: str, severity: str = "warning") -> Alert:
    """An alert for factory-ops (Alertmanager's default route), its runbook linked by Alert.rule."""
    return Alert(
        name=name, expr=expr, for_=for_, severity=severity, audience="factory", summary=summary, description=description
    )


def down_alert(
    name: str, selector: str, for_: str, summary: str, what: str, consequence: str, severity: str = "critical"
) -> Alert:
    """Factory-ops' alert that Prometheus cannot scrape ``what``: its ``up`` is 0, or its target is gone
    from Prometheus entirely (absent; the description then names no instance)."""
    up = f"up{{{selector}}}"
    instance = "{{ with $labels.instance }} at {{ . }}{{ end }}"
    description = f"Prometheus cannot scrape {what}{instance}; {consequence}"
    return factory_alert(name, f"{up} == 0 or absent({up})", for_, summary, description, severity)


def runbook_url(anchor: str) -> str:
    """A Prometheus annotation template: the operator's base URL if set, else the default."""
    base = (
        f"{{{{ with $externalLabels.{RUNBOOK_BASE_LABEL} }}}}{{{{ . }}}}{{{{ else }}}}{RUNBOOK_BASE_URL}{{{{ end }}}}"
    )
    return f"{base}#{anchor}"


def _up(c: Config) -> str:
    """Not while the entry is in downtime (Alertmanager's inhibition mutes the mail too; the light
    and promtool see it here)."""
    return f"unless on ({N.ENTRY_KEY}) {catalogue.ENTRY_DOWNTIME.name} == 1"


def mostly_held(c: Config = CONFIG) -> str:
    """The entries whose factory-queue glideins are mostly held (schedd_status), as the held share."""
    th, G = c.thresholds, catalogue.ENTRY_GLIDEINS.name
    held = f"sum by ({N.ENTRY_KEY}) ({G}{{{c.selectors.held}}})"
    # Only where the event log names the holds' class (the alert carries it; GwmsPilotsHeld covers the rest).
    return (
        f"{N.RR_HELD_RATIO} > {th.held_share} and on ({N.ENTRY_KEY}) {held} >= {th.held_mostly_glideins}"
        f" and on ({N.ENTRY_KEY}) {N.RR_HELD_TOP_CLASS} {_up(c)}"
    )


def ce_unreachable(c: Config = CONFIG) -> str:
    """The entries whose CE the gridmanager has seen down this long, as the seconds down."""
    since = catalogue.ENTRY_CE_DOWN_SINCE.name
    return f"time() - max by ({N.ENTRY_KEY}) ({since}) > {c.thresholds.ce_unreachable_seconds} {_up(c)}"


def queue_slow(c: Config = CONFIG) -> str:
    """The entries whose time in queue is far above their own last week, as the window's median."""
    th, q = c.thresholds, N.RR_QUEUE_P50
    return (
        f"{q} > {th.queue_slow_ratio} * {N.RR_QUEUE_BASELINE} and {q} > {th.queue_slow_seconds}"
        f" and {N.RR_QUEUE_PILOTS} >= {th.queue_slow_pilots} {_up(c)}"
    )


def submit_failing(c: Config = CONFIG) -> str:
    """The entries where condor_submit keeps failing, as the failures in the window."""
    return f"{N.RR_SUBMIT_FAILURES} >= {c.thresholds.submit_failures} {_up(c)}"


def recording_rules(c: Config = CONFIG) -> list[dict[str, str]]:
    keep = "without (instance, job)"
    job = _re(tuple(x.value for x in JOB_TIME))
    bad = _re(tuple(x.value for x in BADPUT))
    cpu, w, r = catalogue.CPU_SECONDS.name, c.timing.window, c.timing.rate_window
    G, Q = catalogue.ENTRY_GLIDEINS.name, catalogue.PILOT_QUEUE_TIME.name
    return [
        {"record": N.RR_CPU_RATE, "expr": f"sum {keep} (rate({cpu}[{r}]))"},
        {"record": N.RR_GPU_RATE, "expr": f"sum {keep} (rate({catalogue.GPU_SECONDS.name}[{r}]))"},
        {"record": N.RR_PILOTS_RATE, "expr": f"sum {keep} (rate({catalogue.PILOTS.name}[{r}]))"},
        # The badput alert and its panel read these two, so both show the same number.
        # Rules of a group run in order: the ratio uses the job time just recorded.
        {
            "record": N.RR_JOB_SECONDS,
            "expr": f'sum by ({N.ENTRY_KEY}) (increase({cpu}{{category=~"{job}"}}[{w}]))',
        },
        {
            "record": N.RR_BADPUT_RATIO,
            "expr": f'sum by ({N.ENTRY_KEY}) (increase({cpu}{{category=~"{bad}"}}[{w}])) / {N.RR_JOB_SECONDS}',
        },
        # Held glideins (issue 33): the share of the factory queue, and the class most held now.
        {
            "record": N.RR_HELD_RATIO,
            "expr": f"sum by ({N.ENTRY_KEY}) ({G}{{{c.selectors.held}}}) / sum by ({N.ENTRY_KEY}) ({G})",
        },
        {
            "record": N.RR_HELD_TOP_CLASS,
            "expr": f"topk by ({N.ENTRY_KEY}) (1, sum by ({N.ENTRY_KEY}, class) ({catalogue.HELD_GLIDEINS.name}))",
        },
        # Time in queue: the window's median per entry (only where pilots started), and the median
        # of those over the entry's own last week.
        {"record": N.RR_QUEUE_PILOTS, "expr": f"sum by ({N.ENTRY_KEY}) (increase({Q}_count[{w}]))"},
        {
            "record": N.RR_QUEUE_P50,
            "expr": f"histogram_quantile(0.5, sum by ({N.ENTRY_KEY}, le) (increase({Q}_bucket[{w}])))"
            f" and on ({N.ENTRY_KEY}) {N.RR_QUEUE_PILOTS} > 0",
        },
        {
            "record": N.RR_QUEUE_BASELINE,
            "expr": f"quantile_over_time(0.5, {N.RR_QUEUE_P50}[{c.timing.queue_baseline_range}])",
        },
        # condor_submit failures in the window (the factory's entry log, issue 33).
        {
            "record": N.RR_SUBMIT_FAILURES,
            "expr": f"sum by ({N.ENTRY_KEY}) (increase({catalogue.SUBMIT_FAILURES.name}[{w}]))",
        },
    ]


def alerts(c: Config = CONFIG) -> list[Alert]:
    t, th, s = c.timing, c.thresholds, c.selectors
    P = catalogue.PILOTS.name
    w = t.window

    def pilots(outcome: str | None = None) -> str:
        sel = f'{{outcome="{outcome}"}}' if outcome else ""
        return f"sum by ({N.ENTRY_KEY}) (increase({P}{sel}[{w}]))"

    vf, nm = pilots(Outcome.VALIDATION_FAILED), pilots(Outcome.NO_MATCH)
    sw = t.short_window
    return [
        site_alert(
            "GwmsSiteValidationFailuresRising",
            f"{vf} >= {th.validation_failed_pilots} and {vf} / {pilots()} > {th.validation_failure_share}",
            t.for_site,
            "Pilots fail validation at {{ $labels.site }} ({{ $labels.entry }})",
            '{{ $value | printf "%.0f" }} pilots of entry {{ $labels.entry }} at site {{ $labels.site }}'
            f" failed worker-node validation in the last {w}, more than {share_words(th.validation_failure_share)}"
            " of its pilots.",
        ),
        site_alert(
            "GwmsPilotsHeld",
            f"sum by ({N.ENTRY_KEY}) ({catalogue.ENTRY_GLIDEINS.name}{{{s.held}}}) >= {th.held_glideins}",
            t.for_held,
            "Pilots held at {{ $labels.site }} ({{ $labels.entry }})",
            '{{ $value | printf "%.0f" }} glideins of entry {{ $labels.entry }} are held in the factory queue.',
        ),
        site_alert(
            "GwmsEntryMostlyHeld",
            # The held share, labelled with the class most held now (the event log's, never its text).
            f"({mostly_held(c)}) * on ({N.ENTRY_KEY}) group_left (class) ({N.RR_HELD_TOP_CLASS} * 0 + 1)",
            t.for_site,
            "Glideins of {{ $labels.entry }} at {{ $labels.site }} are mostly held ({{ $labels.class }})",
            "{{ $value | humanizePercentage }} of the glideins of entry {{ $labels.entry }} in the"
            " factory queue are held; most of those held now were held for {{ $labels.class }}. The reason as the"
            " CE wrote it is in the exporter's log (redacted): 'hold at entry {{ $labels.entry }}'.",
        ),
        site_alert(
            "GwmsEntryCeUnreachable",
            ce_unreachable(c),
            t.for_stack,
            "The CE of {{ $labels.entry }} at {{ $labels.site }} is unreachable",
            "HTCondor-G has found the CE of entry {{ $labels.entry }} down for"
            " {{ $value | humanizeDuration }} (Detected Down Grid Resource, not back up since); its glideins"
            " wait in the factory queue.",
        ),
        site_alert(
            "GwmsEntryQueueSlow",
            queue_slow(c),
            t.for_site,
            "Glideins wait long in the queue of {{ $labels.entry }} at {{ $labels.site }}",
            "The glideins of entry {{ $labels.entry }} that started in the last"
            f" {w} waited {{{{ $value | humanizeDuration }}}} (median) from submission, over"
            f" {th.queue_slow_ratio:g} times the entry's own median of the last {t.queue_baseline_range}.",
        ),
        site_alert(
            "GwmsEntrySubmitFailing",
            submit_failing(c),
            t.for_site,
            "Submissions to {{ $labels.entry }} at {{ $labels.site }} are failing",
            f'condor_submit failed {{{{ $value | printf "%.0f" }}}} times in the last {w} at entry'
            " {{ $labels.entry }}: the factory's requests for it are not submitted. The failure as the factory"
            " logged it is in the exporter's log (redacted): 'condor_submit failed at entry {{ $labels.entry }}'.",
        ),
        factory_alert(
            "GwmsPilotsNeverMatched",
            f"{nm} >= {th.never_matched_pilots} and {nm} / {pilots()} > {th.never_matched_share}",
            t.for_held,
            "Pilots of {{ $labels.entry }} never get a job",
            '{{ $value | printf "%.0f" }} pilots of entry {{ $labels.entry }} ended without running a job'
            f" in the last {w}, more than {share_words(th.never_matched_share)} of its pilots.",
        ),
        site_alert(
            "GwmsEntryBadputHigh",
            f"{N.RR_BADPUT_RATIO} > {th.badput_share} and {N.RR_JOB_SECONDS} > {th.badput_job_seconds}",
            t.for_held,
            "High badput at {{ $labels.site }} ({{ $labels.entry }})",
            "{{ $value | humanizePercentage }} of the user-job CPU time of entry {{ $labels.entry }}"
            f" was badput in the last {w}.",
        ),
        factory_alert(
            "GwmsEntryInfoStale",
            f"time() - max by ({N.ENTRY_KEY}) ({catalogue.ENTRY_UPDATED.name}) > {th.entry_stale_seconds}",
            t.for_site,
            "Entry {{ $labels.entry }} status is stale",
            "The factory last wrote the status of entry {{ $labels.entry }} {{ $value | humanizeDuration }} ago.",
        ),
        factory_alert(
            "GwmsEntryInDowntime",
            # A flag, not a threshold: 1 while the factory has the entry in downtime.
            f"max by ({N.ENTRY_KEY}) ({catalogue.ENTRY_DOWNTIME.name}) == 1",
            "0s",
            "Entry {{ $labels.entry }} is in downtime",
            "Entry {{ $labels.entry }} at site {{ $labels.site }} is in downtime; its other alerts are inhibited.",
            severity="info",
        ),
        down_alert(
            "GwmsExporterDown",
            s.exporter,
            t.for_stack,
            "The gwms-obs exporter is down",
            "the gwms-obs exporter",
            "factory metrics are not collected.",
        ),
        factory_alert(
            "GwmsExporterStalled",
            f"time() - max by (instance) ({catalogue.LAST_SCAN.name}) > {th.exporter_stalled_seconds}",
            t.for_stack,
            "The gwms-obs exporter stopped scanning",
            "The last scan of gwms-obs {{ $labels.instance }} ended {{ $value | humanizeDuration }} ago.",
            severity="critical",
        ),
        factory_alert(
            "GwmsExporterFallingBehind",
            f"max by (instance, source) ({catalogue.LAG.name}) > {th.exporter_lag_seconds}",
            t.for_stack,
            "gwms-obs is falling behind on {{ $labels.source }}",
            "The oldest {{ $labels.source }} input not yet accounted by {{ $labels.instance }}"
            " is {{ $value | humanizeDuration }} old; the accounting is that far behind.",
        ),
        factory_alert(
            "GwmsExporterParseErrors",
            f"sum by (instance, source) (increase({catalogue.PARSE_ERRORS.name}[{w}])) > {th.parse_errors}",
            t.for_site,
            "gwms-obs skips unreadable {{ $labels.source }} input",
            '{{ $value | printf "%.0f" }} {{ $labels.source }} inputs were skipped as unreadable'
            f" in the last {w}; their pilots are missing from the accounting.",
        ),
        down_alert(
            "GwmsCollectorDown",
            s.collector,
            t.for_stack,
            "The OpenTelemetry Collector is down",
            "the collector",
            "pilot traces are being lost.",
        ),
        factory_alert(
            "GwmsCollectorDroppingSpans",
            # Any loss at all: a rate above nothing, not a tunable.
            f"sum by (instance) (rate({N.OTELCOL_RECEIVER_REFUSED}[{sw}])) > 0"
            f" or sum by (instance) (rate({N.OTELCOL_EXPORTER_FAILED}[{sw}])) > 0"
            f" or sum by (instance) (rate({N.OTELCOL_EXPORTER_ENQUEUE_FAILED}[{sw}])) > 0",
            t.for_stack,
            "The collector drops spans",
            'The collector {{ $labels.instance }} refuses or fails to export {{ $value | printf "%.2f" }} spans/s.',
        ),
        factory_alert(
            "GwmsCollectorQueueNearlyFull",
            f"max by (instance) ({N.OTELCOL_QUEUE_SIZE} / {N.OTELCOL_QUEUE_CAPACITY}) > {th.collector_queue_share}",
            t.for_stack,
            "The collector's export queue is nearly full",
            "The export queue of collector {{ $labels.instance }} is {{ $value | humanizePercentage }}"
            " full; spans will be dropped when it is full.",
        ),
        down_alert(
            "GwmsControllerDown",
            s.controller,
            t.for_stack,
            "The gwms-obs monitoring controller is down",
            "the monitoring controller",
            "pilots get no answer and trace at the factory's default verbosity, and no rule can be changed.",
            severity="warning",
        ),
    ]
