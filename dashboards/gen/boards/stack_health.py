"""The monitoring stack's own health."""

from __future__ import annotations

from gwms_obs import catalogue

from .. import names as N
from ..board import Board, Target
from .common import (
    FACTORY,
    RUNTIME_SEL,
    STACK,
    legend,
    or_zero,
    sel,
)


def stack_health() -> Board:
    b = Board(
        STACK,
        "GlideinWMS factory / Monitoring stack health",
        "Is the monitoring itself working: exporter, collector, Prometheus, Alertmanager, the monitoring controller.",
        "whoever runs gwms-obs",
        variables=(),
    )
    b.add(
        "stat",
        "Targets up",
        "Scrape targets up, by job.",
        "short",
        [Target(f"sum by ({FACTORY}, job) ({sel('up')})", legend("job", FACTORY), instant=True)],
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
        [Target(f"max by ({FACTORY}, instance, version, python_version) ({sel(catalogue.BUILD_INFO.name)})")],
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
        [
            Target(
                f"max by ({FACTORY}, instance, source) ({sel(catalogue.LAG.name)})",
                legend("instance", "source", FACTORY),
            )
        ],
        budget=10,
        question="Is the exporter keeping up with the factory?",
    )
    b.add(
        "timeseries",
        "Time since the last scan",
        "Seconds since the exporter's last scan of the factory tree ended.",
        "s",
        [
            Target(
                f"time() - max by ({FACTORY}, instance) ({sel(catalogue.LAST_SCAN.name)})", legend("instance", FACTORY)
            )
        ],
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
                or_zero(f"sum by (source, reason) (rate({sel(catalogue.PARSE_ERRORS.name)}[$__rate_interval]))"),
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
                or_zero(f"sum by (label) (rate({sel(catalogue.LABEL_OVERFLOW.name)}[$__rate_interval]))"),
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
        [Target(f"max by ({FACTORY}, instance) ({sel(catalogue.SCAN_DURATION.name)})", legend("instance", FACTORY))],
        budget=5,
        question="How long does a scan take?",
    )
    b.add(
        "timeseries",
        "Exporter full scans forced",
        "Full scans the exporter ran because its inotify watch could not be trusted, by reason: a burst"
        " beyond the kernel's event queue (queue_overflow: one scan), or scanning every interval"
        " (watch_limit, remote_filesystem, unavailable, configured). 0: event-driven, as it should be.",
        "short",
        [
            Target(
                or_zero(f"sum by (reason) (increase({sel(catalogue.DISCOVERY_FALLBACKS.name)}[$__rate_interval]))"),
                "{{reason}}",
            )
        ],
        budget=6,
        question="Does the exporter follow the factory by events, or scan it?",
    )
    b.add(
        "timeseries",
        "Exporter /metrics server restarts",
        "Times the exporter restarted the process that answers its scrapes (it ended: killed, out of"
        " memory, a crash; the exporter's log names why). 0 as it should be; a scrape meanwhile is"
        " refused for a moment, the port staying the exporter's.",
        "short",
        [
            Target(
                or_zero(
                    f"sum by ({FACTORY}, instance)"
                    f" (increase({sel(catalogue.METRICS_SERVER_RESTARTS.name)}[$__rate_interval]))"
                ),
                legend("instance", FACTORY),
            )
        ],
        budget=5,
        question="Does the exporter's /metrics server keep running?",
    )
    b.add(
        "timeseries",
        "Exporter read rate",
        "Bytes read per second by source.",
        catalogue.BYTES_READ.rate_grafana_unit,
        [Target(f"sum by (source) (rate({sel(catalogue.BYTES_READ.name)}[$__rate_interval]))", "{{source}}")],
        budget=len(catalogue.Source),
        question="How much does the exporter read?",
    )
    b.add(
        "timeseries",
        "Exporter records read",
        "Records read per second by source.",
        catalogue.RECORDS.rate_grafana_unit,
        [Target(f"sum by (source) (rate({sel(catalogue.RECORDS.name)}[$__rate_interval]))", "{{source}}")],
        budget=len(catalogue.Source),
        question="How many records does the exporter process?",
    )
    b.add(
        "timeseries",
        "Files followed",
        "Files the exporter follows, by source.",
        catalogue.FILES_TRACKED.grafana_unit,
        [Target(f"sum by (source) ({sel(catalogue.FILES_TRACKED.name)})", "{{source}}")],
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
                f"sum by ({FACTORY}, instance)"
                f" (rate({catalogue.PROCESS_CPU_SECONDS}{{{RUNTIME_SEL}}}[$__rate_interval]))",
                legend("instance", FACTORY),
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
        [
            Target(
                f"max by ({FACTORY}, instance) ({catalogue.PROCESS_RESIDENT_MEMORY}{{{RUNTIME_SEL}}})",
                legend("instance", FACTORY),
            )
        ],
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
                or_zero(f"sum by (result) (rate({sel(catalogue.TRACE_SPOOLS.name)}[$__rate_interval]))"),
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
                or_zero(f"sum by (result) (rate({sel(catalogue.TRACE_SPANS.name)}[$__rate_interval]))"),
                "spans {{result}}",
            ),
            Target(
                or_zero(f"sum by (result) (rate({sel(catalogue.TRACE_REQUESTS.name)}[$__rate_interval]))"),
                "requests {{result}}",
            ),
        ],
        budget=10,
        question="Is the spool forwarder failing to send?",
    )
    paced = catalogue.TRACE_PACED
    b.add(
        "timeseries",
        "Span forwarder: share of time paced",
        "The share of time the forwarder waits to stay under trace_spans_per_second. Near 100 % for long: it sends"
        " at its limit all the time, so a backlog (a backfill, an outage) drains no faster; raise the rate if the"
        " collector and Jaeger keep up.",
        paced.rate_grafana_unit,
        [
            Target(
                or_zero(f"sum by ({FACTORY}, instance) (rate({sel(paced.name)}[$__rate_interval]))"),
                legend("instance", FACTORY),
            )
        ],
        budget=5,
        question="Is the span forwarder held back by its rate limit?",
    )
    b.add(
        "timeseries",
        "Collector spans in/out",
        "Spans accepted and exported per second.",
        "cps",
        [
            Target(f"sum(rate({sel(N.OTELCOL_RECEIVER_ACCEPTED)}[$__rate_interval]))", "accepted"),
            Target(f"sum(rate({sel(N.OTELCOL_EXPORTER_SENT)}[$__rate_interval]))", "sent"),
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
            Target(or_zero(f"sum(rate({sel(N.OTELCOL_RECEIVER_REFUSED)}[$__rate_interval]))"), "refused"),
            Target(or_zero(f"sum(rate({sel(N.OTELCOL_EXPORTER_FAILED)}[$__rate_interval]))"), "send failed"),
            Target(or_zero(f"sum(rate({sel(N.OTELCOL_EXPORTER_ENQUEUE_FAILED)}[$__rate_interval]))"), "enqueue failed"),
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
                f"max by ({FACTORY}, instance, exporter)"
                f" ({sel(N.OTELCOL_QUEUE_SIZE)} / {sel(N.OTELCOL_QUEUE_CAPACITY)})",
                legend("instance", "exporter", FACTORY),
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
            Target(f"sum(rate({sel(N.PROM_RULE_EVAL_FAILURES)}[$__rate_interval]))", "rule evaluation failures"),
            Target(f"sum(rate({sel(N.PROM_NOTIFICATIONS_DROPPED)}[$__rate_interval]))", "notifications dropped"),
        ],
        budget=2,
        question="Do the rules evaluate and the alerts leave Prometheus?",
    )
    b.add(
        "timeseries",
        "Prometheus head series",
        "Series in memory.",
        "short",
        [Target(f"max by ({FACTORY}, instance) ({sel(N.PROM_HEAD_SERIES)})", legend("instance", FACTORY))],
        budget=5,
        question="How many series does Prometheus hold?",
    )
    b.add(
        "timeseries",
        "Alertmanager notifications",
        "Notifications sent and failed per second, by integration.",
        "cps",
        [
            Target(f"sum by (integration) (rate({sel(N.AM_NOTIFICATIONS)}[$__rate_interval]))", "{{integration}} sent"),
            Target(
                f"sum by (integration) (rate({sel(N.AM_NOTIFICATIONS_FAILED)}[$__rate_interval]))",
                "{{integration}} failed",
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
        [Target(f"sum by (state) ({sel(N.AM_ALERTS)})", "{{state}}")],
        budget=5,
        question="How many alerts does Alertmanager hold?",
    )
    _controller(b)
    return b


def _controller(b: Board) -> None:
    """The monitoring controller's row: is it up, what it decides, what it refuses, its rules."""
    up = sel("up", f'job="{N.JOB_CONTROLLER}"')
    dec, den = catalogue.CONTROLLER_DECISIONS, catalogue.CONTROLLER_DENIALS
    changes, expiries = catalogue.CONTROLLER_CHANGES, catalogue.CONTROLLER_EXPIRIES
    rules, auth = catalogue.CONTROLLER_RULES, catalogue.CONTROLLER_AUTH_FAILURES
    b.row("Monitoring controller")
    b.add(
        "stat",
        "Controller up",
        "Whether Prometheus scrapes each monitoring controller (GwmsControllerDown fires after 5 minutes down).",
        "short",
        [Target(f"max by ({FACTORY}, instance) ({up})", legend("instance", FACTORY), instant=True)],
        budget=5,
        question="Is the monitoring controller up?",
        w=6,
        h=6,
        states=((0, "down", "red"), (1, "up", "green")),
    )
    b.add(
        "timeseries",
        "Controller decisions by verbosity",
        "Decisions answered to pilots per second, by the verbosity granted.",
        dec.rate_grafana_unit,
        [Target(f"sum by (verbosity) (rate({sel(dec.name)}[$__rate_interval]))", "{{verbosity}}")],
        budget=4,
        question="How many pilots ask the controller, and what verbosity do they get?",
        w=9,
        h=6,
        stacked=True,
    )
    b.add(
        "timeseries",
        "Controller decisions by deciding kind",
        "Decisions per second by the kind of rule that decided (default: no rule matched).",
        dec.rate_grafana_unit,
        [Target(f"sum by (kind) (rate({sel(dec.name)}[$__rate_interval]))", "{{kind}}")],
        budget=4,
        question="Which kind of rule decides the pilots' verbosity?",
        w=9,
        h=6,
        stacked=True,
    )
    b.add(
        "timeseries",
        "Controller denials by reason",
        "Rule changes refused (and audited) per second, by reason (0 when none).",
        den.rate_grafana_unit,
        [Target(or_zero(f"sum by (reason) (rate({sel(den.name)}[$__rate_interval]))"), "{{reason}}")],
        budget=7,
        question="Are people being refused by the controller, and why?",
        w=8,
    )
    b.add(
        "timeseries",
        "Controller rules in force",
        "Rules in force now, by kind (overrides and caps).",
        rules.grafana_unit,
        [Target(f"sum by (kind) ({sel(rules.name)})", "{{kind}}")],
        budget=4,
        question="How many controller rules are in force, of which kind?",
        w=8,
    )
    b.add(
        "timeseries",
        "Controller rule changes and expiries",
        "Rules created, expired or deleted per second by action, and rules that reached their expiry by kind (0 when"
        " none).",
        changes.rate_grafana_unit,
        [
            Target(or_zero(f"sum by (action) (rate({sel(changes.name)}[$__rate_interval]))"), "{{action}}"),
            Target(or_zero(f"sum by (kind) (rate({sel(expiries.name)}[$__rate_interval]))"), "{{kind}} expired"),
        ],
        budget=8,
        question="Are controller rules being changed, or running out?",
        w=8,
    )
    b.add(
        "timeseries",
        "Controller authentication failures",
        "Requests refused for a missing or unknown bearer token, per second (0 when none): a pilot or a person"
        " with a revoked or mistyped token, or someone guessing.",
        auth.rate_grafana_unit,
        [
            Target(
                or_zero(f"sum by ({FACTORY}, instance) (rate({sel(auth.name)}[$__rate_interval]))"),
                legend("instance", FACTORY),
            )
        ],
        budget=5,
        question="Is anyone calling the controller with a bad token?",
        w=12,
    )
    jaeger = catalogue.CONTROLLER_JAEGER
    b.add(
        "timeseries",
        "Pilot pages: Jaeger requests by outcome",
        "The pilot pages' requests to Jaeger's query API per second, by outcome (0 when none): timeout and error"
        " are pages that answered 504 or 502, because Jaeger was slow, down or answered badly.",
        jaeger.rate_grafana_unit,
        [Target(or_zero(f"sum by (outcome) (rate({sel(jaeger.name)}[$__rate_interval]))"), "{{outcome}}")],
        budget=4,
        question="Can the pilot pages reach Jaeger?",
        w=12,
    )
