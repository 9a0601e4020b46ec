"""Serve the ledger as Prometheus metrics: a custom collector over catalogue.py.

Nothing is kept in prometheus_client objects: each scrape reads the ledger
under the ingest lock and builds metric families from the catalogue's
definitions, so names, help, units and labels come from one place.

The pilot histograms carry exemplars when the exporter builds pilot traces:
each bucket's last pilot, labelled with its trace id
(``catalogue.EXEMPLAR_TRACE_ID``, the id of outputs/pilot_traces.py). Only
the OpenMetrics exposition carries them; prometheus_client's WSGI app
chooses it from the scraper's Accept header.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Exemplar

from .. import __version__, catalogue
from ..accounting import ledger as L
from ..accounting.ledger import Histogram, Labels, bottleneck
from .pilot_traces import pilot_trace_id

if TYPE_CHECKING:
    from ..pipeline import Ingest
    from ..tracing.outbox import ForwarderStats

# schedd_status attribute -> label value; Idle is the sum of the first four and is left out.
STATUS_STATES = {
    "Wait": "wait",
    "Pending": "pending",
    "StageIn": "stagein",
    "IdleOther": "idleother",
    "Running": "running",
    "StageOut": "stageout",
    "Held": "held",
}
REQUESTED_KINDS = {"Idle": "idle", "AdjustedIdle": "adjusted_idle", "MaxGlideins": "max_running"}
USER_JOB_STATES = {"JobsIdle": "idle", "JobsRunning": "running", "JobsRunHere": "running_here"}
VO_GLIDEIN_STATES = {"GlideIdle": "idle", "GlideRunning": "running"}
VO_CORE_STATES = {"CoresIdle": "idle", "CoresRunning": "running"}


# The per-entry gauges, built from the ledger's entry status (FactoryCollector._entries).
ENTRY_GAUGES: tuple[catalogue.MetricDef, ...] = (
    catalogue.ENTRY_GLIDEINS,
    catalogue.ENTRY_REQUESTED,
    catalogue.ENTRY_USER_JOBS,
    catalogue.ENTRY_VO_GLIDEINS,
    catalogue.ENTRY_VO_CORES,
    catalogue.ENTRY_INFO_AGE,
    catalogue.ENTRY_DOWNTIME,
    catalogue.ENTRY_UPDATED,
    catalogue.ENTRY_BOTTLENECK,
    catalogue.ENTRY_INSUFFICIENT_DEMAND,
)
# The scan's own health (FactoryCollector._health), in the order served.
HEALTH: tuple[catalogue.MetricDef, ...] = (
    catalogue.PARSE_ERRORS,
    catalogue.LABEL_OVERFLOW,
    catalogue.RECORDS,
    catalogue.BYTES_READ,
    catalogue.FILES_TRACKED,
    catalogue.LAG,
    catalogue.LAST_SCAN,
    catalogue.SCAN_DURATION,
)
FORWARDER: tuple[catalogue.MetricDef, ...] = (
    catalogue.TRACE_SPOOLS,
    catalogue.TRACE_SPANS,
    catalogue.TRACE_REQUESTS,
    catalogue.TRACE_PACED,
)


def _described(metrics: Iterable[catalogue.MetricDef]) -> list[Metric]:
    """Empty families named as collect() names them: the registry refuses a second collector
    that serves one of these names, at registration rather than as a duplicate series."""
    return [
        HistogramMetricFamily(m.name, m.help, labels=list(m.labels)) if m.type == "histogram" else _family(m)
        for m in metrics
    ]


def _family(m: catalogue.MetricDef) -> CounterMetricFamily | GaugeMetricFamily:
    if m.type == "counter":
        return CounterMetricFamily(m.base, m.help, labels=list(m.labels))
    if m.type == "gauge":
        return GaugeMetricFamily(m.name, m.help, labels=list(m.labels))
    raise ValueError(f"{m.name} is a {m.type}; use _hist")


def _values(m: catalogue.MetricDef, rows: Iterable[tuple[Labels, float]]) -> Metric:
    fam = _family(m)
    for labels, v in rows:
        fam.add_metric(list(labels), v)
    return fam


# A bucket keeps its exemplar until a newer pilot lands in it: the same ids come back every scrape.
_trace_id = functools.lru_cache(maxsize=8192)(pilot_trace_id)


def _hist(m: catalogue.MetricDef, rows: Iterable[tuple[Labels, Histogram]], factory: str | None = None) -> Metric:
    """A histogram family; with ``factory``, each bucket's exemplar names its last pilot's trace."""
    fam = HistogramMetricFamily(m.name, m.help, labels=list(m.labels))
    for labels, h in rows:
        buckets: list[tuple[str, float] | tuple[str, float, Exemplar]] = list(h.cumulative())
        if factory is not None and h.exemplars is not None:
            for i, ex in enumerate(h.exemplars):
                if ex is not None:
                    entry, cluster, proc, start, v = ex
                    tid = _trace_id(factory, entry, cluster, proc, start)
                    # No timestamp: Prometheus stamps it with the scrape's, so a bucket's exemplar
                    # never arrives older than the one before it (which its storage would refuse).
                    buckets[i] = (*buckets[i][:2], Exemplar({catalogue.EXEMPLAR_TRACE_ID: tid}, v))
        fam.add_metric(list(labels), buckets, h.total)
    return fam


class FactoryCollector(Collector):
    """The ledger's metrics. ``factory``: the name in the pilots' trace ids, when pilot traces are
    built (cli.py's _pilot_traces); None serves no exemplar (no trace they could name)."""

    def __init__(self, ingest: Ingest, factory: str | None = None) -> None:
        self.ingest = ingest
        self.factory = factory

    def describe(self) -> list[Metric]:
        served = (*L.COUNTERS, *L.HISTOGRAMS, *L.GAUGES, *L.ENTRY_COUNTERS)
        return _described([*(t.metric for t in served), *ENTRY_GAUGES, *HEALTH])

    def collect(self) -> Iterator[Metric]:
        ing = self.ingest
        with ing.lock:
            led = ing.ledger
            for t in L.COUNTERS:
                yield _values(t.metric, t.read(led).items())
            for t in L.HISTOGRAMS:
                yield _hist(t.metric, t.read(led).items(), self.factory)
            for t in L.GAUGES:
                yield _values(t.metric, t.read(led).items())
            yield from self._entries()
            for t in L.ENTRY_COUNTERS:
                yield _values(t.metric, t.read(led).items())
            yield from self._health()

    def _entries(self) -> Iterator[Metric]:
        led = self.ingest.ledger
        fams = {m.name: _family(m) for m in ENTRY_GAUGES}

        def put(m: catalogue.MetricDef, labels: list[str], v: float) -> None:
            fams[m.name].add_metric(labels, v)

        for entry, (st, site) in sorted(led.entries.items()):
            put(catalogue.ENTRY_DOWNTIME, [entry, site], 1.0 if st.downtime else 0.0)
            if st.updated is not None:
                put(catalogue.ENTRY_UPDATED, [entry, site], st.updated)
            for client, fs in sorted(st.frontends.items()):
                pool = [entry, client, site]
                for attrs, metric, src in (
                    (STATUS_STATES, catalogue.ENTRY_GLIDEINS, fs.status),
                    (REQUESTED_KINDS, catalogue.ENTRY_REQUESTED, fs.requested),
                    (USER_JOB_STATES, catalogue.ENTRY_USER_JOBS, fs.client_monitor),
                    (VO_GLIDEIN_STATES, catalogue.ENTRY_VO_GLIDEINS, fs.client_monitor),
                    (VO_CORE_STATES, catalogue.ENTRY_VO_CORES, fs.client_monitor),
                ):
                    for attr, label in attrs.items():
                        if attr in src:
                            put(metric, [*pool, label], src[attr])
                if "InfoAge" in fs.client_monitor:
                    put(catalogue.ENTRY_INFO_AGE, pool, fs.client_monitor["InfoAge"])
                b, d = bottleneck(fs)
                put(catalogue.ENTRY_BOTTLENECK, pool, b)
                put(catalogue.ENTRY_INSUFFICIENT_DEMAND, pool, d)
        yield from fams.values()

    def _health(self) -> Iterator[Metric]:
        ing = self.ingest
        h = ing.health
        yield _values(catalogue.PARSE_ERRORS, ing.errors.counts.items())
        over = ing.ledger.budget.overflow
        yield _values(catalogue.LABEL_OVERFLOW, (((k,), float(over.get(k, 0))) for k in catalogue.LABEL_CAPS))
        yield _values(catalogue.RECORDS, (((s,), float(n)) for s, n in h.records.items()))
        yield _values(catalogue.BYTES_READ, (((s,), float(n)) for s, n in h.bytes_read.items()))
        yield _values(catalogue.FILES_TRACKED, (((s,), float(n)) for s, n in h.files.items()))
        now = ing.clock()
        yield _values(catalogue.LAG, (((s,), v) for s, v in h.lag(now).items()))
        # From the start: a first scan that never ends must trip the stalled alert too.
        yield _values(catalogue.LAST_SCAN, [((), h.last_scan_end if h.last_scan_end is not None else h.started)])
        yield _values(catalogue.SCAN_DURATION, [((), h.last_scan_duration)] if h.last_scan_duration is not None else [])


class ForwarderCollector(Collector):
    """The span-spool forwarder's counters (its stats are plain ints, read as they stand)."""

    def __init__(self, stats: ForwarderStats) -> None:
        self.stats = stats

    def describe(self) -> list[Metric]:
        return _described(FORWARDER)

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        spools = {"accepted": s.accepted, "refused": s.refused, "rejected": s.collector_rejected}
        yield _values(
            catalogue.TRACE_SPOOLS, (((k,), float(v)) for k, v in {**spools, "dropped": s.dropped_files}.items())
        )
        spans = {"sent": s.sent_spans, "unbound": s.unbound_spans, "dropped": s.dropped_spans}
        yield _values(catalogue.TRACE_SPANS, (((k,), float(v)) for k, v in spans.items()))
        requests = {"sent": s.sent_requests, "failed": s.failures}
        yield _values(catalogue.TRACE_REQUESTS, (((k,), float(v)) for k, v in requests.items()))
        yield _values(catalogue.TRACE_PACED, [((), s.paced_seconds)])


class BuildInfoCollector(Collector):
    """``gwms_obs_build_info``: 1, with the running version and Python in its labels."""

    def __init__(self, version: str = __version__, python_version: str | None = None) -> None:
        self.labels = [version, python_version or platform.python_version()]

    def describe(self) -> list[Metric]:
        return _described([catalogue.BUILD_INFO])

    def collect(self) -> Iterator[Metric]:
        yield _values(catalogue.BUILD_INFO, [(tuple(self.labels), 1.0)])


def exporter_registry(
    ingest: Ingest, stats: ForwarderStats | None = None, factory: str | None = None
) -> CollectorRegistry:
    """What `gwms-obs export` serves on /metrics.

    Our own registry, not prometheus_client's global REGISTRY: that one is
    process-wide state, so a second exporter in one process (the tests, a
    factory importing gwms_obs) would collide on its names, and anything else
    imported could add series to our /metrics behind the catalogue's back. The
    process and Python runtime collectors the global one has by default are
    registered here explicitly instead (names in ``catalogue.RUNTIME_NAMES``).
    ``factory``: the factory name of the pilots' trace ids, for the exemplars.
    """
    registry = CollectorRegistry()
    registry.register(FactoryCollector(ingest, factory))
    if stats is not None:
        registry.register(ForwarderCollector(stats))
    registry.register(BuildInfoCollector())
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry
