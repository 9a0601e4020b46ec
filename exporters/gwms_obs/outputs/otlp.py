"""Push the same metrics over OTLP/HTTP, configured by the standard OTEL_* variables.

The observations come from :class:`FactoryCollector`, so OTLP and /metrics
can never disagree. Counters are exported without ``_total`` and with unit
``s`` where the catalogue says seconds: the OpenTelemetry→Prometheus
translation adds the suffixes back, giving the catalogue's names.
Histograms are served on /metrics only: OpenTelemetry has no asynchronous
histogram instrument to report the ledger's cumulative buckets with, so
:func:`start_otlp` says so in a warning naming each one, rather than leaving
them out in silence.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from .. import __version__, catalogue
from .prometheus import FactoryCollector

if TYPE_CHECKING:
    from ..pipeline import Ingest

log = logging.getLogger("gwms_obs.outputs.otlp")


def otlp_configured() -> bool:
    return bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"))


class _Snapshot:
    """One collect() shared by all callbacks of an export cycle."""

    def __init__(self, collector: FactoryCollector, ttl: float = 1.0) -> None:
        self.collector = collector
        self.ttl = ttl
        self._at = -1e18
        self._samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        self._lock = threading.Lock()

    def samples(self, name: str) -> list[tuple[dict[str, str], float]]:
        with self._lock:
            now = time.monotonic()
            if now - self._at > self.ttl:
                self._samples = {}
                for fam in self.collector.collect():
                    for s in fam.samples:
                        self._samples.setdefault(s.name, []).append((dict(s.labels), s.value))
                self._at = now
            return self._samples.get(name, [])


def start_otlp(ingest: Ingest, service_name: str = "gwms-obs-exporter") -> MeterProvider:
    """Start exporting; the caller shuts the returned provider down on exit."""
    snap = _Snapshot(FactoryCollector(ingest))
    # Our name is only the default: OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES win.
    attrs = {"service.version": __version__}
    if not os.environ.get("OTEL_SERVICE_NAME") and "service.name=" not in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    ):
        attrs["service.name"] = service_name
    resource = Resource.create(attrs)
    reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    provider = MeterProvider(resource=resource, metric_readers=[reader])
    meter = provider.get_meter("gwms_obs", __version__)
    if hists := [m.name for m in catalogue.EXPORTER_METRICS if m.type == "histogram"]:
        log.warning(
            "OTLP carries no histogram (OpenTelemetry has no asynchronous one); on /metrics only: %s",
            ", ".join(hists),
        )
    for m in catalogue.EXPORTER_METRICS:
        if m.type == "histogram":
            continue
        unit = {"seconds": "s", "bytes": "By"}.get(m.unit, "")  # "1" would gain a _ratio suffix

        def callback(_: CallbackOptions, name: str = m.name) -> Iterable[Observation]:
            return [Observation(v, attrs) for attrs, v in snap.samples(name)]

        if m.type == "counter":
            meter.create_observable_counter(m.base, [callback], unit=unit, description=m.help)
        else:
            meter.create_observable_gauge(m.name, [callback], unit=unit, description=m.help)
    return provider
