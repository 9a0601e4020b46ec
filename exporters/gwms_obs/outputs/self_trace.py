"""The exporter's own scans as spans of its own service, so a slow scan can be seen in Jaeger.

The SDK is configured from the standard OTEL_* variables by opentelemetry-distro's
configurator (the one ``opentelemetry-instrument`` runs), and only when they ask for
traces: ``OTEL_TRACES_EXPORTER`` other than ``none``, or an OTLP traces endpoint.
Spans leave through the SDK's BatchSpanProcessor, so ending one only queues it: a
collector that is slow or away never holds a scan (a full queue drops spans).

Each scan is a ``scan`` span (pilots counted, files read, parse errors, the sources that
failed) with a child per step of each source (``glidein_out read``, ``condor_event_log
discover``...), which ingest's pipeline opens on the current tracer provider.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

from .. import __version__
from ..catalogue import Source

if TYPE_CHECKING:
    from ..ingest.books import ScanResult
    from ..pipeline import Ingest

log = logging.getLogger("gwms_obs.outputs.self_trace")

SERVICE: Final = "gwms-obs-exporter"  # only a default: OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES win
SCOPE: Final = "gwms_obs"
SPAN_SCAN: Final = "scan"
PILOTS: Final = "gwms.scan.pilots"  # + "." + source: pilots counted by that source
FILES_READ: Final = "gwms.scan.files_read"  # pilots' .out and .err files read
RECORDS: Final = "gwms.scan.records."  # + source: records (files, lines, events) read
BYTES_READ: Final = "gwms.scan.bytes_read"
ERRORS: Final = "gwms.scan.errors"  # parse errors counted during the scan
FAILED: Final = "gwms.scan.failed"  # the sources whose step raised, comma-separated
_PILOT_FILES: Final = (Source.GLIDEIN_OUT.value, Source.GLIDEIN_ERR.value)
_PROTOCOL_VARS: Final = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
_HEADER_VARS: Final = ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS")


def wanted(env: Mapping[str, str] | None = None) -> bool:
    """Whether the OTEL_* variables ask for traces: an exporter other than none, or an OTLP endpoint."""
    env = os.environ if env is None else env
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return exporter != "none"
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"))


def configure(token: str | None = None) -> TracerProvider | None:
    """Configure the SDK through opentelemetry-distro when the OTEL_* variables ask for traces.

    Returns the provider (the caller shuts it down, flushing what is queued), or None:
    not asked, or already configured (by ``opentelemetry-instrument``: that provider is
    used as it is, and shut down by the SDK at exit). ``token``: the exporter's own
    credential for the collector, sent as the span forwarder sends it, unless
    OTEL_EXPORTER_OTLP_(TRACES_)HEADERS already carry one.
    """
    if isinstance(trace.get_tracer_provider(), TracerProvider):
        log.info("own spans: the tracer provider opentelemetry-instrument configured")
        return None
    if not wanted():
        return None
    from opentelemetry.distro import OpenTelemetryConfigurator
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # The distro's defaults, but OTLP over HTTP: the only OTLP exporter this package installs
    # (the distro would pick gRPC), and the protocol the span forwarder speaks.
    os.environ.setdefault("OTEL_TRACES_EXPORTER", "otlp")
    if not any(os.environ.get(v) for v in _PROTOCOL_VARS):
        os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
    attrs: dict[str, Any] = {"service.version": __version__}
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attrs["service.name"] = SERVICE
    args: dict[Any, dict[str, Any]] = {}
    if token and not any("authorization=" in os.environ.get(v, "").lower() for v in _HEADER_VARS):
        args[OTLPSpanExporter] = {"headers": {"Authorization": f"Bearer {token}"}}
    try:
        configurator = OpenTelemetryConfigurator()  # type: ignore[no-untyped-call]
        configurator.configure(resource_attributes=attrs, exporter_args_map=args)  # type: ignore[no-untyped-call]
    except Exception as e:  # a wrong OTEL_* value must not stop the exporter: it runs untraced
        log.error("own spans off: the OTEL_* variables do not configure the SDK: %s: %s", type(e).__name__, e)
        return None
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        return None
    log.info("own spans: service %s, from the OTEL_* variables", provider.resource.attributes.get("service.name"))
    return provider


class _Counts:
    def __init__(self, ingest: Ingest) -> None:
        h = ingest.health
        with ingest.lock:
            self.records = dict(h.records)
            self.bytes = sum(h.bytes_read.values())
        self.errors = ingest.errors.total()


@contextlib.contextmanager
def scan_span(ingest: Ingest) -> Iterator[ScanResultSink]:
    """A ``scan`` span around one scan, current while it runs (the pipeline's steps nest in it)."""
    tracer = trace.get_tracer(SCOPE, __version__)
    before = _Counts(ingest)
    sink = ScanResultSink()
    with tracer.start_as_current_span(SPAN_SCAN, record_exception=True) as span:
        yield sink
        if not span.is_recording():
            return
        after = _Counts(ingest)
        records = {s: n - before.records.get(s, 0) for s, n in after.records.items()}
        attrs: dict[str, Any] = {
            FILES_READ: sum(records.get(s, 0) for s in _PILOT_FILES),
            BYTES_READ: after.bytes - before.bytes,
            ERRORS: after.errors - before.errors,
            **{RECORDS + s: n for s, n in records.items() if n},
        }
        res = sink.result
        if res is not None:
            attrs[PILOTS] = res.pilots
            attrs.update((f"{PILOTS}.{s}", n) for s, n in res.by_source.items())
            if res.failed:
                attrs[FAILED] = ",".join(res.failed)
                span.set_status(Status(StatusCode.ERROR, f"failed: {attrs[FAILED]}"))
        span.set_attributes(attrs)


class ScanResultSink:
    """Where the caller puts the scan's result, for the span's attributes."""

    result: ScanResult | None = None
