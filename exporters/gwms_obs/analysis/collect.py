"""The spans of a factory tree and of Jaeger, joined with the accounting into samples.

The tree is read once by the pipeline (:class:`gwms_obs.pipeline.Ingest`), as
``gwms-obs report`` reads it: every counted pilot reaches its outlets'
``accounts`` as a :class:`PilotAccount`, and every span spool found in a pilot's
``job.C.P.err`` reaches their ``spools`` with the .err's path, which names the pilot. Spools are
validated by ``tracing.spool.parse_spool`` and masked by
``tracing.redact.scrub_resource_spans`` — the same code as the forwarder's.
Jaeger's spans come through ``tracing.jaeger.search``, one search per entry the
accounting counted (up to ``jaeger_limit`` traces each): where every pilot has a
trace (the exporter builds one per counted pilot, outputs/pilot_traces.py), one
search of the whole factory would hand its busiest entries the whole sample and
leave a small entry below ``outliers.MIN_SAMPLES``. Each search is also by the
factory's name (``gwms.factory``, as export names its traces): another factory
sharing the Jaeger may have entries of the same names, and its pilots are not
this tree's.

A span's entry, site and client are the factory's (the accounting's), never
what the pilot wrote, whenever the pilot is known: the .err's path for a
spool, ``gwms.entry`` + ``gwms.condor.cluster``/``proc`` for Jaeger (set by
the collector from the pilot's token, docs/tracing.md). A span seen both in a
spool and in Jaeger (the exporter forwards spools) is counted once.

A span beyond its pilot's life (``tracing.lifetime``: longer than any pilot,
longer than the accounting says its pilot lived, or outside its pilot root) is
no sample: one hostile pilot's 31-year script would otherwise be the p90, p99
and mean of that script at its entry. Each is counted as a parse error
(``trace_spool``, ``beyond_pilot_life``) and logged with its .err or trace.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from ..accounting.pilot import PilotAccount
from ..ingest.books import ScanResult
from ..ingest.config import IngestConfig
from ..ingest.outlets import Outlets
from ..model import PilotTimes
from ..outputs.entry_health import EntryHealth
from ..parse_errors import ParseErrors
from ..pipeline import Ingest
from ..tracing import conventions as C
from ..tracing import lifetime as L
from ..tracing.redact import scrub_resource_spans
from ..tracing.spool import SpoolError, parse_spool
from . import spans as S

log = logging.getLogger("gwms_obs.analysis")

_ERR_PATH: Final = re.compile(r"(?:^|/)entry_([^/]+)/job\.([0-9]{1,12})\.([0-9]{1,9})\.err$")
MAX_NAMES_PER_ENTRY: Final = 500  # distinct phase/script names an entry may have; pilots write the names
FACTORY_PHASES: Final = frozenset((C.LOG_PHASE_QUEUED, C.LOG_PHASE_HELD))  # from the event log, before the node
MIN_WINDOW_SECONDS: Final = 3600.0  # a shorter tree is scaled to a week from one hour


@dataclass(frozen=True, slots=True)
class Sample:
    """One span of a pilot, with the factory's labels and the accounting's size."""

    entry: str
    site: str
    client: str
    kind: str  # spans.KIND_PHASE or spans.KIND_SCRIPT
    name: str
    phase: str
    duration: float  # seconds
    pilot: str  # entry/cluster.proc
    cores: int | None  # None: the pilot is not in the accounting
    units: float | None  # canonical CPU units (the accounting's unit-seconds / lifetime)


@dataclass
class Dataset:
    samples: list[Sample] = field(default_factory=list)
    pilots: dict[str, int] = field(default_factory=dict)  # entry -> pilots in the accounting, in the window
    units: dict[str, float] = field(default_factory=dict)  # entry -> mean canonical CPU units of its pilots
    sites: dict[str, str] = field(default_factory=dict)
    since: float | None = None
    until: float | None = None
    first_end: float | None = None
    last_end: float | None = None
    spools: int = 0  # spools read from the tree
    jaeger_spans: int = 0  # pilot spans read from Jaeger
    dropped_names: int = 0  # spans past MAX_NAMES_PER_ENTRY
    beyond_life: int = 0  # spans beyond their pilot's life (tracing.lifetime)
    # Per entry, the window's holds by class, time in queue and the factory's entry logs' counts
    health: EntryHealth = field(default_factory=EntryHealth)

    @property
    def window_seconds(self) -> float:
        lo = self.since if self.since is not None else self.first_end
        hi = self.until if self.until is not None else self.last_end
        if lo is None or hi is None:
            return MIN_WINDOW_SECONDS
        return max(MIN_WINDOW_SECONDS, hi - lo)

    @property
    def weeks(self) -> float:
        return self.window_seconds / (7 * 86400.0)


def canonical_units(a: PilotAccount) -> float:
    """The pilot's canonical CPU units: its accounted CPU unit-seconds over its lifetime (its cores)."""
    total = sum(a.partition.cpu.values())
    if a.lifetime > 0 and total > 0:
        return total / a.lifetime
    return float(a.cpus)


def pilot_id(entry: str, cluster: int | None, proc: int | None) -> str:
    return f"{entry}/{cluster}.{proc}"


class Collector:
    """Accounts and spans, as the pipeline and Jaeger deliver them; :meth:`dataset` joins them."""

    def __init__(self, since: float | None = None, until: float | None = None) -> None:
        self.since = since
        self.until = until
        self.accounts: dict[tuple[str, int, int], PilotAccount] = {}
        self.all_accounts: list[PilotAccount] = []
        # (trace, span) -> (span, its pilot's key, from a spool, where it was read: .err path or Jaeger trace)
        self.spans: dict[tuple[str, str], tuple[S.Span, tuple[str, int, int] | None, bool, str]] = {}
        self.spools = 0
        self.jaeger_spans = 0
        self.errors = ParseErrors()
        self.health = EntryHealth(since, until)
        # pilot key -> its life as the factory's event log saw it (submit to end): what bounds the
        # factory-side phases (queued, held), which come before the worker node's life
        self.factory_life: dict[tuple[str, int, int], float] = {}

    def _wants(self, a: PilotAccount) -> bool:
        return (self.since is None or a.end >= self.since) and (self.until is None or a.end < self.until)

    # its Outlets.accounts
    def account(self, a: PilotAccount) -> None:
        if not self._wants(a):
            return
        self.all_accounts.append(a)
        if a.key is not None:
            self.accounts[a.key] = a

    # its Outlets.times
    def times(self, a: PilotAccount, t: PilotTimes) -> None:
        if a.key is not None and t.submitted is not None:
            self.factory_life[a.key] = max(a.end, t.ended if t.ended is not None else a.end) - t.submitted
        self.health.add_times(a, t)

    # its Outlets.spools
    def spool(self, data: bytes, path: str) -> None:
        m = _ERR_PATH.search(path.replace(os.sep, "/"))
        if m is None:
            return
        key = (m[1], int(m[2]), int(m[3]))
        try:
            parsed = parse_spool(data, path, self.errors)
        except SpoolError as e:
            self.errors.record("trace_spool", e.reason, path, None, str(e))
            return
        scrub_resource_spans(parsed.resource_spans)
        self.spools += 1
        for s in S.from_otlp(parsed.resource_spans):
            self.spans.setdefault((s.trace_id, s.span_id), (s, key, True, path))

    def add_jaeger(self, traces: Iterable[dict[str, Any]]) -> None:
        for s in S.from_jaeger(traces):
            self.jaeger_spans += 1
            key = (s.entry, s.cluster, s.proc) if s.cluster is not None and s.proc is not None else None
            self.spans.setdefault((s.trace_id, s.span_id), (s, key, False, f"jaeger trace {s.trace_id}"))

    def dataset(self) -> Dataset:
        d = Dataset(
            since=self.since, until=self.until, spools=self.spools, jaeger_spans=self.jaeger_spans, health=self.health
        )
        units: dict[str, list[float]] = {}
        for a in self.all_accounts:
            d.pilots[a.entry] = d.pilots.get(a.entry, 0) + 1
            units.setdefault(a.entry, []).append(canonical_units(a))
            d.sites[a.entry] = a.site
            d.first_end = a.end if d.first_end is None else min(d.first_end, a.end)
            d.last_end = a.end if d.last_end is None else max(d.last_end, a.end)
        d.units = {e: sum(v) / len(v) for e, v in units.items()}
        names: dict[str, set[str]] = {}
        windowed = self.since is not None or self.until is not None
        for s, key, from_spool, where in self.spans.values():
            if s.kind == S.KIND_PILOT:
                continue
            acc = self.accounts.get(key) if key is not None else None
            if acc is None and from_spool and windowed:
                continue  # its pilot ended outside the window (Jaeger's search is windowed already)
            life = acc.lifetime if acc is not None else None
            if s.phase in FACTORY_PHASES and key in self.factory_life:
                # The queue is the factory's record, before the node's life: bounded by the factory's
                # own submit-to-end, never by what a span claims (a spool's "queued" has no such record).
                life = self.factory_life[key]
            why = L.beyond_life(s.start, s.end, s.window, life)
            if why is not None:
                d.beyond_life += 1
                self.errors.record("trace_spool", L.REASON, where, None, f"span {s.span_id} {s.name[:60]!r} {why}")
                continue
            # The factory's names: the accounting's, else the .err's path (a spool) or the
            # collector's gwms.entry (Jaeger); never what a spool's resource claims.
            entry = acc.entry if acc is not None else key[0] if key is not None else s.entry
            seen = names.setdefault(entry, set())
            if s.name not in seen and len(seen) >= MAX_NAMES_PER_ENTRY:
                d.dropped_names += 1
                continue
            seen.add(s.name)
            d.samples.append(
                Sample(
                    entry=entry,
                    site=acc.site if acc is not None else d.sites.get(entry) or ("" if from_spool else s.site),
                    client=acc.client if acc is not None else "",
                    kind=s.kind,
                    name=s.name,
                    phase=s.phase,
                    duration=s.duration,
                    pilot=pilot_id(entry, s.cluster, s.proc) if key is None else pilot_id(*key),
                    cores=acc.cpus if acc is not None else None,
                    units=canonical_units(acc) if acc is not None else None,
                )
            )
        return d


def collect(
    factory_dir: str,
    monitor_dir: str | None = None,
    *,
    since: float | None = None,
    until: float | None = None,
    jaeger: str | None = None,
    jaeger_limit: int = 200,
    factory: str | None = None,
    lost_after_seconds: float = 3600.0,
    progress: bool = False,
    workers: int | None = None,
) -> tuple[Dataset, Ingest, ScanResult]:
    """Read the tree (and Jaeger) once; the Ingest and its scan are returned for errors and failed sources.

    ``factory``: the factory's name in its traces (``gwms.factory``); Jaeger's traces of another are
    left out. None: every factory's. Raises ``tracing.jaeger.JaegerError`` when Jaeger cannot be read.
    """
    c = Collector(since, until)
    ingest = Ingest(
        IngestConfig.one_shot(factory_dir, monitor_dir, lost_after_seconds, workers),  # as report reads it
        outlets=Outlets(
            accounts=c.account,
            spools=c.spool,
            holds=c.health.add_hold,
            times=c.times,
            factory_log=c.health.add_factory_log,
            progress=progress,
        ),
    )
    c.errors = ingest.errors  # a spool's bad lines are counted with the rest of the tree's
    res = ingest.scan()
    if jaeger:
        import time

        from ..tracing import jaeger as J

        hi = until if until is not None else time.time()
        lo = since if since is not None else hi - 7 * 86400
        entries: list[str | None] = [*sorted({a.entry for a in c.all_accounts})] or [None]
        for entry in entries:  # None: no pilot counted in the window, the whole factory's newest
            c.add_jaeger(J.search(jaeger, factory=factory, entry=entry, start=lo, end=hi, limit=jaeger_limit))
    return c.dataset(), ingest, res
