"""Where a scan's results go besides the ledger: the outlets, built once by a composition root.

Ingest may not import the outputs (docs/architecture.md, "Layers"), so each
outlet is typed by what it is called with, and the composition root that
builds the outputs fills it: ``daemon.run`` (the span forwarder and the pilot
traces), ``cli.cmd_report`` (the report or its history, a window's traces),
``analysis.collect.collect`` (the analysis's dataset). :class:`Outlets` is
handed to :class:`~gwms_obs.pipeline.Ingest`, which gives it to each stage;
a stage counts a pilot with :meth:`~gwms_obs.ingest.stage.Stage.count`:
``Books.account`` (the ledger, the seen set), then :meth:`Outlets.counted`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..accounting.pilot import PilotAccount
from ..catalogue import Source
from ..model import PilotTimes
from .books import PilotFacts

log = logging.getLogger("gwms_obs.ingest.outlets")

# Each counted pilot's account (outputs/report.py ``Report.add``, outputs/history.py ``History.add``).
AccountSink = Callable[[PilotAccount], None]
# Each span spool a pilot returned in its stderr, with the .err's path (tracing/outbox.py ``SpoolForwarder``).
SpoolSink = Callable[[bytes, str], None]
# Each counted pilot's account and what counted it (outputs/pilot_traces.py ``PilotTraces``).
TraceSink = Callable[[PilotAccount, PilotFacts], None]


@dataclass(frozen=True, slots=True)
class FactoryLogCount:
    """What the factory-log stage just added to the ledger, with the time the factory logged it:
    ``what`` is submitted (``label``: the client), submit_failures, or removed (``label``: the reason)."""

    entry: str
    site: str
    what: str
    label: str
    n: int
    t: float


# Each factory-log count (outputs/report.py ``Report.add_factory_log``: the window's).
FactoryLogSink = Callable[[FactoryLogCount], None]


@dataclass(frozen=True, slots=True)
class HoldCount:
    """A hold (012) the event-log stage just counted in the ledger: its entry, site, class and time."""

    entry: str
    site: str
    cls: str
    t: float


# Each hold counted (outputs/entry_health.py ``EntryHealth.add_hold``: the window's).
HoldSink = Callable[[HoldCount], None]
# Each counted pilot the event log holds, with its times (outputs/entry_health.py: its time in queue).
TimesSink = Callable[[PilotAccount, PilotTimes], None]


@dataclass(frozen=True, slots=True)
class Outlets:
    """The outputs a scan feeds as it counts; None: that output is off (and nothing is kept for it)."""

    accounts: AccountSink | None = None
    spools: SpoolSink | None = None
    traces: TraceSink | None = None
    # Writes the traces built so far before a checkpoint marks their pilots counted (a kill in
    # between counts them, and sends them, again, rather than never).
    flush_traces: Callable[[], object] | None = None
    factory_log: FactoryLogSink | None = None
    holds: HoldSink | None = None
    times: TimesSink | None = None
    progress: bool = False  # a progress bar on a terminal for long first scans

    def counted(self, acc: PilotAccount, source: Source, facts: PilotFacts | None, times: PilotTimes | None) -> None:
        """A pilot just counted (outside the ingest lock, which /metrics waits for).

        ``times``: the event log's times of it that ``Books.account`` found; a pilot with
        no key has no trace (nothing names it)."""
        if self.accounts is not None:
            self.accounts(acc)
        if self.times is not None and times is not None:
            self.times(acc, times)
        if self.traces is None or acc.key is None:
            return
        traced = facts or PilotFacts(source)
        traced.times = times
        try:
            self.traces(acc, traced)
        except Exception:  # tracing must never cost the accounting of a pilot
            log.exception("trace of pilot %s/%s.%s not built", acc.entry, acc.cluster, acc.proc)

    def spool(self, data: bytes, err_path: str) -> None:
        """A span spool a pilot returned in its .err (read only when ``spools`` is set)."""
        if self.spools is None:
            return
        try:
            self.spools(data, err_path)
        except Exception:  # tracing must never cost the accounting of a pilot
            log.exception("trace spool of %s not handled", err_path)

    def before_checkpoint(self) -> None:
        if self.flush_traces is not None:
            self.flush_traces()


NO_OUTLETS = Outlets()  # a scan that only fills its ledger (the tests, the benchmarks)
