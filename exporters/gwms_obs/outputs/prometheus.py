"""Serve the ledger as Prometheus metrics: families built from catalogue.py's definitions.

Names, help, units and labels come from the catalogue. The ledger's families
(40,000 samples at 500 entries) change only when the ledger does, so
:class:`Exposition` renders them then, text and OpenMetrics, and a scrape
serves those bytes followed by the few families that must be read when served
(the scan's health: lag and last scan move with the clock; the forwarder's
counters; build info; process and runtime). A scrape takes no lock and does no
accounting work; it never waits for a scan or a render (it gets the last one
finished). :class:`FactoryCollector` still builds everything on each collect,
under the ingest lock: OTLP's push reads it, and the tests compare with it.

The pilot histograms carry exemplars when the exporter builds pilot traces:
each bucket's last pilot, labelled with its trace id
(``catalogue.EXEMPLAR_TRACE_ID``, the id of outputs/pilot_traces.py). Only
the OpenMetrics exposition carries them; prometheus_client's WSGI app
chooses it from the scraper's Accept header.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import gzip
import logging
import math
import platform
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Exemplar

from .. import __version__, catalogue
from ..accounting import ledger as L
from ..accounting.ledger import Histogram, Labels, bottleneck
from ..ingest import watch
from .http import GZIP_LEVEL, Encoder, gzip_member, negotiate
from .pilot_traces import pilot_trace_id

if TYPE_CHECKING:
    from ..model import EntryStatus, FrontendGroupStatus
    from ..pipeline import Ingest
    from ..tracing.outbox import ForwarderStats

log = logging.getLogger("gwms_obs.metrics")

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
# frontend_status.xml attribute -> label value, per class (groupStats.attributes).
FRONTEND_JOB_STATES = {
    "Idle": "idle",
    "OldIdle": "old_idle",
    "Idle_3600": "idle_3600",
    "Running": "running",
    "Total": "total",
}
FRONTEND_GLIDEIN_STATES = {"Idle": "idle", "Running": "running", "Total": "total"}
FRONTEND_MATCHED_JOB_STATES = {
    "Idle": "idle",
    "EffIdle": "effective_idle",
    "OldIdle": "old_idle",
    "Running": "running",
    "RunningHere": "running_here",
}
FRONTEND_MATCHED_GLIDEIN_STATES = {"Total": "total", "Idle": "idle", "Running": "running", "Failed": "failed"}
FRONTEND_CORE_STATES = {"Total": "total", "Idle": "idle", "Running": "running"}
FRONTEND_REQUESTED_KINDS = {"Idle": "idle", "MaxRun": "max_running"}  # the factory side's kind values

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
    catalogue.DISCOVERY_FALLBACKS,
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
        _hist_row(fam, labels, h, factory)
    return fam


def _hist_row(fam: HistogramMetricFamily, labels: Labels, h: Histogram, factory: str | None) -> None:
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


def ledger_families(led: L.Ledger, factory: str | None = None) -> list[Metric]:
    """The families read from the ledger alone, in the order served: what changes only when it does."""
    out: list[Metric] = [_values(t.metric, t.read(led).items()) for t in L.COUNTERS]
    out += [_hist(t.metric, t.read(led).items(), factory) for t in L.HISTOGRAMS]
    out += [_values(t.metric, t.read(led).items()) for t in L.GAUGES]
    out += _entries(led)
    out += _frontend(led)
    out += [_values(t.metric, t.read(led).items()) for t in L.ENTRY_COUNTERS]
    return out


def _entries(led: L.Ledger) -> list[Metric]:
    return _entry_families(sorted(led.entries.items()))


def _entry_families(entries: Iterable[tuple[str, tuple[EntryStatus, str]]]) -> list[Metric]:
    """ENTRY_GAUGES' families of ``entries``, in the order given."""
    fams = {m.name: _family(m) for m in ENTRY_GAUGES}

    def put(m: catalogue.MetricDef, labels: list[str], v: float) -> None:
        fams[m.name].add_metric(labels, v)

    for entry, (st, site) in entries:
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
    return list(fams.values())


def _frontend(led: L.Ledger) -> list[Metric]:
    """The VO frontend's view (catalogue.FRONTEND_METRICS), from its groups' latest files."""
    return _frontend_families(led.frontend_updated, sorted(led.frontend_groups.items()))


def _frontend_families(
    updated: float | None, groups: Iterable[tuple[str, tuple[FrontendGroupStatus, str]]]
) -> list[Metric]:
    """catalogue.FRONTEND_METRICS' families: the frontend-wide file's time, then ``groups`` in the order given."""
    fams = {m.name: _family(m) for m in catalogue.FRONTEND_METRICS}

    def put(m: catalogue.MetricDef, labels: list[str], src: dict[str, int], names: dict[str, str] | None) -> None:
        for attr, label in (names or {}).items():
            if attr in src:
                fams[m.name].add_metric([*labels, label], src[attr])

    if updated is not None:
        fams[catalogue.FRONTEND_UPDATED.name].add_metric([], updated)
    for group, (st, client) in groups:
        g = [group, client]
        if st.updated is not None:
            fams[catalogue.FRONTEND_GROUP_UPDATED.name].add_metric(g, st.updated)
        put(catalogue.FRONTEND_JOBS, g, st.jobs, FRONTEND_JOB_STATES)
        put(catalogue.FRONTEND_GLIDEINS, g, st.glideins, FRONTEND_GLIDEIN_STATES)
        if (un := st.states.get("Unmatched")) is not None:
            put(catalogue.FRONTEND_UNMATCHED_JOBS, g, un.matched_jobs, FRONTEND_MATCHED_JOB_STATES)
        for (entry, instance), m in sorted(st.factories.items()):
            e = [entry, client, group, instance]
            put(catalogue.FRONTEND_ENTRY_JOBS, e, m.matched_jobs, FRONTEND_MATCHED_JOB_STATES)
            put(catalogue.FRONTEND_ENTRY_GLIDEINS, e, m.matched_glideins, FRONTEND_MATCHED_GLIDEIN_STATES)
            put(catalogue.FRONTEND_ENTRY_CORES, e, m.matched_cores, FRONTEND_CORE_STATES)
            put(catalogue.FRONTEND_ENTRY_REQUESTED, e, m.requested, FRONTEND_REQUESTED_KINDS)
            if m.down is not None:
                fams[catalogue.FRONTEND_ENTRY_DOWN.name].add_metric(e, 1.0 if m.down else 0.0)
    return list(fams.values())


ScanEnd = tuple[float | None, float | None]  # the last scan's end and duration


def health_families(ing: Ingest, scan: ScanEnd | None = None) -> list[Metric]:
    """The scan's health, read when served: the lag and the last scan move with the clock.

    Each table is copied first (dict() of a dict is one step under the GIL), so this
    needs no lock: a scrape never waits for a scan's checkpoint, or for a render.
    ``scan``: the last scan as the cached ledger families saw it (:class:`Exposition`),
    so a scrape never says a scan ended whose pilots it does not show yet.
    """
    h = ing.health
    over = dict(ing.ledger.budget.overflow)
    last_end, duration = scan if scan is not None else (h.last_scan_end, h.last_scan_duration)
    # lag() looks a source up after asking if it is there: on a copy, a scan dropping it meanwhile is harmless.
    lag = dataclasses.replace(h, backlog=dict(h.backlog)).lag(ing.clock())
    fell = dict(h.discovery_fallbacks)
    return [
        _values(catalogue.PARSE_ERRORS, dict(ing.errors.counts).items()),
        _values(catalogue.LABEL_OVERFLOW, (((k,), float(over.get(k, 0))) for k in catalogue.LABEL_CAPS)),
        _values(catalogue.RECORDS, (((s,), float(n)) for s, n in dict(h.records).items())),
        _values(catalogue.BYTES_READ, (((s,), float(n)) for s, n in dict(h.bytes_read).items())),
        _values(catalogue.FILES_TRACKED, (((s,), float(n)) for s, n in dict(h.files).items())),
        _values(catalogue.LAG, (((s,), v) for s, v in lag.items())),
        # From the start: a first scan that never ends must trip the stalled alert too.
        _values(catalogue.LAST_SCAN, [((), last_end if last_end is not None else h.started)]),
        _values(catalogue.SCAN_DURATION, [((), duration)] if duration is not None else []),
        _values(catalogue.DISCOVERY_FALLBACKS, (((r,), float(fell.get(r, 0))) for r in watch.FALLBACK_REASONS)),
    ]


class FactoryCollector(Collector):
    """The ledger's metrics and the scan's health, built on every collect under the ingest lock
    (OTLP's path, and the reference /metrics's cached exposition is compared with).
    ``factory``: the name in the pilots' trace ids, when pilot traces are built (daemon.py's
    pilot_traces); None serves no exemplar (no trace they could name)."""

    def __init__(self, ingest: Ingest, factory: str | None = None) -> None:
        self.ingest = ingest
        self.factory = factory

    def describe(self) -> list[Metric]:
        return _described([*_LEDGER_DEFS, *HEALTH])

    def collect(self) -> Iterator[Metric]:
        with self.ingest.lock:
            yield from ledger_families(self.ingest.ledger, self.factory)
            yield from health_families(self.ingest)


_LEDGER_DEFS = (
    *(t.metric for t in (*L.COUNTERS, *L.HISTOGRAMS, *L.GAUGES)),
    *ENTRY_GAUGES,
    *(t.metric for t in L.ENTRY_COUNTERS),
    *catalogue.FRONTEND_METRICS,
)


class HealthCollector(Collector):
    """The scan's health alone (:func:`health_families`): the per-scrape part of the cached /metrics."""

    def __init__(self, ingest: Ingest, scan: Callable[[], ScanEnd | None] | None = None) -> None:
        self.ingest = ingest
        self.scan = scan

    def describe(self) -> list[Metric]:
        return _described(HEALTH)

    def collect(self) -> Iterator[Metric]:
        yield from health_families(self.ingest, self.scan() if self.scan is not None else None)


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
    return _registry(FactoryCollector(ingest, factory), stats)


def scrape_registry(
    ingest: Ingest, stats: ForwarderStats | None = None, scan: Callable[[], ScanEnd | None] | None = None
) -> CollectorRegistry:
    """What :class:`Exposition` builds on every scrape, after the ledger's cached families: in the
    order of :func:`exporter_registry` (the health closes FactoryCollector's families), so the two
    together are its exposition byte for byte."""
    return _registry(HealthCollector(ingest, scan), stats)


def _registry(first: Collector, stats: ForwarderStats | None) -> CollectorRegistry:
    """``first`` (the accounting's families), then the forwarder's, the build's and the runtime's,
    in the one order both /metrics paths serve."""
    registry = CollectorRegistry()
    registry.register(first)
    if stats is not None:
        registry.register(ForwarderCollector(stats))
    registry.register(BuildInfoCollector())
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


# --- /metrics rendered once per change -----------------------------------------------------------
# The ledger's families are rendered when it changes and served as bytes; the health and process
# families are built per scrape (a few dozen samples). A render encodes only the rows (and entries,
# frontend groups) the ledger marked as changed since the one before (Ledger.take_changes; ~20 us a
# sample, 500 entries are ~40,000), copies only those from the ledger under its lock (_patched), and
# joins again only the chunks they fall in, the others' bytes kept (_Incremental); its gzip, a member
# per chunk, compresses only the chunks that moved (_Body). Renders come from a thread of their own.
# A render of what a watched tick changed costs a few ms: the gap and the poll set how soon a
# pilot reaches /metrics (within ~POLL + MIN_GAP of its tick), RENDER_SHARE the CPU of big ones.
# At 2 arrivals a second every tick moves the ledger, so this is how often a watching daemon renders:
# 0.5 s made it a render a tick (14-31 ms of CPU each at 511 entries, 1.4-3 % of a core); 2 s keeps a
# pilot's p99 from close to /metrics under ~4 s (tick 1 s + gap 2 s + poll), within issue 34's 5 s.
MIN_GAP = 2.0  # seconds between two renders that no scan's end asked for (ticks, the ledger moving mid-scan)
RENDER_SHARE = 0.1  # ... and at most this share of the time spent rendering: a backfill keeps its CPU
# ... over time, in renders' CPU: renders spend it from a budget that refills at RENDER_SHARE and holds at
# most this much. Spacing each render by its own cost instead held back the small renders of the ticks
# after one large one: at 301,040 pilots the first scan's render (0.8 s of CPU, 2 s wall on a loaded
# machine) kept the next for 18 s, and a pilot's p99 from close to /metrics was 14 s.
RENDER_BURST = 2.0
POLL = 0.25  # seconds between two looks at the ledger's version (a lock and a compare) while nothing wakes it
MAX_VARIANTS = 8  # encodings kept rendered (text, OpenMetrics, their escapings); others per scrape
# An encoding other than Prometheus' (OpenMetrics) is rendered with every change only while it is asked
# for this often: each encoding is half a render's CPU (at 301,040 pilots, 511 entries, a render after a
# tick was 31 ms with text and OpenMetrics, 14 ms with OpenMetrics alone). Once dropped, its next scrape
# renders it whole once (0.7 s at 500 entries) and it is kept again.
WANTED_SECONDS = 600.0
CHUNK_BYTES = 16384  # a gzip member's text: a change compresses again the chunks it falls in
_OM_EOF = b"# EOF\n"


def _variant(encoder: Encoder) -> tuple[Any, ...]:
    """What makes two of choose_encoder's encoders write the same bytes."""
    if isinstance(encoder, functools.partial):
        return (encoder.func, tuple(sorted(encoder.keywords.items())))
    return (encoder, ())


class _Families:
    """A fixed list of families, as an encoder reads a registry."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families

    def describe(self) -> list[Metric]:  # the names a restricted registry (name[]) selects by
        return self.families


_gzip_member = gzip_member  # a name of this module's own: tests count the members it compresses


class _Body:
    """One encoding of one render, as chunks (a family's header and rows, ~CHUNK_BYTES each).

    Gzipped as a member per chunk: a gzip stream may be several members, one after the other
    (RFC 1952; Go's gzip.Reader, which Prometheus uses, reads them all by default, as do Python's
    gzip and curl), so a chunk that did not change keeps its compressed bytes from the render
    before, and a scrape compresses only its own tail.
    """

    __slots__ = ("_data", "chunks", "gz", "inc", "lock")

    def __init__(self, chunks: list[tuple[Any, bytes]], inc: _Incremental | None = None) -> None:
        self.chunks = chunks
        self._data: bytes | None = None
        self.inc = inc  # its encoding's state: the chunks compressed for the render before
        self.gz: bytes | None = None
        self.lock = threading.Lock()

    @property
    def data(self) -> bytes:
        """The chunks joined, at the first scrape that wants them plain: Prometheus asks for gzip, and
        joining every render's 5-7 MB (500 entries), both encodings, was a quarter of a render's CPU."""
        with self.lock:
            if self._data is None:
                self._data = b"".join(c for _, c in self.chunks)
            return self._data

    def gzipped(self, tail: bytes) -> bytes:
        return self.compress() + _gzip_member(tail)

    def compress(self) -> bytes:
        """The chunks gzipped, a member each: kept from the render before where a chunk is the same."""
        with self.lock:
            if self.gz is None:
                old = self.inc.gzipped if self.inc is not None else {}
                now: dict[Any, tuple[bytes, bytes]] = {}
                for key, raw in self.chunks:
                    had = old.get(key)
                    now[key] = (raw, had[1] if had is not None and had[0] == raw else _gzip_member(raw))
                if self.inc is not None:
                    self.inc.gzipped = now  # one store; the dict it replaces is never changed
                self.gz = b"".join(z for _, z in now.values())
            return self.gz


Key = Any  # a unit's key in its section: a table's labels, an entry's or a group's name
# What a render after another changes, from the ledger's changes (Ledger.take_changes): a served table ->
# (its keys' order changed, the keys to encode again). None: the first render of a ledger, all of it.
Delta = dict[str, tuple[bool, set[Key]]]


@dataclass(slots=True)
class _Section:
    """Families served from one set of units, in the order served: a table's rows (one family), the
    entries (ENTRY_GAUGES), the frontend's groups (FRONTEND_METRICS). ``rows()``: every unit as (key,
    what it is rendered from), in the order served; ``build(units)``: each family holding those units'
    samples, with where each unit's samples end in it. ``changed``: the units that changed since the
    render before (None: every one); ``keys``: every unit's key in order, when that changed (None: as
    before)."""

    rows: Callable[[], list[tuple[Key, Any]]]
    build: Callable[[list[tuple[Key, Any]]], list[tuple[Metric, list[int]]]]
    changed: list[tuple[Key, Any]] | None = None
    keys: list[Key] | None = None


def _sections(snap: L.Ledger, factory: str | None, delta: Delta | None = None) -> list[_Section]:
    """:func:`ledger_families` as sections, the families in the same order; with ``delta``, each
    section's units that changed (else all)."""

    def moved(table: str, rows: dict[Key, Any], order: Callable[[], list[Key]]) -> dict[str, Any]:
        if delta is None:
            return {}
        reordered, keys = delta.get(table, (False, set()))
        return {"changed": [(k, rows[k]) for k in keys], "keys": order() if reordered else None}

    def table(t: L.Served, hist: bool) -> _Section:
        m, rows = t.metric, t.read(snap)

        def build(units: list[tuple[Key, Any]]) -> list[tuple[Metric, list[int]]]:
            ends = []
            if hist:
                fam: Metric = (hf := HistogramMetricFamily(m.name, m.help, labels=list(m.labels)))
                for labels, h in units:
                    _hist_row(hf, labels, h, factory)
                    ends.append(len(hf.samples))
            else:
                fam = vf = _family(m)
                for labels, v in units:
                    vf.add_metric(list(labels), v)
                    ends.append(len(vf.samples))
            return [(fam, ends)]

        return _Section(lambda: list(rows.items()), build, **moved(t.table, rows, lambda: list(rows)))

    def grouped(
        families: Callable[[tuple[Key, Any]], list[Metric]], empty: Callable[[], list[Metric]]
    ) -> Callable[..., Any]:
        def build(units: list[tuple[Key, Any]]) -> list[tuple[Metric, list[int]]]:
            out: list[tuple[Metric, list[int]]] = [(f, []) for f in empty()]  # new ones: a build per encoding
            for u in units:
                for (fam, ends), part in zip(out, families(u), strict=True):
                    fam.samples.extend(part.samples)
                    ends.append(len(fam.samples))
            return out

        return build

    def entries() -> _Section:
        rows = snap.entries
        return _Section(
            lambda: sorted(rows.items()),
            grouped(lambda u: _entry_families([u]), lambda: _entry_families([])),
            **moved("entries", rows, lambda: sorted(rows)),
        )

    def frontend() -> _Section:
        def families(u: tuple[Key, Any]) -> list[Metric]:  # key None: the frontend-wide file's time
            return _frontend_families(u[1], []) if u[0] is None else _frontend_families(None, [u])

        rows: dict[Key, Any] = {None: snap.frontend_updated, **snap.frontend_groups}
        return _Section(
            lambda: [(None, snap.frontend_updated), *sorted(snap.frontend_groups.items())],
            grouped(families, lambda: _frontend_families(None, [])),
            **moved("frontend_groups", rows, lambda: [None, *sorted(snap.frontend_groups)]),
        )

    out = [table(t, False) for t in L.COUNTERS]
    out += [table(t, True) for t in L.HISTOGRAMS]
    out += [table(t, False) for t in L.GAUGES]
    out += [entries(), frontend()]
    out += [table(t, False) for t in L.ENTRY_COUNTERS]
    return out


def _same(a: Any, b: Any) -> bool:
    """Whether ``b`` renders as ``a`` did: equal, and 0.0 not -0.0 (equal, but written apart)."""
    if a is b:
        return True
    if type(a) is not type(b) or a != b:
        return False
    return type(a) is not float or a != 0.0 or math.copysign(1.0, a) == math.copysign(1.0, b)


class _Unsplittable(Exception):
    """An encoder wrote a family's samples other than a line each (the render falls back to whole)."""


@dataclass(slots=True)
class _Part:
    """One section's state in one encoding, between renders."""

    keys: list[Key]  # its units, in the order served
    at: dict[Key, int]  # a unit's place in keys
    lines: dict[Key, tuple[bytes, ...]]  # a unit's lines in each family of the section
    names: list[str]  # its families
    chunks: list[list[bytes]]  # per family, its chunks (the first opens with the family's header)
    out: list[tuple[Any, bytes]]  # the chunks as served: ((family index in the body, chunk index), bytes)


class _Incremental:
    """One encoding's state between renders: each unit's lines in each family of its section, and the
    chunks they are joined in. A render encodes only the units that changed (one encoder call per
    family for all of them, its lines split back per unit), joins again only the chunks they fall in,
    and keeps the other chunks as they were: its cost follows what changed, not the ledger's size."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self.parts: list[_Part | None] = []  # per section; None: not rendered yet
        self.headers: dict[str, bytes] = {}  # family name -> its HELP/TYPE/UNIT lines
        self.per_chunk: dict[str, int] = {}  # family name -> units a chunk (set once: chunks keep their bounds)
        self.gzipped: dict[Any, tuple[bytes, bytes]] = {}  # chunk key -> (its bytes, gzipped), see _Body
        self.encoded = 0  # units encoded by the last render

    def render(self, sections: list[_Section]) -> list[tuple[Any, bytes]]:
        if len(self.parts) != len(sections):
            self.parts = [None for _ in sections]
        chunks: list[tuple[Any, bytes]] = []
        encoded = fi = 0
        for s, sec in enumerate(sections):
            part = self.parts[s]
            keys = sec.keys
            if part is None or sec.changed is None:  # whole: a new ledger, or this encoding's first render
                changed = sec.rows()
                keys = [key for key, _ in changed]
            elif not sec.changed and keys is None:  # its chunks as they were (most sections)
                chunks += part.out
                fi += len(part.names)
                continue
            else:
                changed = sec.changed
            built = sec.build(changed)
            split = [self._split(fam, ends) for fam, ends in built]
            fresh = {key: tuple(per_unit[j] for per_unit in split) for j, (key, _) in enumerate(changed)}
            encoded += len(changed)
            names = [fam.name for fam, _ in built]
            if part is None or sec.changed is None or keys is not None:  # units moved: every chunk joined
                assert keys is not None
                lines = fresh if part is None else {k: fresh[k] if k in fresh else part.lines[k] for k in keys}
                joined = [self._join(name, f, keys, lines) for f, name in enumerate(names)]
                part = self.parts[s] = _Part(keys, {k: i for i, k in enumerate(keys)}, lines, names, joined, [])
            else:  # the same units: only the chunks holding a changed one joined again
                part.lines.update(fresh)
                for f, name in enumerate(names):
                    n = self.per_chunk.get(name)
                    if n is None:  # no row written in this family before: its first chunks
                        part.chunks[f] = self._join(name, f, part.keys, part.lines)
                        continue
                    for c in {part.at[key] // n for key in fresh}:
                        part.chunks[f][c] = self._chunk(name, f, c, n, part.keys, part.lines)
            part.out = [((fi + f, c), data) for f, mine in enumerate(part.chunks) for c, data in enumerate(mine)]
            chunks += part.out
            fi += len(names)
        self.encoded = encoded
        return chunks

    def _join(self, name: str, f: int, keys: list[Key], lines: dict[Key, tuple[bytes, ...]]) -> list[bytes]:
        """Family ``name`` (the section's ``f``-th) as chunks of its units' lines, ~CHUNK_BYTES each."""
        n = self.per_chunk.get(name)
        if n is None:
            size = sum(len(lines[k][f]) for k in keys)
            if not size:  # no row yet: its header alone, the chunk size set by its first rows
                return [self.headers[name]]
            n = self.per_chunk[name] = max(1, CHUNK_BYTES * len(keys) // size)
        return [self._chunk(name, f, c, n, keys, lines) for c in range(max(1, -(-len(keys) // n)))]

    def _chunk(self, name: str, f: int, c: int, n: int, keys: list[Key], lines: dict[Key, tuple[bytes, ...]]) -> bytes:
        part = b"".join([lines[k][f] for k in keys[c * n : (c + 1) * n]])
        return self.headers[name] + part if c == 0 else part

    def _split(self, fam: Metric, ends: list[int]) -> list[bytes]:
        """The family's lines, per unit (``ends``: where each unit's samples end)."""
        head = self.headers.get(fam.name)
        if head is None:
            head = self.headers[fam.name] = _encode(
                self.encoder, [Metric(fam.name, fam.documentation, fam.type, fam.unit)]
            )
        if not ends:
            return []
        data = _encode(self.encoder, [fam])
        lines = data[len(head) :].split(b"\n")
        if not data.startswith(head) or len(lines) != len(fam.samples) + 1 or lines[-1]:
            raise _Unsplittable(fam.name)
        out, start = [], 0
        for end in ends:
            out.append(b"\n".join(lines[start:end]) + b"\n" if end > start else b"")
            start = end
        return out


@dataclass(slots=True)
class _Rendered:
    ledger: L.Ledger  # the object rendered: a restored checkpoint is a new one
    version: int
    # Its copy (a fraction of the families' size): name[] and new encodings build from it. Each render's
    # is the one before with the tables that changed copied again (_patched): never changed once made.
    snapshot: L.Ledger
    factory: str | None
    bodies: dict[tuple[Any, ...], _Body]
    scan: ScanEnd  # the last scan's end and duration when the snapshot was taken

    def families(self) -> list[Metric]:
        return ledger_families(self.snapshot, self.factory)


def _copied(h: Histogram) -> Histogram:
    return Histogram(h.bounds, h.counts[:], h.total, h.exemplars[:] if h.exemplars is not None else None)


_HISTOGRAM_TABLES = frozenset(t.table for t in L.HISTOGRAMS)


def _snapshot(led: L.Ledger) -> L.Ledger:
    """A copy of what :func:`ledger_families` reads, taken under the ingest lock (~7 ms at 500 entries,
    for a ledger's first render) so the families are built and rendered outside it while the scan goes on."""
    snap = L.Ledger()
    for t in (*L.COUNTERS, *L.GAUGES, *L.ENTRY_COUNTERS):
        t.read(snap).update(t.read(led))
    for t in L.HISTOGRAMS:
        t.read(snap).update((k, _copied(h)) for k, h in t.read(led).items())
    snap.entries = dict(led.entries)  # a status is replaced by update_entry, never changed in place
    snap.frontend_groups = dict(led.frontend_groups)  # likewise by update_frontend_group
    snap.frontend_updated = led.frontend_updated
    return snap


def _patched(prev: L.Ledger, led: L.Ledger, changes: dict[str, set[Key] | None]) -> tuple[L.Ledger, Delta]:
    """``prev`` (the last render's snapshot) brought to ``led`` by what changed since (Ledger.take_changes),
    under the ingest lock: a table that changed is copied with its changed rows (``prev``'s, which a
    scrape may still read, stays as it was), the others are shared. Also what each section must encode."""
    snap = copy.copy(prev)
    delta: Delta = {}
    for table, keys in changes.items():
        if table == "frontend_updated":
            snap.frontend_updated = led.frontend_updated
            continue
        live: dict[Key, Any] = getattr(led, table)
        old: dict[Key, Any] = getattr(prev, table)
        new: dict[Key, Any]
        hist = table in _HISTOGRAM_TABLES  # changed in place: copied
        if keys is None:  # replaced whole (held_now, the CE's): its rows read again, encoded where they differ
            new = {k: _copied(v) for k, v in live.items()} if hist else dict(live)
            changed = {k for k, v in new.items() if k not in old or not _same(old[k], v)}
            reordered = True
        else:
            # Rows added or dropped: the table in the live order (a mark missing there is a KeyError here:
            # the render fails, is logged, and the next is whole). Else the changed rows in their places.
            reordered = any((k in old) != (k in live) for k in keys)
            if reordered:
                new = {k: (_copied(v) if hist else v) if k in keys else old[k] for k, v in live.items()}
            else:
                new = dict(old)
                for k in keys:
                    new[k] = _copied(live[k]) if hist else live[k]
            changed = {k for k in keys if k in live}
        setattr(snap, table, new)
        delta[table] = (reordered, changed)
    if "frontend_updated" in changes:  # the frontend section's first unit (key None)
        reordered, changed = delta.get("frontend_groups", (False, set()))
        delta["frontend_groups"] = (reordered, {*changed, None})
    return snap, delta


class Exposition:
    """/metrics as bytes: the ledger's families rendered once per change, the rest per scrape.

    :meth:`refresh` renders when the ledger's version (or the ledger itself) moved;
    :meth:`start` runs it in a thread of its own, at once when :meth:`changed` is
    called (the end of a scan) and otherwise at most every MIN_GAP, while the renders'
    CPU budget (RENDER_SHARE of the time, RENDER_BURST at most) is not spent. A scrape (:meth:`answer`)
    takes the last finished render, so one that arrives during a render or a scan
    gets the previous bytes at once, never waiting for either.
    """

    def __init__(
        self,
        ingest: Ingest,
        stats: ForwarderStats | None = None,
        factory: str | None = None,
        *,
        min_gap: float = MIN_GAP,
        poll: float = POLL,
    ) -> None:
        self.ingest = ingest
        self.factory = factory
        self.per_scrape = scrape_registry(ingest, stats, self._scan)
        self.min_gap = min_gap
        self.poll = poll
        self.renders = 0
        self.last_render_seconds = 0.0
        self.last_units = 0  # rows, entries and groups encoded by the last render, all encodings
        self.render_cpu = 0.0  # seconds of CPU all renders took (benchmarks/steady_state.py breakdown)
        om, _ = choose_encoder("application/openmetrics-text")
        # Encodings rendered with every change -> whether their gzip stream is, too: Prometheus asks for
        # OpenMetrics, gzipped; others join once asked for (their first scrape after a change renders
        # them whole) and leave when not asked for WANTED_SECONDS.
        self._wanted: dict[tuple[Any, ...], tuple[Encoder, bool]] = {_variant(om): (om, True)}
        self._prometheus = _variant(om)  # always rendered
        self._asked: dict[tuple[Any, ...], float] = {}
        self._current: _Rendered | None = None
        self._inc: dict[tuple[Any, ...], _Incremental] = {}  # per encoding rendered, its rows (refresh only)
        self._render_lock = threading.Lock()  # one render at a time
        self._lock = threading.Lock()  # _wanted
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._last_end = 0.0
        self._budget = RENDER_BURST  # seconds of CPU renders may spend now (RENDER_BURST)
        self._thread: threading.Thread | None = None
        # Called with each new render, in the renderer's thread (outputs/serve.py publishes it to its child).
        self.on_render: Callable[[_Rendered], None] | None = None

    # --- rendering -----------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Render the ledger's families if it changed since the last render; True if it did."""
        with self._render_lock:
            cur = self._current
            ing = self.ingest
            with ing.lock:
                led = ing.ledger
                scan = (ing.health.last_scan_end, ing.health.last_scan_duration)
                if cur is not None and cur.ledger is led and cur.version == led.version:
                    if cur.scan != scan:  # a scan that changed nothing: its end is served at once
                        self._current = dataclasses.replace(cur, scan=scan)
                    return False
                version = led.version
                taken, changes = led.take_changes()
                delta: Delta | None = None
                t0, cpu0, began = time.perf_counter(), time.thread_time(), time.monotonic()
                if cur is None or cur.ledger is not led or taken != cur.version:
                    # A new ledger (a restored checkpoint), the first render, or changes taken by a render
                    # that failed: the ledger copied whole, every encoding rendered whole.
                    snap = _snapshot(led)
                else:
                    snap, delta = _patched(cur.snapshot, led, changes)
            sections = _sections(snap, self.factory, delta)
            with self._lock:
                now = time.monotonic()
                for k in [k for k in self._wanted if k != self._prometheus]:
                    if now - self._asked.get(k, 0.0) > WANTED_SECONDS:  # not scraped lately: not rendered
                        del self._wanted[k]
                        self._inc.pop(k, None)
                wanted = list(self._wanted.items())
            bodies: dict[tuple[Any, ...], _Body] = {}
            units = 0
            while True:  # a round more for each encoding first asked for meanwhile: at most MAX_VARIANTS
                for key, (encoder, gz) in wanted:
                    inc = self._inc.get(key)
                    if inc is None:
                        inc = self._inc[key] = _Incremental(encoder)
                    try:
                        body = _Body(inc.render(sections), inc)
                        units += inc.encoded
                    except _Unsplittable as e:  # never seen with prometheus_client's encoders: whole, as before
                        log.warning("/metrics: family %s not written a line a sample: rendered whole", e)
                        self._inc.pop(key)
                        body = _Body([((-1, 0), _encode(encoder, ledger_families(snap, self.factory)))])
                    bodies[key] = body
                    if gz:
                        body.compress()
                # An encoding first asked for while this render ran is in it too, and the render is stored
                # under the same lock: an encoding noted as wanted later is in the next one. The serving
                # process waits for a render's body in an encoding it asked for (outputs/serve.py), and a
                # ledger that stops changing makes no next render.
                with self._lock:
                    wanted = [(k, v) for k, v in self._wanted.items() if k not in bodies]
                    if not wanted:
                        self._current = _Rendered(led, version, snap, self.factory, bodies, scan)  # old or new
                        break
            self.renders += 1
            self.last_render_seconds = time.perf_counter() - t0
            self.last_units = units
            cpu = time.thread_time() - cpu0
            self.render_cpu += cpu
            self._budget = self._credit(began) - cpu
            self._last_end = time.monotonic()
            if self.on_render is not None:
                self.on_render(self._current)
            return True

    def _credit(self, at: float) -> float:
        """The renders' CPU budget at ``at``: what is left, refilled at RENDER_SHARE since the last render."""
        return min(RENDER_BURST, self._budget + (at - self._last_end) * RENDER_SHARE)

    def _scan(self) -> ScanEnd | None:
        """The last scan as the served ledger families saw it (None before the first render)."""
        cur = self._current
        return cur.scan if cur is not None else None

    def changed(self) -> None:
        """The ledger may have changed (a scan ended): render now, not after the gap."""
        self._wake.set()

    def start(self) -> None:
        """Render now, then keep rendering in a thread of its own until :meth:`stop`."""
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="metrics-render", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            woken = self._wake.wait(self.poll)
            self._wake.clear()
            if self._stop.is_set():
                return
            now = time.monotonic()
            if not woken and (now - self._last_end < self.min_gap or self._credit(now) <= 0):
                continue
            try:
                self.refresh()
            except Exception:  # /metrics keeps its last render; the next change retries
                log.exception("/metrics: rendering the ledger's families failed")

    # --- serving -------------------------------------------------------------------------------
    def answer(
        self, accept: str | None, accept_encoding: str | None, names: list[str] | None = None
    ) -> tuple[list[tuple[str, str]], bytes]:
        """(headers, body) of a scrape, as prometheus_client's WSGI app negotiates them."""
        encoder, headers, gz = negotiate(accept, accept_encoding)
        cur = self._current
        if cur is None:  # before start(): a render of its own
            self.refresh()
            cur = self._current
            assert cur is not None
        if names:  # name[]: a few families chosen by the scraper, formatted for it (rare: no cache)
            registry = CollectorRegistry()
            registry.register(_Families(cur.families()))
            registry.register(_Families(list(self.per_scrape.collect())))
            data = encoder(registry.restricted_registry(names))
            body = gzip.compress(data, GZIP_LEVEL) if gz else data
        else:
            cached = self.ledger_body(encoder, gz, cur)[1]
            tail = encoder(self.per_scrape)
            body = cached.gzipped(tail) if gz else cached.data + tail
        return headers, body

    def ledger_body(self, encoder: Encoder, gz: bool, cur: _Rendered | None = None) -> tuple[_Rendered, _Body]:
        """The ledger's part of a scrape in ``encoder`` (``gz``: asked gzipped) from ``cur`` (else the last
        render), noted as asked for: what :meth:`answer` serves before the per-scrape families."""
        key = _variant(encoder)
        # Noted before the last render is read: a render stored after this has this encoding (refresh).
        self._want(key, encoder, gz)
        if cur is None:
            cur = self._current
            if cur is None:  # before start(): a render of its own
                self.refresh()
                cur = self._current
                assert cur is not None
        cached = cur.bodies.get(key)
        if cached is None:  # an encoding not asked for before: rendered once for this change
            cached = cur.bodies.setdefault(key, _Body([((-1, 0), _encode(encoder, cur.families()))]))
        return cur, cached

    def _want(self, key: tuple[Any, ...], encoder: Encoder, gz: bool) -> None:
        with self._lock:
            self._asked[key] = time.monotonic()
            had = self._wanted.get(key)
            if had is None and len(self._wanted) < MAX_VARIANTS:
                self._wanted[key] = (encoder, gz)
            elif had is not None and gz and not had[1]:
                self._wanted[key] = (encoder, True)


def _encode(encoder: Encoder, families: list[Metric]) -> bytes:
    """The families' exposition, without OpenMetrics' closing line (the per-scrape part ends it)."""
    data = encoder(_Families(families))
    return data[: -len(_OM_EOF)] if data.endswith(_OM_EOF) else data
