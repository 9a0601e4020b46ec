"""Pilot tracing conventions v1: the one place that spells span and attribute names.

The factory tracer (``tracing.factory``), the spool validator
(``tracing.spool``), ``gwms-obs traces``, the simulator, the collector's
spanmetrics dimensions and the dashboards import these names; the shell
library ``pilot/gwms-trace.sh`` spells the same strings (a test checks they
agree). docs/tracing.md explains them. OpenTelemetry semantic conventions are
used where one exists; everything GlideinWMS-specific is under ``gwms.``.
"""

from __future__ import annotations

import re
from typing import Final

VERSION: Final = "1"  # bump when a name below changes meaning; gwms.conventions carries it

# --- W3C trace context -----------------------------------------------------------------------
ENV_TRACEPARENT: Final = "TRACEPARENT"  # in the glidein's environment (as jobsub_lite does)
CLASSAD_TRACEPARENT: Final = "TraceParent"  # job ClassAd attribute in the submit description
# The pilot's own span context, exported for the user payload: payload spans
# *link* to it (they keep the TRACEPARENT their own submitter gave them).
ENV_PILOT_TRACEPARENT: Final = "GWMS_PILOT_TRACEPARENT"
# Factory → condor_submit environment: one traceparent per glidein, comma
# separated, picked per job by $CHOICE(Process, ...) in the submit file.
ENV_TRACEPARENT_LIST: Final = "GLIDEIN_TRACEPARENTS"
# W3C tracestate travels with traceparent: in the glidein's environment next to TRACEPARENT
# (gwms-trace.sh passes it on unchanged), from the factory's condor_submit environment (one
# value per cluster: every glidein of a cluster is in the factory's one trace).
ENV_TRACESTATE: Final = "TRACESTATE"
ENV_TRACESTATE_CLUSTER: Final = "GLIDEIN_TRACESTATE"
ENV_RESOURCE_ATTRIBUTES: Final = "OTEL_RESOURCE_ATTRIBUTES"
ENV_TOKEN: Final = "GWMS_TRACE_TOKEN"  # bearer token a pilot sends to the collector

# --- services (resource service.name) ---------------------------------------------------------
SERVICE_FACTORY: Final = "gwms-factory"
SERVICE_PILOT: Final = "glidein"

# --- resource and span attributes: OpenTelemetry semantic conventions ----------------------
SERVICE_NAME: Final = "service.name"
SERVICE_VERSION: Final = "service.version"
SERVICE_INSTANCE_ID: Final = "service.instance.id"
HOST_NAME: Final = "host.name"
PROCESS_PID: Final = "process.pid"
PROCESS_EXIT_CODE: Final = "process.exit.code"
ERROR_TYPE: Final = "error.type"

# --- ours -----------------------------------------------------------------------------------
CONVENTIONS: Final = "gwms.conventions"  # resource: VERSION
FACTORY: Final = "gwms.factory"  # factory name (glidein_factory)
GLIDEIN_NAME: Final = "gwms.glidein.name"  # factory instance (glidein_name, e.g. gfactory_instance)
ENTRY: Final = "gwms.entry"
CLIENT: Final = "gwms.client"  # the frontend client name (client_name)
FRONTEND: Final = "gwms.frontend"  # frontend name (GLIDEIN_FRONTEND_NAME)
SITE: Final = "gwms.site"
GLIDEIN_UUID: Final = "gwms.glidein.uuid"
CONDOR_CLUSTER: Final = "gwms.condor.cluster"
CONDOR_PROC: Final = "gwms.condor.proc"
CONDOR_SCHEDD: Final = "gwms.condor.schedd"
GLIDEIN_COUNT: Final = "gwms.glidein.count"  # glideins in one submit cluster
SUBMIT_FILE: Final = "gwms.submit.file"
PHASE: Final = "gwms.phase"
SCRIPT: Final = "gwms.script"
# Set on the pilot's root span when TRACEPARENT was unusable and a new trace began.
PARENT_INVALID: Final = "gwms.trace.parent_invalid"
PARENT_RECEIVED: Final = "gwms.trace.parent_received"  # the rejected value, cut to 64 printable chars
DROPPED_SPANS: Final = "gwms.trace.dropped_spans"  # spans the pilot did not spool (span cap)
UNFINISHED: Final = "gwms.trace.unfinished"  # span still open when the pilot flushed
PROCESS_EXECUTABLE_NAME: Final = "process.executable.name"  # a script span's command, name only
PROCESS_COMMAND_LINE: Final = "process.command_line"  # its whole (masked) command line, when the controller allows
SECURITY_CLASS: Final = "gwms.security_class"  # the frontend's security class (factory: asks the controller)

# --- the monitoring controller (controller/, docs/tracing.md "Monitoring controller") -------------
TRACE_VERBOSITY: Final = "gwms.trace.verbosity"  # pilot root: the verbosity applied (off|phases|scripts|commands)
CONTROLLER_RESULT: Final = "gwms.controller.result"  # one of CONTROLLER_RESULTS
CONTROLLER_KIND: Final = "gwms.controller.kind"  # the deciding rule's kind: default|vo|site|operator
CONTROLLER_RULE: Final = "gwms.controller.rule"  # int: the deciding rule's id (absent: the default decided)
CONTROLLER_RESULTS: Final = ("answered", "timeout", "error", "unconfigured")
# The pilot's settings (gwms-trace.sh) and the factory's (tracing.factory); URLs are the controller's base.
ENV_VERBOSITY: Final = "GWMS_TRACE_VERBOSITY"  # the factory's default verbosity for its pilots
ENV_PILOT_CONTROLLER_URL: Final = "GWMS_TRACE_CONTROLLER_URL"
ENV_PILOT_CONTROLLER_TIMEOUT: Final = "GWMS_TRACE_CONTROLLER_TIMEOUT"
ENV_PILOT_CONTROLLER_TOKEN: Final = "GWMS_TRACE_CONTROLLER_TOKEN"
ENV_PILOT_CONTROLLER_TOKEN_FILE: Final = "GWMS_TRACE_CONTROLLER_TOKEN_FILE"
ENV_FACTORY_CONTROLLER_URL: Final = "GWMS_OBS_CONTROLLER_URL"
ENV_FACTORY_CONTROLLER_TOKEN_FILE: Final = "GWMS_OBS_CONTROLLER_TOKEN_FILE"

# spanmetrics dimensions of the collector (phase-duration histograms per factory and entry; the
# connector reads each from the span's attributes, else its resource's, where the factory is).
SPANMETRICS_DIMENSIONS: Final = (FACTORY, ENTRY, CLIENT, SITE, PHASE)

# The span spool a pilot returns in its stderr: a condor section of this name
# (pilot/gwms-trace.sh writes it, sources/glidein_err.py reads it), at most this
# many bytes once decoded (the reader refuses more; tracing/spool.py takes no more).
SPOOL_SECTION: Final = "GWMSTraceSpool"
SPOOL_MAX_BYTES: Final = 16 << 20

# --- span names -------------------------------------------------------------------------------
SPAN_SUBMIT: Final = "condor_submit"  # factory: one per submit cluster (kind CLIENT)
SPAN_GLIDEIN_SUBMIT: Final = "glidein submit"  # factory: one per glidein, child of the cluster (PRODUCER)
SPAN_PILOT: Final = "glidein"  # pilot root, child of its glidein submit span (CONSUMER)
# Phases of glidein_startup.sh (formats doc §6.3), children of the pilot root;
# the names of the tracer2022 prototype where it had one.
PHASE_INIT: Final = "init"  # arguments, environment, work dir, glidein_config (§6.3 steps 1-8)
PHASE_PRE_SETUP: Final = "pre_setup"  # descriptors and signatures fetched and verified (step 9)
PHASE_SETUP: Final = "setup"  # file lists: downloads and validation scripts (step 10)
PHASE_MAIN: Final = "main"  # condor_startup.sh (step 11)
PHASE_CLEANUP: Final = "cleanup"  # glidein_exit: cleanup scripts, XML, failure sleep (step 12)
PHASES: Final = (PHASE_INIT, PHASE_PRE_SETUP, PHASE_SETUP, PHASE_MAIN, PHASE_CLEANUP)
# A validation/setup script span is named after the script (e.g. "main/setup_x509.sh"),
# carries SCRIPT with the same value, and is a child of the phase it runs in.

# Phases of a pilot's trace built from the factory's own files (outputs/pilot_traces.py), for a
# factory without the tracer above. Their own names, not the tracer's: "validation" is the .out's
# start to "Last script starting" (init + pre_setup + setup together, which the logs cannot tell
# apart), "condor" is HTCondor's start to end (the part of main after condor_startup.sh's own
# checks), and "queued"/"held" happen before any pilot code runs. Only cleanup means the same
# interval in both (glidein_exit), so it keeps the one name. Each carries PHASE = its name, as
# the tracer's phase spans do; a trace holding both (a live pilot's, with the logs merged in)
# keeps the tracer's phases and takes queued/held from the logs, so no interval is named twice.
LOG_PHASE_QUEUED: Final = "queued"  # the factory's submit to the CE's first execute (event log)
LOG_PHASE_HELD: Final = "held"  # a hold interval inside queued
LOG_PHASE_VALIDATION: Final = "validation"  # start on the worker node to "Last script starting"
LOG_PHASE_CONDOR: Final = "condor"  # HTCondor's start to end (the user jobs run inside)
LOG_PHASES: Final = (LOG_PHASE_QUEUED, LOG_PHASE_HELD, LOG_PHASE_VALIDATION, LOG_PHASE_CONDOR, PHASE_CLEANUP)
# Every gwms.phase value a pilot's trace may carry: the collector's allowed spanmetrics values
# (otel_collector_spanmetrics_phases; a test checks), the dashboards' and rules' phase selector.
ALL_PHASES: Final = PHASES + tuple(p for p in LOG_PHASES if p not in PHASES)
# Phases whose length is overhead, the phase_slow rule's: not main/condor (as long as the
# entry's walltime and its payload make them, so a longer-lived entry is no slower one) and not
# held (GwmsPilotsHeld and pilots_held watch holds).
OVERHEAD_PHASES: Final = (
    PHASE_INIT,
    PHASE_PRE_SETUP,
    PHASE_SETUP,
    PHASE_CLEANUP,
    LOG_PHASE_QUEUED,
    LOG_PHASE_VALIDATION,
)

# Attributes of a pilot's trace built from the factory's files: outputs/pilot_traces.py writes
# them, the controller's pilot pages read them (the controller imports nothing of the exporter).
LOG_TRACE_SOURCE: Final = "gwms.trace.source"  # resource: the sources that built the trace, "+"-joined
LOG_OUTCOME: Final = "gwms.pilot.outcome"  # root: catalogue.Outcome
LOG_CPU_SECONDS: Final = "gwms.cpu_seconds."  # root, + category: the pilot's canonical CPU unit-seconds
LOG_GPU_SECONDS: Final = "gwms.gpu_seconds."  # root, + category: GPU-seconds
LOG_ACCURACY: Final = "gwms.accounting.accuracy"  # root: how those seconds were measured (catalogue.Accuracy)
LOG_JOB_ID: Final = "gwms.job.id"  # the job's GlobalJobId on the VO schedd (never its owner)
LOG_JOB_CATEGORY: Final = "gwms.job.category"
LOG_JOB_CPUS: Final = "gwms.job.cpus"  # requested (the slot's cores)
LOG_JOB_CPU_SECONDS: Final = "gwms.job.cpu_seconds"  # cores × its time inside HTCondor's life
LOG_JOB_CPU_USED: Final = "gwms.job.cpu_used_seconds"  # RemoteUserCpu + RemoteSysCpu
LOG_JOB_MEMORY: Final = "gwms.job.memory_mb"  # requested
LOG_JOB_MEMORY_USED: Final = "gwms.job.memory_used_mb"
LOG_JOB_GPUS: Final = "gwms.job.gpus"
LOG_JOB_SIGNAL: Final = "gwms.job.exit_signal"
LOG_JOB_COUNT: Final = "gwms.job.count"  # the summary span of the jobs beyond the cap
LOG_HOLD_REASON: Final = "gwms.hold.reason"
LOG_FAILED_TEST: Final = "gwms.validation.test"
LOG_FAILURE: Final = "gwms.validation.failure"
LOG_FAILURE_DETAIL: Final = "gwms.validation.detail"
LOG_HOLD_CODE: Final = "gwms.hold.code"  # HoldReasonCode
LOG_HOLD_SUBCODE: Final = "gwms.hold.subcode"  # HoldReasonSubCode
LOG_HOLD_CLASS: Final = "gwms.hold.class"  # sources/hold_reasons.py HoldClass
LOG_HOLDS_DROPPED: Final = "gwms.hold.dropped"  # holds beyond the event log's bound: counted only

# OTLP enums (opentelemetry-proto trace.proto), as they appear in OTLP/JSON.
KIND_INTERNAL: Final = 1
KIND_SERVER: Final = 2
KIND_CLIENT: Final = 3
KIND_PRODUCER: Final = 4
KIND_CONSUMER: Final = 5
STATUS_UNSET: Final = 0
STATUS_OK: Final = 1
STATUS_ERROR: Final = 2

# --- traceparent --------------------------------------------------------------------------------
TRACE_ID_HEX: Final = 32
SPAN_ID_HEX: Final = 16


# --- tracestate (W3C Trace Context, "tracestate Header") ---------------------------------------
TRACESTATE_MAX_MEMBERS: Final = 32
TRACESTATE_MAX_CHARS: Final = 512  # what a vendor SHOULD propagate; we propagate no more
_TS_KEY = re.compile(r"[a-z][a-z0-9_*/-]{0,255}|[a-z0-9][a-z0-9_*/-]{0,240}@[a-z][a-z0-9_*/-]{0,13}")
_TS_VALUE = re.compile(r"[ -+\--<>-~]{0,255}[!-+\--<>-~]")


def is_tracestate(value: object) -> bool:
    """Whether ``value`` is a W3C tracestate list we propagate (gwms-trace.sh applies the same rules).

    List members ``key=value`` separated by commas, optional spaces and tabs
    around them, empty members allowed; keys simple (``a-z`` first) or
    ``tenant@system``; values 1-256 printable ASCII characters without ``,``
    and ``=``, no trailing space; each key once; at most 32 members and 512
    characters. A list with no member at all is not one.
    """
    if not isinstance(value, str) or not value or len(value) > TRACESTATE_MAX_CHARS:
        return False
    keys: set[str] = set()
    for member in value.split(","):
        m = member.strip(" \t")
        if not m:
            continue
        k, eq, v = m.partition("=")
        if not eq or not _TS_KEY.fullmatch(k) or not _TS_VALUE.fullmatch(v) or k in keys:
            return False
        keys.add(k)
    return 0 < len(keys) <= TRACESTATE_MAX_MEMBERS


def is_trace_id(s: object) -> bool:
    return isinstance(s, str) and len(s) == TRACE_ID_HEX and _is_hex(s) and s.strip("0") != ""


def is_span_id(s: object) -> bool:
    return isinstance(s, str) and len(s) == SPAN_ID_HEX and _is_hex(s) and s.strip("0") != ""


def _is_hex(s: str) -> bool:
    # OTLP/JSON ids are hex; case-insensitive on input.
    return all(c in "0123456789abcdefABCDEF" for c in s)


def resource_attributes_env(attrs: dict[str, str]) -> str:
    """``OTEL_RESOURCE_ATTRIBUTES`` text: ``k=v`` pairs, comma separated, values %-encoded.

    The OpenTelemetry spec (W3C Baggage octets) asks for percent-encoding of
    anything outside the safe set; gwms-trace.sh decodes the same way.
    """
    from urllib.parse import quote

    return ",".join(f"{k}={quote(v, safe='')}" for k, v in attrs.items() if v)
