"""The one catalogue of gwms-obs metric names, types, units and labels.

The exporter (``outputs.prometheus``, ``outputs.otlp``), the dashboards, the
recording/alert rules and the tests all import this module; nothing else
spells a metric name. Cardinality budget (docs/metrics.md): labels are drawn
only from bounded sets — entries, clients and sites come from the factory's
configuration, categories/outcomes/states/reasons from the enums below. No
label ever holds a pilot, a job, a host or a path.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import Final, Literal

from .tracing import conventions as C


class Category(enum.StrEnum):
    """Where one canonical unit-second of a pilot's life went (docs/accounting.md)."""

    VALIDATION_FAILED = "validation_failed"
    DECISION_PROBLEM = "decision_problem"
    MISCONFIGURATION_BADPUT = "misconfiguration_badput"
    GOODPUT = "goodput"
    PREEMPTION_BADPUT = "preemption_badput"
    OVERHEAD = "overhead"
    # Time nobody can place: pilots whose .out never came back (the event log
    # knows their lifetime, nothing more) and the HTCondor time of pilots that
    # ran jobs but returned no job information (empty Stats block, no
    # StartdHistoryLog). Kept apart so provisioning totals still add up.
    UNKNOWN = "unknown"


# What the dashboards rank and the report plot sorts by as "waste": provisioned
# canonical time no user job used to completion. Goodput is not waste; unknown
# is time nobody can place, shown apart rather than blamed on the entry.
WASTE: Final[tuple[Category, ...]] = (
    Category.VALIDATION_FAILED,
    Category.DECISION_PROBLEM,
    Category.MISCONFIGURATION_BADPUT,
    Category.PREEMPTION_BADPUT,
    Category.OVERHEAD,
)


class Accuracy(enum.StrEnum):
    """How a pilot's partition was obtained, so users can see what is exact."""

    EXACT = "exact"  # per-job StartdHistoryLog from the .err
    STATS = "stats"  # the .out Stats block (job sizes assumed 1 core)
    COMPLETED_LOG = "completed_log"  # only the completed_jobs line (the .out was cleaned up)
    NONE = "none"  # condor ran jobs but no job information survived
    CONDOR_EVENT_LOG = "condor_event_log"  # only the HTCondor-G event log (no .out)


class Outcome(enum.StrEnum):
    """What became of a pilot, for ``gwms_pilots_total``."""

    VALIDATION_FAILED = "validation_failed"  # condor never started
    NO_MATCH = "no_match"  # condor started, no job ever ran
    RAN_JOBS = "ran_jobs"
    LOST = "lost"  # no .out came back


class Resource(enum.StrEnum):
    CPU = "cpu"  # canonical unit: 1 core + 2 GB
    GPU = "gpu"  # canonical unit: 1 GPU


class Overused(enum.StrEnum):
    """What a user job used more of than its slot gave it (the ``resource`` label of the
    overuse counters; accounting/overuse.py)."""

    MEMORY = "memory"  # peak MemoryUsage over the slot's memory
    CPU = "cpu"  # user + system CPU over 1.25 x wall x the slot's cores


CANONICAL_MB_PER_CORE = 2048

# Label sets, named once.
POOL = ("entry", "client", "site")

# The cardinality budget (docs/metrics.md), enforced at run time: a label value
# first seen when its label already has this many is counted under OVERFLOW,
# never as a new series (and LABEL_OVERFLOW counts it).
LABEL_CAPS: dict[str, int] = {"entry": 2000, "client": 500, "site": 2000}
OVERFLOW = "_overflow"
ENTRY = ("entry", "site")

# Many factories, one view (docs/scale-out.md): each factory's Prometheus carries these two
# external labels, which Thanos attaches to everything it ships and serves. ``factory`` names
# the GlideinWMS factory (a dashboard variable, never emitted by the exporter: one exporter
# reads one factory); ``replica`` tells an HA pair's two Prometheus apart, and the global
# query removes it (--query.replica-label) so a pair's series are counted once.
FACTORY_LABEL: Final = "factory"
REPLICA_LABEL: Final = "replica"

MetricType = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True, slots=True)
class MetricDef:
    name: str  # full exposition name (counters end in _total)
    type: MetricType
    help: str
    labels: tuple[str, ...]
    unit: str = ""  # Prometheus/OTel base unit: "seconds", "" for counts
    grafana_unit: str = "short"  # the panel unit dashboards must use
    buckets: tuple[float, ...] = ()
    # The Grafana unit of rate(metric), for counters: what one unit-second per second is
    # (canonical units in use, jobs waiting...); empty derives it: bytes -> Bps, counts -> cps.
    rate_unit: str = ""

    @property
    def base(self) -> str:
        """Name without ``_total``: what prometheus_client's families take."""
        return self.name.removesuffix("_total")

    @property
    def rate_grafana_unit(self) -> str:
        """The Grafana unit of ``rate()`` of this counter."""
        return self.rate_unit or {"bytes": "Bps", "": "cps"}.get(self.unit, "short")


_LIFETIME_BUCKETS = (300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 57600.0, 86400.0, 172800.0)
_VALIDATION_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
# Minutes on a healthy entry, days when a site's batch system is full or the entry is held back.
_QUEUE_BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0, 259200.0)

CPU_SECONDS = MetricDef(
    "gwms_pilot_cpu_seconds_total",
    "counter",
    "Canonical CPU unit-seconds (1 core + 2 GB) of completed pilots by time category.",
    (*POOL, "category", "accuracy"),
    "seconds",
    "s",
    rate_unit="suffix: CPU units",
)
GPU_SECONDS = MetricDef(
    "gwms_pilot_gpu_seconds_total",
    "counter",
    "GPU-seconds (1 GPU) of completed pilots by time category.",
    (*POOL, "category", "accuracy"),
    "seconds",
    "s",
    rate_unit="suffix: GPUs",
)
PILOTS = MetricDef(
    "gwms_pilots_total",
    "counter",
    "Completed pilots by outcome.",
    (*POOL, "outcome"),
)
USER_JOBS = MetricDef(
    "gwms_user_jobs_total",
    "counter",
    "User jobs that ran in completed pilots, by the category their time went to.",
    (*POOL, "category"),
)
USER_JOBS_OVERUSING = MetricDef(
    "gwms_user_jobs_overusing_total",
    "counter",
    "User jobs that used more than their slot gave them, by resource: memory (peak MemoryUsage over the"
    " slot's memory), cpu (user + system CPU over 1.25 x wall x the slot's cores). Exists, at 0, for"
    " the resources the jobs' ads report.",
    (*POOL, "resource"),
)
USER_JOB_OVERUSE_SECONDS = MetricDef(
    "gwms_user_job_overuse_seconds_total",
    "counter",
    "Canonical unit-seconds (1 core + 2 GB) overusing jobs took beyond their slot, by resource:"
    " CPU seconds over wall x cores; peak memory over the slot's, per 2 GB, x wall.",
    (*POOL, "resource"),
    "seconds",
    "s",
    rate_unit="suffix: CPU units",
)
PILOT_LIFETIME = MetricDef(
    "gwms_pilot_lifetime_seconds",
    "histogram",
    "Wall-clock lifetime of completed pilots.",
    POOL,
    "seconds",
    "s",
    _LIFETIME_BUCKETS,
)
PILOT_VALIDATION = MetricDef(
    "gwms_pilot_validation_seconds",
    "histogram",
    "Time pilots spent validating the worker node before starting HTCondor.",
    POOL,
    "seconds",
    "s",
    _VALIDATION_BUCKETS,
)
PILOT_QUEUE_TIME = MetricDef(
    "gwms_pilot_queue_seconds",
    "histogram",
    "Time completed pilots waited in the queue, from the factory's submit to their first execute (the"
    " schedd's event log; pilots it does not hold are not observed).",
    POOL,
    "seconds",
    "s",
    _QUEUE_BUCKETS,
)
# The pilot histograms' exemplars carry this label: the pilot's trace id (outputs/pilot_traces.py),
# the name Grafana's Prometheus datasource links to Jaeger by (exemplarTraceIdDestinations).
EXEMPLAR_TRACE_ID = "trace_id"
PILOT_LAST_COMPLETED = MetricDef(
    "gwms_pilot_last_completed_timestamp_seconds",
    "gauge",
    "End time of the newest completed pilot seen.",
    POOL,
    "seconds",
    "dateTimeAsIso",
)

# Entry status (monitor/entry_*/schedd_status.xml), one sample per frontend.
ENTRY_GLIDEINS = MetricDef(
    "gwms_entry_glideins",
    "gauge",
    "Glideins in the factory queue by state (wait+pending+stagein+idleother = idle; idle itself is not exported).",
    (*POOL, "state"),
)
ENTRY_REQUESTED = MetricDef(
    "gwms_entry_requested_glideins",
    "gauge",
    "What the frontend asked of the entry: idle, adjusted_idle, max_running glideins.",
    (*POOL, "kind"),
)
ENTRY_USER_JOBS = MetricDef(
    "gwms_entry_user_jobs",
    "gauge",
    "Frontend-reported user jobs matching the entry: idle, running, running_here.",
    (*POOL, "state"),
)
ENTRY_VO_GLIDEINS = MetricDef(
    "gwms_entry_vo_glideins",
    "gauge",
    "Glideins of the entry registered in the VO pool: idle (unclaimed), running (claimed).",
    (*POOL, "state"),
)
ENTRY_VO_CORES = MetricDef(
    "gwms_entry_vo_cores",
    "gauge",
    "Cores of the entry's glideins in the VO pool as counted by the frontend: idle, running.",
    (*POOL, "state"),
)
ENTRY_INFO_AGE = MetricDef(
    "gwms_entry_frontend_info_age_seconds",
    "gauge",
    "Age of the frontend's information about the entry.",
    POOL,
    "seconds",
    "s",
)
ENTRY_DOWNTIME = MetricDef(
    "gwms_entry_downtime",
    "gauge",
    "1 while the entry is in downtime.",
    ENTRY,
)
ENTRY_UPDATED = MetricDef(
    "gwms_entry_status_updated_timestamp_seconds",
    "gauge",
    "When the factory last wrote the entry's schedd_status.xml.",
    ENTRY,
    "seconds",
    "dateTimeAsIso",
)
ENTRY_BOTTLENECK = MetricDef(
    "gwms_entry_provisioning_bottleneck_jobs",
    "gauge",
    "Idle user jobs matching the entry while none of its pilots is idle in the VO pool"
    " (GIL 'provisioning bottleneck').",
    POOL,
)
ENTRY_INSUFFICIENT_DEMAND = MetricDef(
    "gwms_entry_insufficient_demand_cores",
    "gauge",
    "Idle cores of the entry's pilots in the VO pool while no matching user job waits (GIL 'insufficient demand').",
    POOL,
)
ENTRY_BOTTLENECK_SECONDS = MetricDef(
    "gwms_entry_provisioning_bottleneck_job_seconds_total",
    "counter",
    "Integral over time of gwms_entry_provisioning_bottleneck_jobs.",
    POOL,
    "seconds",
    "s",
    rate_unit="suffix: jobs",
)
ENTRY_INSUFFICIENT_DEMAND_SECONDS = MetricDef(
    "gwms_entry_insufficient_demand_core_seconds_total",
    "counter",
    "Integral over time of gwms_entry_insufficient_demand_cores.",
    POOL,
    "seconds",
    "s",
    rate_unit="suffix: cores",
)


# --- the factory operator's day (issue 33): holds, CE unreachable, time in queue ---------------------

# The entry alerts' thresholds that analyze's entry actions (analysis/entry_actions.py) apply too, in
# one place: dashboards/gen/config.py's Thresholds and Timing take them as their defaults, so the red
# light and analyze flag the same entries.
ENTRY_HELD_SHARE: Final[float] = 0.5  # GwmsEntryMostlyHeld: over this share of the entry's queue held ...
ENTRY_HELD_MIN: Final = 5  # ... and at least this many glideins
ENTRY_SUBMIT_FAILURES: Final = 3  # GwmsEntrySubmitFailing: condor_submit failures in the window
ALERT_WINDOW_HOURS: Final = 1  # the site alerts' window (config.Timing.window)
# GwmsEntryQueueSlow: the window's median time in queue over QUEUE_SLOW_RATIO times the entry's own
# median of the window's medians over the last QUEUE_BASELINE_DAYS, over QUEUE_SLOW_SECONDS, from at
# least QUEUE_SLOW_PILOTS pilots in the window.
QUEUE_SLOW_RATIO: Final[float] = 4
QUEUE_SLOW_SECONDS: Final = 3600
QUEUE_SLOW_PILOTS: Final = 10
QUEUE_BASELINE_DAYS: Final = 7


class HoldClass(enum.StrEnum):
    """Why a glidein was held: the only values the ``class`` label takes (sources/hold_reasons.py
    says how a hold's code and text map to one, from HTCondor's documented codes and texts)."""

    CE_REFUSED = "ce_refused"  # the CE's schedd refused the job (submit requirements, job limits)
    CE_UNREACHABLE = "ce_unreachable"  # the CE could not be reached (connect failed, timed out)
    AUTH_FAILED = "auth_failed"  # the CE refused the factory's credentials (authentication, authorization)
    TOKEN_EXPIRED = "token_expired"  # the SciToken/IDTOKEN presented had expired
    PROXY_EXPIRED = "proxy_expired"  # the X.509 proxy expired or is invalid (code 4)
    PERIODIC_HOLD = "periodic_hold"  # a job or system policy expression held it (the factory's or the CE's)
    TRANSFER_FAILED = "transfer_failed"  # the input or output sandbox transfer failed
    USER = "user"  # condor_hold by a person, or submitted on hold
    OTHER = "other"  # any other code or text: never a new label value


HOLDS = MetricDef(
    "gwms_glidein_holds_total",
    "counter",
    "Holds of the entry's glideins (the schedd's 012 events, of glideins still queued too), by the class of"
    " the hold's reason (HoldReasonCode, SubCode and text; unknown ones are 'other'). The reason's text is"
    " never a label: the exporter logs the newest, redacted, per entry.",
    (*POOL, "class"),
)
HELD_GLIDEINS = MetricDef(
    "gwms_entry_held_glideins",
    "gauge",
    "Glideins held now (a 012 not released, removed or ended yet), by the class of their newest hold.",
    (*POOL, "class"),
)
HELD_SECONDS = MetricDef(
    "gwms_glidein_held_seconds_total",
    "counter",
    "Seconds the entry's glideins spent held, counted when a hold ends (released, removed or terminated).",
    POOL,
    "seconds",
    "s",
    rate_unit="suffix: glideins",  # glidein-seconds held per second: glideins held on average
)
PILOT_GRID_QUEUE_TIME = MetricDef(
    "gwms_pilot_grid_queue_seconds",
    "histogram",
    "Time completed pilots waited in the CE's queue, from the CE accepting the job (the 027 grid submit event)"
    " to their first execute; pilots without a 027 are not observed.",
    POOL,
    "seconds",
    "s",
    _QUEUE_BUCKETS,
)
ENTRY_CE_DOWN = MetricDef(
    "gwms_entry_ce_down",
    "gauge",
    "1 while the entry's CE is unreachable: the gridmanager's newest event for it is 026 'Detected Down Grid"
    " Resource', not yet followed by 025 'Grid Resource Back Up'; 0 once seen up.",
    ENTRY,
)
ENTRY_CE_DOWN_SINCE = MetricDef(
    "gwms_entry_ce_down_since_timestamp_seconds",
    "gauge",
    "While the entry's CE is down: the time of the first 026 event of this outage.",
    ENTRY,
    "seconds",
    "dateTimeAsIso",
)

# --- the VO frontend's view (issue 35): <frontend monitor>/group_<group>/frontend_status.xml ---------
# Served by the `gwms-obs export` on the frontend host (frontend_monitor_dir). ``client`` is the
# name the factory labels this group's requests with (its client_log_name, [frontend_clients]), so
# the frontend's and the factory's series of one entry join on (entry, client); ``factory_instance``
# is the rest of the frontend's name of the entry: <glidein>@<factory>@<factory pool node>.
FRONTEND_GROUP = ("group", "client")
FRONTEND_ENTRY = ("entry", "client", "group", "factory_instance")
FRONTEND_UPDATED = MetricDef(
    "gwms_frontend_status_updated_timestamp_seconds",
    "gauge",
    "When the frontend last wrote its frontend-wide frontend_status.xml (the aggregate of its groups).",
    (),
    "seconds",
    "dateTimeAsIso",
)
FRONTEND_GROUP_UPDATED = MetricDef(
    "gwms_frontend_group_status_updated_timestamp_seconds",
    "gauge",
    "When the frontend last wrote the group's frontend_status.xml (once per group cycle).",
    FRONTEND_GROUP,
    "seconds",
    "dateTimeAsIso",
)
FRONTEND_JOBS = MetricDef(
    "gwms_frontend_jobs",
    "gauge",
    "User jobs in the group's schedds as the frontend counts them: idle, old_idle (idle over 10 minutes),"
    " idle_3600 (over an hour), running, total.",
    (*FRONTEND_GROUP, "state"),
)
FRONTEND_GLIDEINS = MetricDef(
    "gwms_frontend_glideins",
    "gauge",
    "The group's glideins in the VO pool as the frontend sees them: idle, running, total.",
    (*FRONTEND_GROUP, "state"),
)
FRONTEND_UNMATCHED_JOBS = MetricDef(
    "gwms_frontend_unmatched_jobs",
    "gauge",
    "User jobs of the group no factory entry matches: idle, effective_idle, old_idle, running.",
    (*FRONTEND_GROUP, "state"),
)
FRONTEND_ENTRY_JOBS = MetricDef(
    "gwms_frontend_entry_jobs",
    "gauge",
    "User jobs of the group matching the entry (shared among the entries they match): idle, effective_idle,"
    " old_idle, running (on any entry's glideins), running_here (on this entry's).",
    (*FRONTEND_ENTRY, "state"),
)
FRONTEND_ENTRY_GLIDEINS = MetricDef(
    "gwms_frontend_entry_glideins",
    "gauge",
    "The entry's glideins in the VO pool as the frontend sees them: total, idle, running, failed.",
    (*FRONTEND_ENTRY, "state"),
)
FRONTEND_ENTRY_CORES = MetricDef(
    "gwms_frontend_entry_cores",
    "gauge",
    "Cores of the entry's glideins in the VO pool as the frontend sees them: total, idle, running.",
    (*FRONTEND_ENTRY, "state"),
)
FRONTEND_ENTRY_REQUESTED = MetricDef(
    "gwms_frontend_entry_requested_glideins",
    "gauge",
    "What the frontend asked of the entry this cycle: idle (glideins to keep idle), max_running; the factory"
    " side of the same request is gwms_entry_requested_glideins (same kind values).",
    (*FRONTEND_ENTRY, "kind"),
)
FRONTEND_ENTRY_DOWN = MetricDef(
    "gwms_frontend_entry_down",
    "gauge",
    "1 while the frontend sees the entry in downtime (it then requests nothing of it).",
    FRONTEND_ENTRY,
)
FRONTEND_METRICS: Final[tuple[MetricDef, ...]] = (
    FRONTEND_UPDATED,
    FRONTEND_GROUP_UPDATED,
    FRONTEND_JOBS,
    FRONTEND_GLIDEINS,
    FRONTEND_UNMATCHED_JOBS,
    FRONTEND_ENTRY_JOBS,
    FRONTEND_ENTRY_GLIDEINS,
    FRONTEND_ENTRY_CORES,
    FRONTEND_ENTRY_REQUESTED,
    FRONTEND_ENTRY_DOWN,
)

# --- the factory's own entry logs (issue 33): submissions, condor_submit failures, removals ---------


class RemovalReason(enum.StrEnum):
    """Why the factory removed glideins, as its entry log says (sources/factory_log.py): the only
    values the ``reason`` label of gwms_glideins_removed_total takes."""

    UNRECOVERABLE_HELD = "unrecoverable_held"  # held with a code the entry does not list as recoverable
    HELD = "held"  # recoverable held, removed with the excess when the frontend wants none
    STALE_IDLE = "stale_idle"  # idle longer than the entry's stale age (sanitizeGlideins)
    STALE_RUNNING = "stale_running"  # running longer than the entry's stale age
    EXCESS_IDLE = "excess_idle"  # idle at the CE or not yet sent to it: the frontend asked for fewer
    EXCESS_RUNNING = "excess_running"  # running: the frontend asked for fewer (RemoveExcess ALL)


GLIDEINS_SUBMITTED = MetricDef(
    "gwms_glideins_submitted_total",
    "counter",
    "Glideins the factory submitted, from its entry log's 'Submitted N glideins to <schedd>' lines, by the"
    " client whose request they served (the request's 'Checking downtime for frontend ...' line).",
    POOL,
)
SUBMIT_FAILURES = MetricDef(
    "gwms_entry_submit_failures_total",
    "counter",
    "condor_submit calls that failed at the entry (the entry log's ERROR 'condor_submit failed: ...'; the"
    " rest of that request is not submitted). The text is never a label: the exporter logs the newest,"
    " redacted, per entry.",
    ENTRY,
)
GLIDEIN_SUBMIT_EVENTS = MetricDef(
    "gwms_glidein_submit_events_total",
    "counter",
    "Glideins the factory's schedd accepted, from the 000 'Job submitted' events of the entry's event logs:"
    " the glideins of gwms_glideins_submitted_total as HTCondor counts them, per client (a glidein whose"
    " 000 is in no log read, a log cleaned or read from its middle, is not counted).",
    POOL,
)
GLIDEINS_REMOVED = MetricDef(
    "gwms_glideins_removed_total",
    "counter",
    "Glideins the factory set out to remove at the entry (its 'Removing N ...' and sanitize lines), by why.",
    (*ENTRY, "reason"),
)

# The exporter's own health.
LABEL_OVERFLOW = MetricDef(
    "gwms_obs_label_overflow_total",
    "counter",
    f"Pilots and entry updates whose label value was over the cardinality budget (pooled as {OVERFLOW!r}), by label.",
    ("label",),
)
PARSE_ERRORS = MetricDef(
    "gwms_obs_parse_errors_total",
    "counter",
    "Input skipped as unreadable, by source and reason.",
    ("source", "reason"),
)
RECORDS = MetricDef(
    "gwms_obs_records_total",
    "counter",
    "Records read, by source.",
    ("source",),
)
BYTES_READ = MetricDef(
    "gwms_obs_read_bytes_total",
    "counter",
    "Bytes read, by source.",
    ("source",),
    "bytes",
    "bytes",
)
FILES_TRACKED = MetricDef(
    "gwms_obs_files_tracked",
    "gauge",
    "Files the exporter follows, by source.",
    ("source",),
)
LAG = MetricDef(
    "gwms_obs_lag_seconds",
    "gauge",
    "Age of the oldest input not yet accounted, by source (0 when caught up; a young .out waiting to settle counts).",
    ("source",),
    "seconds",
    "s",
)
LAST_SCAN = MetricDef(
    "gwms_obs_last_scan_timestamp_seconds",
    "gauge",
    "When the last scan of the factory tree ended (the exporter's start until a first scan ends).",
    (),
    "seconds",
    "dateTimeAsIso",
)
SCAN_DURATION = MetricDef(
    "gwms_obs_scan_duration_seconds",
    "gauge",
    "How long the last scan took.",
    (),
    "seconds",
    "s",
)
DISCOVERY_FALLBACKS = MetricDef(
    "gwms_obs_discovery_fallbacks_total",
    "counter",
    "Times the exporter scanned the whole factory tree because its inotify watch could not be trusted, by"
    " reason: queue_overflow (events lost; one full scan, then watching again), watch_limit"
    " (fs.inotify.max_user_watches), remote_filesystem (NFS, CIFS, FUSE...: other hosts' writes raise no"
    ' event), unavailable (no inotify), configured (discovery = "scan"); the last four scan every interval.',
    ("reason",),
)

# The daemon's /metrics is served by a process of its own (outputs/serve.py): a scan never holds its GIL.
METRICS_SERVER_RESTARTS = MetricDef(
    "gwms_obs_metrics_server_restarts_total",
    "counter",
    "Times the exporter restarted the process serving its /metrics after it exited (each logged with its"
    " exit status); the listening socket stays the daemon's, so scrapes wait in its queue meanwhile.",
    (),
)

# The span-spool forwarder (tracing.outbox.SpoolForwarder), when the exporter forwards pilots' spans.
TRACE_SPOOLS = MetricDef(
    "gwms_obs_trace_spools_total",
    "counter",
    "Span spools pilots returned in their stderr, by what the forwarder did: accepted (queued), refused "
    "(invalid or not the glidein's), rejected (by the collector; kept in outbox/rejected), dropped "
    "(outbox over its bound, or too old).",
    ("result",),
)
TRACE_SPANS = MetricDef(
    "gwms_obs_trace_spans_total",
    "counter",
    "Spans of the pilots' spools: sent to the collector, unbound (dropped: not the glidein's trace, "
    "parent or resource), dropped (with their outbox file).",
    ("result",),
)
TRACE_REQUESTS = MetricDef(
    "gwms_obs_trace_requests_total",
    "counter",
    "OTLP requests the forwarder made to the collector: sent, or failed (a transient failure, retried).",
    ("result",),
)
TRACE_PACED = MetricDef(
    "gwms_obs_trace_paced_seconds_total",
    "counter",
    "Seconds the forwarder waited to stay under trace_spans_per_second: a rate near 1 means it sends at its "
    "limit all the time (a backfill, or a backlog after an outage, draining at the paced rate).",
    (),
    "seconds",
    "s",
    rate_unit="percentunit",  # seconds waited per second: the share of time paced
)

# Which gwms-obs is running, after the Prometheus convention of ``<name>_build_info``
# (value 1, the build in labels; Go programs say version/revision/branch/goversion).
BUILD_INFO = MetricDef(
    "gwms_obs_build_info",
    "gauge",
    "Always 1; the labels say which gwms-obs (version) runs on which Python (python_version).",
    ("version", "python_version"),
)

# The monitoring controller's own (gwms-obs controller, docs/controller.md): served by the
# controller, never by the exporter. Labels are bounded sets: the Verbosity levels, the rule
# kinds (with "default"), the policy's denial reasons and the change actions.
CONTROLLER_DECISIONS = MetricDef(
    "gwms_controller_decisions_total",
    "counter",
    "Decisions answered, by the verbosity granted and the kind of rule that decided (default: none matched).",
    ("verbosity", "kind"),
)
CONTROLLER_DENIALS = MetricDef(
    "gwms_controller_denials_total",
    "counter",
    "Changes refused (and audited), by reason: read_only, wrong_kind, out_of_scope, above_cap, invalid, not_found.",
    ("reason",),
)
CONTROLLER_CHANGES = MetricDef(
    "gwms_controller_changes_total",
    "counter",
    "Rules created, expired or deleted through the API or the web page, by action.",
    ("action",),
)
CONTROLLER_RULES = MetricDef(
    "gwms_controller_rules",
    "gauge",
    "Rules in force now, by kind (vo, site, operator, cap).",
    ("kind",),
)
CONTROLLER_EXPIRIES = MetricDef(
    "gwms_controller_rule_expiries_total",
    "counter",
    "Rules that reached their expiry while the controller ran, by kind.",
    ("kind",),
)
CONTROLLER_AUTH_FAILURES = MetricDef(
    "gwms_controller_auth_failures_total",
    "counter",
    "Requests refused for a missing or unknown bearer token.",
    (),
)
CONTROLLER_JAEGER = MetricDef(
    "gwms_controller_jaeger_requests_total",
    "counter",
    "The pilot pages' requests to Jaeger's query API, by outcome: ok, not_found, timeout (no whole answer "
    "within jaeger_timeout_seconds: a 504 page) or error (unreachable, an HTTP error, a bad answer: a 502 page).",
    ("outcome",),
)
CONTROLLER_METRICS: Final[tuple[MetricDef, ...]] = (
    CONTROLLER_DECISIONS,
    CONTROLLER_DENIALS,
    CONTROLLER_CHANGES,
    CONTROLLER_RULES,
    CONTROLLER_EXPIRIES,
    CONTROLLER_AUTH_FAILURES,
    CONTROLLER_JAEGER,
)

# --- GlideinWMS's RRD history with no meaning of ours (gwms-obs import-rrd, docs/migration.md) ---
# Imported, never served by `gwms-obs export`: the rates rrdtool stored for ABSOLUTE data
# sources (pilots per second in the step), kept under GlideinWMS's own bucket names.
LEGACY_WASTE_TIME = MetricDef(
    "gwms_legacy_completed_wastetime_rate",
    "gauge",
    "GlideinWMS Log_Completed_WasteTime RRD: completed glideins per second whose per-mille waste of the given "
    "kind (validation, idle, nosuccess, badput) fell in the given range, as rrdtool averaged it.",
    (*POOL, "kind", "range"),
)
LEGACY_COMPLETED_STATS = MetricDef(
    "gwms_legacy_completed_stats_rate",
    "gauge",
    "GlideinWMS Log_Completed_Stats RRD: completed glideins per second by its Lasted_, JobsLasted_ and JobsNr_ "
    "buckets (stat = the data source name), as rrdtool averaged it.",
    (*POOL, "stat"),
)
LEGACY_COMPLETED = MetricDef(
    "gwms_legacy_completed_rate",
    "gauge",
    "GlideinWMS Log_Completed RRD: its per-cycle sums of the glideins that completed, per second as rrdtool "
    "averaged them (stat = the data source name: Glideins, FailedNr, JobsNr and JobsTerminated count, Lasted, "
    "CondorLasted, JobsLasted and JobsGoodput are seconds of wall time).",
    (*POOL, "stat"),
)
LEGACY_LOG_GLIDEINS = MetricDef(
    "gwms_legacy_log_counts_glideins",
    "gauge",
    "GlideinWMS Log_Counts RRD: glideins in each state as the factory's glidein logs said (state = Running, "
    "Idle, Wait, Held as GlideinWMS names them), as rrdtool averaged it.",
    (*POOL, "state"),
)
LEGACY_LOG_TRANSITIONS = MetricDef(
    "gwms_legacy_log_counts_rate",
    "gauge",
    "GlideinWMS Log_Counts RRD: glideins per second entering or leaving each state by the factory's glidein "
    "logs (transition = Entered, Exited; Exited negative, as GlideinWMS stores it), as rrdtool averaged it.",
    (*POOL, "transition", "state"),
)
LEGACY_STATUS_GLIDEINS = MetricDef(
    "gwms_legacy_status_glideins",
    "gauge",
    "GlideinWMS Status_Attributes RRD, the glidein counts with no series of ours (attribute = the data source: "
    "StatusIdle, the sum of the idle states; ClientGlideTotal, the frontend's count of the entry's glideins in "
    "its pool), as rrdtool averaged it.",
    (*POOL, "attribute"),
)
LEGACY_STATUS_CORES = MetricDef(
    "gwms_legacy_status_cores",
    "gauge",
    "GlideinWMS Status_Attributes RRD, the core counts with no series of ours (attribute = the data source: "
    "StatusRunningCores, ReqIdleCores and ReqMaxCores, the factory's glidein counts times the entry's "
    "GLIDEIN_CPUS; ClientCoresTotal, the frontend's count), as rrdtool averaged it.",
    (*POOL, "attribute"),
)
LEGACY_METRICS: Final[tuple[MetricDef, ...]] = (
    LEGACY_WASTE_TIME,
    LEGACY_COMPLETED_STATS,
    LEGACY_COMPLETED,
    LEGACY_LOG_GLIDEINS,
    LEGACY_LOG_TRANSITIONS,
    LEGACY_STATUS_GLIDEINS,
    LEGACY_STATUS_CORES,
)
# What import-rrd brings from GlideinWMS's Status_Attributes RRDs (the factory's and the
# frontend's) under our own names: the panels drawing only these show the pages' history before
# the cutover (dashboards/gen/board.py).
RRD_IMPORTED: Final[tuple[MetricDef, ...]] = (
    ENTRY_GLIDEINS,
    ENTRY_REQUESTED,
    ENTRY_USER_JOBS,
    ENTRY_VO_GLIDEINS,
    ENTRY_VO_CORES,
    ENTRY_INFO_AGE,
    FRONTEND_JOBS,
    FRONTEND_GLIDEINS,
    FRONTEND_UNMATCHED_JOBS,
    FRONTEND_ENTRY_JOBS,
    FRONTEND_ENTRY_GLIDEINS,
    FRONTEND_ENTRY_CORES,
    FRONTEND_ENTRY_REQUESTED,
)

ALL: tuple[MetricDef, ...] = tuple(v for v in list(globals().values()) if isinstance(v, MetricDef))
# What `gwms-obs export` serves (the controller's are served by `gwms-obs controller`).
EXPORTER_METRICS: tuple[MetricDef, ...] = tuple(m for m in ALL if m not in CONTROLLER_METRICS + LEGACY_METRICS)
BY_NAME: dict[str, MetricDef] = {m.name: m for m in ALL}


class Source(enum.StrEnum):
    """Input kinds, the ``source`` label of the health metrics."""

    GLIDEIN_OUT = "glidein_out"
    GLIDEIN_ERR = "glidein_err"
    COMPLETED_JOBS = "completed_jobs"
    CONDOR_EVENT_LOG = "condor_event_log"
    SCHEDD_STATUS = "schedd_status"
    DESCRIPT = "descript"
    TRACE_SPOOL = "trace_spool"
    FACTORY_LOG = "factory_log"  # the entry processes' own logs: submissions, removals
    RRD = "rrd"  # gwms-obs import-rrd
    FRONTEND_STATUS = "frontend_status"  # the VO frontend's monitor dir, on the frontend host


# Inputs a one-shot command reads, not a scan: no stage, no simulator writer (import-rrd's
# fixtures are written by GlideinWMS's own RRD writers, tools/glideinwms_rrd_fixtures.py).
ONE_SHOT_SOURCES: Final[frozenset[Source]] = frozenset({Source.RRD})
SCANNED_SOURCES: Final[tuple[Source, ...]] = tuple(s for s in Source if s not in ONE_SHOT_SOURCES)


def exposition_names(m: MetricDef) -> tuple[str, ...]:
    """Every series name a metric produces in the text exposition."""
    if m.type == "histogram":
        return (f"{m.name}_bucket", f"{m.name}_sum", f"{m.name}_count")
    return (m.name,)


# --- metrics the OpenTelemetry Collector produces ------------------------------------------------
# Not ours to emit, but the dashboards and alert rules select them, so their
# names are spelled here too. The spanmetrics connector's histogram, after the
# prometheus_remote_write exporter's default translation
# (UnderscoreEscapingWithSuffixes): OTel ``traces.span.metrics.duration`` with
# unit ``s`` -> ``traces_span_metrics_duration_seconds`` (a classic histogram),
# attribute ``gwms.entry`` -> label ``gwms_entry``. A live test checks them
# against a real Prometheus.
SPANMETRICS_DURATION: Final = "traces_span_metrics_duration_seconds"  # histogram (base name)
SPANMETRICS_DURATION_BUCKET: Final = SPANMETRICS_DURATION + "_bucket"
SPANMETRICS_DURATION_SUM: Final = SPANMETRICS_DURATION + "_sum"
SPANMETRICS_DURATION_COUNT: Final = SPANMETRICS_DURATION + "_count"
SPANMETRICS_CALLS: Final = "traces_span_metrics_calls_total"  # counter: spans per dimension set


def prom_label(attribute: str) -> str:
    """The Prometheus label an OTel attribute becomes (``gwms.entry`` -> ``gwms_entry``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", attribute)


# Labels on both spanmetrics series besides the dimensions: service_name,
# span_name, span_kind, status_code (STATUS_CODE_ERROR on failed phases/scripts).
SPAN_LABEL_SERVICE: Final = "service_name"
SPAN_LABEL_SPAN_NAME: Final = "span_name"
SPAN_LABEL_STATUS: Final = "status_code"
# The pilot's factory (its resource's gwms.factory): the name the exporter's series carry as
# FACTORY_LABEL. A remote-written series cannot be relabelled on its way in, so the span
# metrics keep the dimension's own label; the boards select it with the same factory variable.
SPAN_LABEL_FACTORY: Final = prom_label(C.FACTORY)
SPAN_LABEL_ENTRY: Final = prom_label(C.ENTRY)
SPAN_LABEL_CLIENT: Final = prom_label(C.CLIENT)
SPAN_LABEL_SITE: Final = prom_label(C.SITE)
SPAN_LABEL_PHASE: Final = prom_label(C.PHASE)

# The collector must run with these (the spanmetrics resource would otherwise
# carry the first pilot's resource attributes); the systemd unit passes them too.
FEATURE_GATES: Final = ("connector.spanmetrics.excludeResourceMetrics",)

# Telemetry of the collector itself (its Prometheus endpoint), used to prove "no drops".
# Counters as this release exposes them (no _total suffix); metric_sum() also accepts _total.
OTELCOL_ACCEPTED_SPANS: Final = "otelcol_receiver_accepted_spans"
OTELCOL_REFUSED_SPANS: Final = "otelcol_receiver_refused_spans"
OTELCOL_SENT_SPANS: Final = "otelcol_exporter_sent_spans"
OTELCOL_SEND_FAILED_SPANS: Final = "otelcol_exporter_send_failed_spans"
OTELCOL_ENQUEUE_FAILED_SPANS: Final = "otelcol_exporter_enqueue_failed_spans"
OTELCOL_QUEUE_SIZE: Final = "otelcol_exporter_queue_size"
JAEGER_EXPORTER: Final = "otlp_grpc/jaeger"

# --- metrics prometheus_client's default collectors produce ---------------------------------------
# /metrics of `gwms-obs export` also serves the process and Python runtime metrics every
# Python exporter has (ProcessCollector, PlatformCollector, GCCollector). Not ours (their
# names, help and labels are prometheus_client's), but dashboards may select them, so their
# series names are spelled here. ProcessCollector needs /proc (Linux); python_gc_* are CPython's.
PROCESS_CPU_SECONDS: Final = "process_cpu_seconds_total"  # counter: user + system CPU seconds
PROCESS_RESIDENT_MEMORY: Final = "process_resident_memory_bytes"  # gauge
PROCESS_VIRTUAL_MEMORY: Final = "process_virtual_memory_bytes"  # gauge
PROCESS_START_TIME: Final = "process_start_time_seconds"  # gauge: Unix time the process started
PROCESS_OPEN_FDS: Final = "process_open_fds"  # gauge
PROCESS_MAX_FDS: Final = "process_max_fds"  # gauge: the soft RLIMIT_NOFILE
PYTHON_INFO: Final = "python_info"  # gauge 1, labels implementation, major, minor, patchlevel, version
PYTHON_GC_OBJECTS_COLLECTED: Final = "python_gc_objects_collected_total"  # counter, label generation
PYTHON_GC_OBJECTS_UNCOLLECTABLE: Final = "python_gc_objects_uncollectable_total"  # counter, label generation
PYTHON_GC_COLLECTIONS: Final = "python_gc_collections_total"  # counter, label generation
RUNTIME_NAMES: Final = (
    PROCESS_CPU_SECONDS,
    PROCESS_RESIDENT_MEMORY,
    PROCESS_VIRTUAL_MEMORY,
    PROCESS_START_TIME,
    PROCESS_OPEN_FDS,
    PROCESS_MAX_FDS,
    PYTHON_INFO,
    PYTHON_GC_OBJECTS_COLLECTED,
    PYTHON_GC_OBJECTS_UNCOLLECTABLE,
    PYTHON_GC_COLLECTIONS,
)
