"""A factory's accounting as history: what the exporter's counters read at every step, in OpenMetrics.

``gwms-obs report --format openmetrics --step 300`` replays the pilots in the
order they ended into the exporter's own :class:`Ledger` and samples its
counters and histograms every ``step`` seconds, with the exporter's names and
labels (catalogue.py). Fed the scan's ``times`` and ``factory_log`` outlets too (as
``report`` does), it carries the time in queue (each pilot's, observed at its end
as the exporter observes it when it counts the pilot) and the factory log's
submissions, condor_submit failures and removals (each at the time the factory
logged it): what GwmsEntryQueueSlow and GwmsEntrySubmitFailing read. Holds and the
gauges of the present (held now, CE down) are not history.

``promtool tsdb create-blocks-from openmetrics`` turns the file into TSDB
blocks: the years a factory ran before gwms-obs, backfilled into its Prometheus
and shipped to Thanos (docs/scale-out.md). A sample at ``t`` counts the pilots
that ended at or before ``t``, so the last sample of a history equals what the
exporter serves for the same pilots.

Memory: every pilot's account is held until the end (they arrive in scan order,
not end order), and every series' samples until its family is written, since
OpenMetrics wants each series' samples together.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from ..accounting import ledger as L
from ..accounting.ledger import Histogram, Labels, Ledger
from ..accounting.pilot import PilotAccount
from ..catalogue import GLIDEINS_REMOVED, GLIDEINS_SUBMITTED, PILOT_GRID_QUEUE_TIME, PILOT_QUEUE_TIME, SUBMIT_FAILURES
from ..ingest.outlets import FactoryLogCount
from ..model import PilotTimes

# What a history carries: the ledger's tables that pilot accounts alone fill, and those its
# other outlets fill (the queue time needs the event log's times; the factory log's counts).
# The latter are written only when fed: a history of accounts alone has no queue time.
FED = {PILOT_QUEUE_TIME.name, PILOT_GRID_QUEUE_TIME.name, GLIDEINS_SUBMITTED.name, SUBMIT_FAILURES.name,
       GLIDEINS_REMOVED.name}  # fmt: skip
COUNTERS = tuple(t for t in L.COUNTERS if t.from_accounts or t.metric.name in FED)
HISTOGRAMS = tuple(t for t in L.HISTOGRAMS if t.from_accounts or t.metric.name in FED)


@dataclass
class History:
    """A report sink: pilots that ended inside [since, until), sampled every ``step`` seconds."""

    step: float = 300.0
    since: float | None = None
    until: float | None = None
    accounts: list[PilotAccount] = field(default_factory=list)
    times: dict[int, PilotTimes] = field(default_factory=dict)  # id(account) -> its event-log times
    factory_log: list[FactoryLogCount] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.step > 0 or math.isinf(self.step):
            raise ValueError(f"step must be a positive number of seconds, not {self.step}")

    def add(self, a: PilotAccount) -> None:
        if (self.since is None or a.end >= self.since) and (self.until is None or a.end < self.until):
            self.accounts.append(a)

    # its Outlets.times: called right after ``add`` with the same account
    def add_times(self, a: PilotAccount, times: PilotTimes) -> None:
        if self.accounts and self.accounts[-1] is a:
            self.times[id(a)] = times

    # its Outlets.factory_log
    def add_factory_log(self, c: FactoryLogCount) -> None:
        if (self.since is None or c.t >= self.since) and (self.until is None or c.t < self.until):
            self.factory_log.append(c)

    def instants(self) -> list[float]:
        """The sample times: multiples of ``step`` from the first pilot's end (or factory-log count) to the
        first at or after the last's."""
        ends = [a.end for a in self.accounts] + [c.t for c in self.factory_log]
        if not ends:
            return []
        first, last = math.ceil(min(ends) / self.step), math.ceil(max(ends) / self.step)
        return [k * self.step for k in range(first, last + 1)]

    def series(self) -> Iterator[Metric]:
        """The metric families, each series' samples together and in time order."""
        counters: list[dict[Labels, list[tuple[float, float]]]] = [defaultdict(list) for _ in COUNTERS]
        hists: list[dict[Labels, list[tuple[float, Histogram]]]] = [defaultdict(list) for _ in HISTOGRAMS]
        led = Ledger()
        pending = sorted(self.accounts, key=lambda a: a.end)
        logged = sorted(self.factory_log, key=lambda c: c.t)
        i = j = 0
        for t in self.instants():
            while i < len(pending) and pending[i].end <= t:
                led.add(pending[i], self.times.get(id(pending[i])))
                i += 1
            while j < len(logged) and logged[j].t <= t:
                _replay(led, logged[j])
                j += 1
            for out, c in zip(counters, COUNTERS, strict=True):
                for labels, v in c.read(led).items():
                    out[labels].append((t, float(v)))
            for hout, ht in zip(hists, HISTOGRAMS, strict=True):
                for labels, h in ht.read(led).items():
                    hout[labels].append((t, Histogram(h.bounds, list(h.counts), h.total)))
        for ct, samples in zip(COUNTERS, counters, strict=True):
            m = ct.metric
            if not samples and m.name in FED:
                continue
            fam = CounterMetricFamily(m.base, m.help, labels=list(m.labels))
            for labels, points in sorted(samples.items()):
                for t, v in points:
                    fam.add_metric(list(labels), v, timestamp=t)
            yield fam
        for hdef, hsamples in zip(HISTOGRAMS, hists, strict=True):
            m = hdef.metric
            if not hsamples and m.name in FED:
                continue
            hfam = HistogramMetricFamily(m.name, m.help, labels=list(m.labels))
            for labels, hpoints in sorted(hsamples.items()):
                for t, h in hpoints:
                    hfam.add_metric(list(labels), h.cumulative(), h.total, timestamp=t)
            yield hfam

    def to_openmetrics(self) -> str:
        """The history as an OpenMetrics text file, ``# EOF`` ended, for promtool's backfill."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Families(self))
        body: bytes = generate_latest(registry)  # type: ignore[no-untyped-call]  # untyped in prometheus_client
        return body.decode()


def _replay(led: Ledger, c: FactoryLogCount) -> None:
    """A factory-log count into the ledger as the factory-log stage adds it (ingest/factory_log.py)."""
    if c.what == "submitted":
        led.add_submitted(c.entry, c.label, c.site, c.n)
    elif c.what == "submit_failures":
        for _ in range(c.n):
            led.add_submit_failure(c.entry, c.site)
    elif c.what == "removed":
        led.add_removed(c.entry, c.site, c.label, c.n)


class _Families(Collector):
    def __init__(self, history: History) -> None:
        self.history = history

    def collect(self) -> Iterator[Metric]:
        yield from self.history.series()
