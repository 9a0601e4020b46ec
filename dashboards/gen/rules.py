"""Recording and alert rules, rendered to dashboards/rules/*.rules.yml.

Thresholds are literals here and nowhere else; the promtool unit tests
(rule_tests.py) spell their own numbers on purpose, so a threshold changed
here without the tests fails CI. Time windows and ``for:`` durations come
from :class:`Timing`, so the live test can render the same rules with
seconds instead of hours without touching the committed files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gwms_obs import catalogue
from gwms_obs.catalogue import Category, Outcome

from . import names as N

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


@dataclass(frozen=True)
class Timing:
    # counters' increase() window for site alerts; the :increase1h/:rate1h recording rules use it too
    window: str = "1h"
    short_window: str = "5m"  # rate() window for the stack's own health
    for_site: str = "15m"
    for_held: str = "30m"
    for_stack: str = "5m"
    # Site health (health.py): the trend's history and horizon, the goodput baseline.
    trend_range: str = "6h"
    trend_horizon_seconds: int = 86400
    baseline_window: str = "1d"
    baseline_offset: str = "7d"


@dataclass(frozen=True)
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


def runbook_url(anchor: str) -> str:
    """A Prometheus annotation template: the operator's base URL if set, else the default."""
    base = (
        f"{{{{ with $externalLabels.{RUNBOOK_BASE_LABEL} }}}}{{{{ . }}}}{{{{ else }}}}{RUNBOOK_BASE_URL}{{{{ end }}}}"
    )
    return f"{base}#{anchor}"


def recording_rules(t: Timing = Timing()) -> list[dict[str, str]]:
    keep = "without (instance, job)"
    job = _re(tuple(c.value for c in JOB_TIME))
    bad = _re(tuple(c.value for c in BADPUT))
    cpu, w = catalogue.CPU_SECONDS.name, t.window
    return [
        {"record": N.RR_CPU_RATE, "expr": f"sum {keep} (rate({cpu}[5m]))"},
        {"record": N.RR_GPU_RATE, "expr": f"sum {keep} (rate({catalogue.GPU_SECONDS.name}[5m]))"},
        {"record": N.RR_PILOTS_RATE, "expr": f"sum {keep} (rate({catalogue.PILOTS.name}[5m]))"},
        # The badput alert and its panel read these two, so both show the same number.
        # Rules of a group run in order: the ratio uses the job time just recorded.
        {
            "record": N.RR_JOB_SECONDS,
            "expr": f'sum by (entry, site) (increase({cpu}{{category=~"{job}"}}[{w}]))',
        },
        {
            "record": N.RR_BADPUT_RATIO,
            "expr": f'sum by (entry, site) (increase({cpu}{{category=~"{bad}"}}[{w}])) / {N.RR_JOB_SECONDS}',
        },
    ]


def alerts(t: Timing = Timing()) -> list[Alert]:
    P = catalogue.PILOTS.name
    w = t.window

    def pilots(outcome: str | None = None) -> str:
        sel = f'{{outcome="{outcome}"}}' if outcome else ""
        return f"sum by (entry, site) (increase({P}{sel}[{w}]))"

    vf, nm = pilots(Outcome.VALIDATION_FAILED), pilots(Outcome.NO_MATCH)
    exp_up = f'up{{job="{N.JOB_EXPORTER}"}}'
    col_up = f'up{{job="{N.JOB_COLLECTOR}"}}'
    ctl_up = f'up{{job="{N.JOB_CONTROLLER}"}}'
    sw = t.short_window
    return [
        Alert(
            "GwmsSiteValidationFailuresRising",
            f"{vf} >= 10 and {vf} / {pilots()} > 0.25",
            t.for_site,
            "warning",
            "site",
            "Pilots fail validation at {{ $labels.site }} ({{ $labels.entry }})",
            '{{ $value | printf "%.0f" }} pilots of entry {{ $labels.entry }} at site {{ $labels.site }}'
            f" failed worker-node validation in the last {w}, more than 25% of its pilots.",
        ),
        Alert(
            "GwmsPilotsHeld",
            f'sum by (entry, site) ({catalogue.ENTRY_GLIDEINS.name}{{state="held"}}) >= 20',
            t.for_held,
            "warning",
            "site",
            "Pilots held at {{ $labels.site }} ({{ $labels.entry }})",
            '{{ $value | printf "%.0f" }} glideins of entry {{ $labels.entry }} are held in the factory queue.',
        ),
        Alert(
            "GwmsPilotsNeverMatched",
            f"{nm} >= 10 and {nm} / {pilots()} > 0.5",
            t.for_held,
            "warning",
            "factory",
            "Pilots of {{ $labels.entry }} never get a job",
            '{{ $value | printf "%.0f" }} pilots of entry {{ $labels.entry }} ended without running a job'
            f" in the last {w}, more than half of its pilots.",
        ),
        Alert(
            "GwmsEntryBadputHigh",
            f"{N.RR_BADPUT_RATIO} > 0.3 and {N.RR_JOB_SECONDS} > 36000",
            t.for_held,
            "warning",
            "site",
            "High badput at {{ $labels.site }} ({{ $labels.entry }})",
            "{{ $value | humanizePercentage }} of the user-job CPU time of entry {{ $labels.entry }}"
            f" was badput in the last {w}.",
        ),
        Alert(
            "GwmsEntryInfoStale",
            f"time() - max by (entry, site) ({catalogue.ENTRY_UPDATED.name}) > 3600",
            t.for_site,
            "warning",
            "factory",
            "Entry {{ $labels.entry }} status is stale",
            "The factory last wrote the status of entry {{ $labels.entry }} {{ $value | humanizeDuration }} ago.",
        ),
        Alert(
            "GwmsEntryInDowntime",
            f"max by (entry, site) ({catalogue.ENTRY_DOWNTIME.name}) == 1",
            "0s",
            "info",
            "factory",
            "Entry {{ $labels.entry }} is in downtime",
            "Entry {{ $labels.entry }} at site {{ $labels.site }} is in downtime; its other alerts are inhibited.",
        ),
        Alert(
            "GwmsExporterDown",
            f"{exp_up} == 0 or absent({exp_up})",
            t.for_stack,
            "critical",
            "factory",
            "The gwms-obs exporter is down",
            "Prometheus cannot scrape the gwms-obs exporter{{ with $labels.instance }} at {{ . }}{{ end }};"
            " factory metrics are not collected.",
        ),
        Alert(
            "GwmsExporterStalled",
            f"time() - max by (instance) ({catalogue.LAST_SCAN.name}) > 900",
            t.for_stack,
            "critical",
            "factory",
            "The gwms-obs exporter stopped scanning",
            "The last scan of gwms-obs {{ $labels.instance }} ended {{ $value | humanizeDuration }} ago.",
        ),
        Alert(
            "GwmsExporterFallingBehind",
            f"max by (instance, source) ({catalogue.LAG.name}) > 1800",
            t.for_stack,
            "warning",
            "factory",
            "gwms-obs is falling behind on {{ $labels.source }}",
            "The oldest {{ $labels.source }} input not yet accounted by {{ $labels.instance }}"
            " is {{ $value | humanizeDuration }} old; the accounting is that far behind.",
        ),
        Alert(
            "GwmsExporterParseErrors",
            f"sum by (instance, source) (increase({catalogue.PARSE_ERRORS.name}[{w}])) > 50",
            t.for_site,
            "warning",
            "factory",
            "gwms-obs skips unreadable {{ $labels.source }} input",
            '{{ $value | printf "%.0f" }} {{ $labels.source }} inputs were skipped as unreadable'
            f" in the last {w}; their pilots are missing from the accounting.",
        ),
        Alert(
            "GwmsCollectorDown",
            f"{col_up} == 0 or absent({col_up})",
            t.for_stack,
            "critical",
            "factory",
            "The OpenTelemetry Collector is down",
            "Prometheus cannot scrape the collector{{ with $labels.instance }} at {{ . }}{{ end }};"
            " pilot traces are being lost.",
        ),
        Alert(
            "GwmsCollectorDroppingSpans",
            f"sum by (instance) (rate({N.OTELCOL_RECEIVER_REFUSED}[{sw}])) > 0"
            f" or sum by (instance) (rate({N.OTELCOL_EXPORTER_FAILED}[{sw}])) > 0"
            f" or sum by (instance) (rate({N.OTELCOL_EXPORTER_ENQUEUE_FAILED}[{sw}])) > 0",
            t.for_stack,
            "warning",
            "factory",
            "The collector drops spans",
            'The collector {{ $labels.instance }} refuses or fails to export {{ $value | printf "%.2f" }} spans/s.',
        ),
        Alert(
            "GwmsCollectorQueueNearlyFull",
            f"max by (instance) ({N.OTELCOL_QUEUE_SIZE} / {N.OTELCOL_QUEUE_CAPACITY}) > 0.8",
            t.for_stack,
            "warning",
            "factory",
            "The collector's export queue is nearly full",
            "The export queue of collector {{ $labels.instance }} is {{ $value | humanizePercentage }} full;"
            " spans will be dropped when it is full.",
        ),
        Alert(
            "GwmsControllerDown",
            f"{ctl_up} == 0 or absent({ctl_up})",
            t.for_stack,
            "warning",
            "factory",
            "The gwms-obs monitoring controller is down",
            "Prometheus cannot scrape the monitoring controller{{ with $labels.instance }} at {{ . }}{{ end }};"
            " pilots get no answer and trace at the factory's default verbosity, and no rule can be changed.",
        ),
    ]
