"""Every metric name the dashboards and rules may use that is not in gwms_obs.catalogue.

Three kinds, each named once here: the recording rules we define, the
span metrics the tracing pipeline (OpenTelemetry Collector ``spanmetrics``
connector) produces, and the self-metrics of the stack's servers. The linter
(lint.py) rejects any other name in a panel or rule expression.
"""

from __future__ import annotations

from gwms_obs import catalogue
from gwms_obs.tracing import conventions as C

# Prometheus job names, shared with ansible/roles/prometheus/defaults/main.yml
# (tests/test_dashboards.py checks they agree).
JOB_EXPORTER = "gwms-obs"
JOB_COLLECTOR = "otel-collector"
JOB_CONTROLLER = "gwms-controller"  # the monitoring controller (ansible/roles/gwms_controller)

# Grafana datasources the grafana role provisions (ansible/roles/grafana/defaults/main.yml,
# grafana_datasource_uids; a test checks they agree). Our own uids and names, never
# "Prometheus": on a Grafana that already has datasources ours must not replace theirs.
# The dashboards select the Prometheus one through their datasource variable.
DATASOURCE_PROMETHEUS = "gwms-obs-prometheus"
DATASOURCE_JAEGER = "gwms-obs-jaeger"
DATASOURCE_ALERTMANAGER = "gwms-obs-alertmanager"

# The labels an entry's recorded series keep (rules.py, health.py): its factory's too, so a board's
# factory choice selects them, and two factories' entries of one name stay two series (issue 31).
ENTRY_KEY = f"{catalogue.FACTORY_LABEL}, entry, site"
# Recording rules (rules.py defines them). level:metric:operation, per the Prometheus naming guide.
RR_CPU_RATE = "gwms:pilot_cpu_seconds:rate5m"
RR_GPU_RATE = "gwms:pilot_gpu_seconds:rate5m"
RR_PILOTS_RATE = "gwms:pilots:rate5m"
# Over the site alerts' window (config.Timing.window): what GwmsEntryBadputHigh and its panel read.
RR_JOB_SECONDS = "gwms:entry_cpu_job_seconds:increase1h"
RR_BADPUT_RATIO = "gwms:entry_cpu_badput_ratio:rate1h"
# Site health (health.py): per-entry ratios, fleet statistics, problems and the status per site.
RR_JOB_FAILURE_RATIO = "gwms:entry_job_failure_ratio:increase1h"
RR_VALIDATION_FAILURES = "gwms:entry_validation_failures:increase1h"
RR_PILOTS_ENDED = "gwms:entry_pilots:increase1h"
RR_VALIDATION_RATIO = "gwms:entry_validation_failure_ratio:increase1h"
RR_JOB_OVERUSE_RATIO = "gwms:entry_job_overuse_ratio:increase1h"  # {entry, site, resource}
RR_GOODPUT_RATIO = "gwms:entry_cpu_goodput_ratio:increase1d"
RR_WASTE_RATIO = "gwms:entry_cpu_waste_ratio:increase1h"
RR_WASTE_MEDIAN = "gwms:fleet_cpu_waste_ratio:median"
RR_WASTE_MAD = "gwms:fleet_cpu_waste_ratio:mad"
RR_WASTE_Z = "gwms:entry_cpu_waste_ratio:robust_z"
RR_PHASE_P95 = "gwms:entry_phase_duration_seconds:p95"
RR_PHASE_MEDIAN = "gwms:fleet_phase_duration_seconds:p95_median"
RR_PHASE_MAD = "gwms:fleet_phase_duration_seconds:p95_mad"
RR_PHASE_Z = "gwms:entry_phase_duration_seconds:p95_robust_z"
# The factory operator's day (issue 33): held glideins, the CE's queue.
RR_HELD_RATIO = "gwms:entry_held_glideins:ratio"  # held / all glideins in the factory queue (schedd_status)
RR_HELD_TOP_CLASS = "gwms:entry_held_glideins:top_class"  # {entry, site, class}: the class most held now
RR_QUEUE_P50 = "gwms:entry_queue_seconds:p50_1h"  # submit -> first execute, median of the window's pilots
RR_QUEUE_PILOTS = "gwms:entry_queue_pilots:increase1h"
RR_QUEUE_BASELINE = "gwms:entry_queue_seconds:p50_1h_week_median"  # the entry's own last week
RR_SUBMIT_FAILURES = "gwms:entry_submit_failures:increase1h"  # condor_submit refused (the factory's log)
RR_SITE_PROBLEM = "gwms:site_problem"  # {entry, site, reason}: 1 degraded, 2 failing
RR_SITE_STATUS = "gwms:site_status"  # {site}: 0 ok, 1 degraded, 2 failing
PHASE_RECORDED = (RR_PHASE_P95, RR_PHASE_MEDIAN, RR_PHASE_MAD, RR_PHASE_Z)
RECORDING: tuple[str, ...] = (
    RR_CPU_RATE,
    RR_GPU_RATE,
    RR_PILOTS_RATE,
    RR_JOB_SECONDS,
    RR_BADPUT_RATIO,
    RR_JOB_FAILURE_RATIO,
    RR_VALIDATION_FAILURES,
    RR_PILOTS_ENDED,
    RR_VALIDATION_RATIO,
    RR_JOB_OVERUSE_RATIO,
    RR_GOODPUT_RATIO,
    RR_WASTE_RATIO,
    RR_WASTE_MEDIAN,
    RR_WASTE_MAD,
    RR_WASTE_Z,
    *PHASE_RECORDED,
    RR_HELD_RATIO,
    RR_HELD_TOP_CLASS,
    RR_QUEUE_P50,
    RR_QUEUE_PILOTS,
    RR_QUEUE_BASELINE,
    RR_SUBMIT_FAILURES,
    RR_SITE_PROBLEM,
    RR_SITE_STATUS,
)
# The recorded series that carry the factory label wherever the exporter's series do (ENTRY_KEY, or
# `without (instance, job)`; the site problems' phase_slow rows from the span metrics' factory): not
# the phase rules' (theirs is the span metrics' label, SPAN_FACTORY).
RECORDED_BY_FACTORY: tuple[str, ...] = tuple(r for r in RECORDING if r not in PHASE_RECORDED)

# Span metrics of pilot phases: the collector's spanmetrics connector emits
# them; their names and labels are defined once, in gwms_obs.catalogue
# (and the span attributes in gwms_obs.tracing.conventions).
SPAN_DURATION = catalogue.SPANMETRICS_DURATION  # histogram
SPAN_CALLS = catalogue.SPANMETRICS_CALLS  # counter
# The gwms.factory dimension: the pilot's factory under the name the exporter's series carry as
# `factory`. The collector remote-writes, so no scrape relabelling can name it `factory`; queries
# select it with the boards' factory variable all the same (board.SPAN_FACTORY_SEL).
SPAN_FACTORY = catalogue.SPAN_LABEL_FACTORY
SPAN_ENTRY = catalogue.SPAN_LABEL_ENTRY  # the gwms.entry dimension as a Prometheus label
SPAN_SITE = catalogue.SPAN_LABEL_SITE
# The gwms.phase dimension: set on phase spans only (the live tracer's and the ones built from
# the factory's files, both named in tracing.conventions), so it tells phases from scripts and jobs.
SPAN_PHASE = catalogue.SPAN_LABEL_PHASE
TRACE_SERVICE = C.SERVICE_PILOT
# The series whose factory is SPAN_FACTORY, not the factory label: the span metrics and the phase
# rules recorded from them, which keep the span labels (health.py renames them on the problem rows).
BY_SPAN_FACTORY: frozenset[str] = frozenset(
    {*(SPAN_DURATION + s for s in ("_bucket", "_sum", "_count")), SPAN_CALLS, *PHASE_RECORDED}
)

# OpenTelemetry Collector internal telemetry (service::telemetry::metrics, Prometheus reader).
OTELCOL_RECEIVER_ACCEPTED = catalogue.OTELCOL_ACCEPTED_SPANS
OTELCOL_RECEIVER_REFUSED = catalogue.OTELCOL_REFUSED_SPANS
OTELCOL_EXPORTER_SENT = catalogue.OTELCOL_SENT_SPANS
OTELCOL_EXPORTER_FAILED = catalogue.OTELCOL_SEND_FAILED_SPANS
OTELCOL_EXPORTER_ENQUEUE_FAILED = catalogue.OTELCOL_ENQUEUE_FAILED_SPANS
OTELCOL_QUEUE_SIZE = catalogue.OTELCOL_QUEUE_SIZE
OTELCOL_QUEUE_CAPACITY = "otelcol_exporter_queue_capacity"
OTELCOL: tuple[str, ...] = (
    OTELCOL_RECEIVER_ACCEPTED,
    OTELCOL_RECEIVER_REFUSED,
    OTELCOL_EXPORTER_SENT,
    OTELCOL_EXPORTER_FAILED,
    OTELCOL_EXPORTER_ENQUEUE_FAILED,
    OTELCOL_QUEUE_SIZE,
    OTELCOL_QUEUE_CAPACITY,
)

# Prometheus's and Alertmanager's own metrics (both present in 2.42 / 0.25).
UP = "up"
ALERTS = "ALERTS"  # Prometheus's own series of firing/pending alerts
PROM_RULE_EVAL_FAILURES = "prometheus_rule_evaluation_failures_total"
PROM_NOTIFICATIONS_DROPPED = "prometheus_notifications_dropped_total"
PROM_HEAD_SERIES = "prometheus_tsdb_head_series"
PROM_SCRAPE_DURATION = "scrape_duration_seconds"
AM_NOTIFICATIONS = "alertmanager_notifications_total"
AM_NOTIFICATIONS_FAILED = "alertmanager_notifications_failed_total"
AM_ALERTS = "alertmanager_alerts"
SERVERS: tuple[str, ...] = (
    ALERTS,
    UP,
    PROM_RULE_EVAL_FAILURES,
    PROM_NOTIFICATIONS_DROPPED,
    PROM_HEAD_SERIES,
    PROM_SCRAPE_DURATION,
    AM_NOTIFICATIONS,
    AM_NOTIFICATIONS_FAILED,
    AM_ALERTS,
)

# Which process produces a name: the live test expects data from every panel
# whose names all come from processes it runs (not the collector).
COLLECTOR_NAMES: frozenset[str] = frozenset(
    {*OTELCOL, SPAN_CALLS, *(f"{SPAN_DURATION}_{s}" for s in ("bucket", "sum", "count")), *PHASE_RECORDED}
)


def allowed() -> frozenset[str]:
    """Every series name a panel or rule may select."""
    names: set[str] = set(RECORDING) | set(SERVERS) | set(OTELCOL) | {SPAN_CALLS} | set(catalogue.RUNTIME_NAMES)
    names |= {f"{SPAN_DURATION}_{s}" for s in ("bucket", "sum", "count")}
    for m in catalogue.ALL:
        names |= set(catalogue.exposition_names(m))
    return frozenset(names)
