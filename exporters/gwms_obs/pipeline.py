"""Sources → accounting: one incremental scan of a factory's files into a Ledger.

A pilot is counted once, from its best source (docs/accounting.md, "Which
source wins"; :meth:`gwms_obs.ingest.resolve.Holds.winner`). Each source is a
stage of :mod:`gwms_obs.ingest`; :meth:`Ingest.scan` runs them in this order,
which is written here and nowhere else:

1. entry descriptions (site, GLIDEIN_CPUS, GPUs for pilots that do not say);
2. one walk of the client directories (the pilots' files, the event logs); when
   a listed user has no frontend name yet, the completed_jobs lines this scan
   will read are searched for it first;
3. new event-log events, before the files they time: a pilot that ended and is
   not counted waits, and a pilot the next steps count takes its submit,
   queue and holds from them (on a first scan too, when every ``.out`` is
   counted at once);
4. the pilots' own files: every ``job.C.P.out`` present is the pilot's source,
   read once it has settled (checkpoint);
5. new completed_jobs lines; a line of a pilot not yet counted waits. Then the
   pilots whose frontend had no name, which these lines may have taught
   (checkpoint);
6. entry status (schedd_status.xml), then the VO frontend's (frontend_status.xml,
   on a frontend host: with no factory_dir, the only step);
   then the factory's own entry logs (submissions, condor_submit failures, removals);
7. the fallbacks, only for pilots whose .out is really absent (or unusable):
   the completed_jobs line first, then, ``lost_after_seconds`` after its end,
   the event log;
8. forget what is gone, and save the checkpoint.

A watching daemon (:meth:`Ingest.watch`, ingest/watch.py) runs this full scan at start and
every ``full_scan_seconds``; in between, each tick runs the same steps on what the inotify
events say changed (and the pilots still waiting to settle), prunes nothing, and saves the
checkpoint at most every ``CHECKPOINT_SECONDS`` (so do the full scans after the first).

A step that fails is counted as ``scan_failed`` under its stage's first
source, and the other steps go on. All state is saved in one checkpoint file
(:mod:`gwms_obs.ingest.checkpoint`) written atomically, and a watching daemon's
ticks append what changed since to its journal, so a restart neither re-counts
nor loses a pilot.
"""

from __future__ import annotations

import calendar
import contextlib
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from .accounting.ledger import Ledger
from .accounting.pilot import EntryDefaults
from .catalogue import Source
from .ingest import checkpoint
from .ingest.books import Books, Health, Listing, ScanResult
from .ingest.completed_jobs import CompletedJobsStage
from .ingest.condor_event_log import CondorEventLogStage
from .ingest.config import IngestConfig
from .ingest.descript import DescriptStage
from .ingest.entry_status import EntryStatusStage
from .ingest.factory_log import FactoryLogStage
from .ingest.frontend_status import FrontendStatusStage
from .ingest.glidein_files import GlideinFilesStage
from .ingest.outlets import NO_OUTLETS, Outlets
from .ingest.stage import Scan, Stage
from .ingest.watch import Changes, Discovery
from .parse_errors import ParseErrors

log = logging.getLogger("gwms_obs.pipeline")
# A span per step of a scan, under the daemon's "scan" span: a no-op unless the SDK is
# configured from the OTEL_* variables (outputs/self_trace.py, docs/tracing.md).
_tracer = trace.get_tracer("gwms_obs.pipeline")


# The day in a completed_jobs or event log's name.
_LOG_DAY = re.compile(r"_(\d{8})(?:_|\.log(?:\.\d+)?$)")  # .log.N: rotated
# A watched daemon's ticks save the checkpoint at most this often (seconds); a full scan saves at its
# steps. A tick appends what changed to the journal (~0.1 s of CPU and 2.8 MB at 301,040 pilots, half of
# it the ledger and cursors written whole), where a whole checkpoint is 1.2-1.6 s and 39 MB. A kill loses
# at most this much progress, re-read at the next start.
CHECKPOINT_SECONDS = 300.0
# ... and look at every held line and event-log end this often when nothing they wait for changed: the
# event log holds each lost pilot lost_after_seconds (an hour), thousands at a large factory.
SETTLE_SECONDS = 60.0


class Ingest:
    def __init__(
        self,
        cfg: IngestConfig,
        *,
        outlets: Outlets = NO_OUTLETS,
        clock: Callable[[], float] = time.time,
        errors: ParseErrors | None = None,
    ) -> None:
        """``outlets``: where what the scans count goes besides the ledger (ingest/outlets.py);
        ``errors``: the parse errors to count into, when the outputs built first count into them too."""
        self.cfg = cfg
        self.outlets = outlets
        self.books = Books(cfg, clock, errors)
        b = self.books
        self.descript = DescriptStage(b, outlets)
        self.pilot_files = GlideinFilesStage(b, outlets)
        self.lines = CompletedJobsStage(b, outlets)
        self.events = CondorEventLogStage(b, outlets)
        self.status = EntryStatusStage(b, outlets)
        self.frontend = FrontendStatusStage(b, outlets)
        self.factory_log = FactoryLogStage(b, outlets)
        # Every stage, in precedence order (ingest.STAGES): their checkpoint parts, their prune.
        self.stages: list[Stage] = [
            self.descript,
            self.pilot_files,
            self.lines,
            self.events,
            self.status,
            self.frontend,
            self.factory_log,
        ]
        self.books.health.started = clock()
        self.discovery: Discovery | None = None  # None: every scan is a full one (report, scan mode)
        self._saved_mark: tuple[int, ...] = ()  # the state the checkpoint on disk holds
        self._saved_at = float("-inf")
        self._journal: checkpoint.Journal | None = None  # after a base this process wrote
        self._settled_at = float("-inf")  # when a watched tick last looked at every held line and end
        self.last_scan_full = False  # whether the last scan was a full one (else a watched tick)
        self._tick_saves = False  # whether this full scan saves the checkpoint as a tick does
        data = None
        if cfg.checkpoint and not cfg.reset_checkpoint:
            data = checkpoint.load(cfg.checkpoint, cfg.factory_dir, self._torn)
        try:
            if data is not None:
                self.books.restore(data)
            for stage in self.stages:
                stage.restore(data or {})
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
            assert cfg.checkpoint
            raise checkpoint.wrong_shape(cfg.checkpoint, e) from e

    # What the outputs and the CLI read (under ``lock``).
    @property
    def ledger(self) -> Ledger:
        return self.books.ledger

    @property
    def errors(self) -> ParseErrors:
        return self.books.errors

    @property
    def health(self) -> Health:
        return self.books.health

    @property
    def lock(self) -> Any:
        return self.books.lock

    @property
    def clock(self) -> Callable[[], float]:
        return self.books.clock

    @property
    def defaults(self) -> dict[str, EntryDefaults]:
        return self.books.defaults

    @property
    def seen(self) -> dict[str, float]:
        return self.books.counted.seen

    def held(self, source: Source) -> dict[str, Any]:
        """What ``source`` holds for pilots not counted yet (a line, an event-log end)."""
        return self.books.holds.of(source)

    def client_of(self, username: str) -> str | None:
        return self.books.names.of(username)

    # --- one scan -------------------------------------------------------------------------------
    def scan(self) -> ScanResult:
        b = self.books
        self.last_scan_full = True
        t0 = b.clock()
        res = ScanResult()

        def phase(source: Source, fn: Callable[..., Any], *args: Any) -> Any:
            """Run one step of a source; its failure is counted and logged, the others go on."""
            span = _tracer.start_span(f"{source.value} {getattr(fn, '__name__', 'step')}")
            try:
                with trace.use_span(span, record_exception=False, set_status_on_exception=False):
                    return fn(*args)
            except Exception as e:  # a bug or a hostile file in one source must not stop the rest
                span.set_status(Status(StatusCode.ERROR, type(e).__name__))  # the message may quote a pilot's file
                log.error("scan: %s failed: %s: %s", source.value, type(e).__name__, e, exc_info=True)
                b.errors.record(source, "scan_failed", self.cfg.factory_dir, None, f"{type(e).__name__}: {e}")
                with b.lock:
                    b.health.backlog.setdefault(source, t0)  # its lag grows until it succeeds
                res.failed.append(source.value)
                return None
            finally:
                span.end()

        def read(stage: Stage, found: Sequence[Any] | None = None) -> None:
            """Read what the stage finds (``found``: what changed, from the watch)."""
            if found is None:
                found = phase(stage.source, stage.discover, scan)
            if found is not None:
                phase(stage.source, stage.read, scan, found)

        scan = Scan(t0, None, res, self.save_checkpoint)
        if not self.cfg.factory_dir:  # a VO frontend's host with no factory
            read(self.frontend)  # 6
            with b.lock:
                b.health.last_scan_end = b.clock()
                b.health.last_scan_duration = b.health.last_scan_end - t0
            return res
        d = self.discovery
        # A watching daemon's full scan after its first (periodic, or a queue overflow) saves as
        # its ticks do; its first saves at each step, as a backfill's progress.
        self._tick_saves = d is not None and d.listing is not None
        changes = d.begin() if d is not None else None
        if d is not None and not d.watching:  # fell back for good (the watch limit): scans from now on
            self.discovery = d = None
        if changes is not None:  # watched: only what changed since the last tick
            self.last_scan_full = False
            self._read_changes(changes, scan, phase, read)
            return res
        read(self.descript)  # 1
        if d is not None:
            d.before_listing()  # every directory watched before it is listed
        scan.listing = phase(self.pilot_files.source, b.list_clients)  # 2
        if d is not None and scan.listing is not None:
            d.adopt(scan.listing)
        if b.names.unmapped:
            phase(self.lines.source, self.lines.name_clients, scan)
        read(self.events)  # 3
        read(self.pilot_files)  # 4
        self._save_step()
        read(self.lines)  # 5
        phase(self.pilot_files.source, self.pilot_files.settle, scan)
        self._save_step()
        read(self.status)  # 6
        read(self.frontend)
        read(self.factory_log)
        phase(self.lines.source, self.lines.settle, scan)  # 7
        phase(self.events.source, self.events.settle, scan)
        if scan.listing is not None:  # 8
            self._prune(scan.listing)
        now = b.clock()
        with b.lock:
            b.health.last_scan_end = now
            b.health.last_scan_duration = now - t0
        self._save_step()
        return res

    def _save_step(self) -> None:
        """The checkpoint at a full scan's step. A watching daemon's hourly scan saves as a tick
        does (a journal record when the state changed, at most every CHECKPOINT_SECONDS): a whole
        checkpoint is ~1.3 s of CPU at 301,040 pilots, and its three were half of that scan's cost."""
        if not self._tick_saves:
            self.save_checkpoint()
        else:
            self._save_when_due()  # its prune's forgotten pilots too

    def _save_when_due(self) -> None:
        """A watching daemon's save: a journal record when the state changed, at most every
        CHECKPOINT_SECONDS (a whole checkpoint each second would cost more than the tick)."""
        if self._state_mark() != self._saved_mark and self.books.clock() - self._saved_at >= CHECKPOINT_SECONDS:
            self.save_checkpoint(journal=True)

    def watch(self) -> bool:
        """Discover by inotify events from now on (the daemon; ``report`` scans in full): a full
        scan at the first call of :meth:`scan` and every ``full_scan_seconds``, and in
        between, ticks that read only what changed (ingest/watch.py). False: scanning instead
        (the config, or a fallback: logged and counted)."""
        cfg = self.cfg
        self.discovery = Discovery(
            cfg.factory_dir,
            cfg.monitor,
            full_scan_seconds=cfg.full_scan_seconds,
            count=self._fell_back,
            mode=cfg.discovery,
        )
        if not self.discovery.watching:
            self.discovery = None
        return self.discovery is not None

    def _fell_back(self, reason: str) -> None:
        with self.books.lock:
            self.books.health.discovery_fallbacks[reason] += 1

    def _read_changes(self, ch: Changes, scan: Scan, phase: Callable[..., Any], read: Callable[..., None]) -> None:
        """An incremental scan: the same steps as a full one (the module's docstring) on what the
        watch saw change, and the pilots still waiting to settle; no prune (the full scans do)."""
        b = self.books
        d = self.discovery
        assert d is not None and d.listing is not None
        files = dict(b.health.files)  # the full scan's counts of what the tick does not list
        if ch.monitor:
            read(self.descript)  # 1
        scan.listing = d.listing  # 2: the last full scan's, as the events changed it
        if ch.users:
            b.names.listed(ch.users)
        if b.names.unmapped:
            phase(self.lines.source, self.lines.name_clients, scan)
        if logs := d.logs(ch):
            read(self.events, logs)  # 3
        pilots = d.pilots(ch, [*self.pilot_files.unsettled, *self.pilot_files.unmapped_since])
        if pilots:
            read(self.pilot_files, pilots)  # 4
        if completed := d.completed(ch, b.once):
            read(self.lines, completed)  # 5
        phase(self.pilot_files.source, self.pilot_files.settle, scan)
        if ch.monitor:
            read(self.status)  # 6
        if self.cfg.frontend_monitor_dir:  # not watched: a few group files, looked at each tick
            read(self.frontend)
        if self.factory_log.due(scan.t0):  # the watch does not name these logs: read them every few ticks
            read(self.factory_log)
        # 7: when what they wait for changed, else once a SETTLE_SECONDS (a lost pilot's hour is long)
        now = b.clock()
        slow = now - self._settled_at >= SETTLE_SECONDS
        if slow:
            self._settled_at = now
        if slow or ch.pilots or completed:
            phase(self.lines.source, self.lines.settle, scan)
        if slow or ch.pilots or completed or logs:
            phase(self.events.source, self.events.settle, scan)
        now = b.clock()
        with b.lock:
            for src in (Source.DESCRIPT, Source.COMPLETED_JOBS, Source.SCHEDD_STATUS):
                if src in files:
                    b.health.files[src] = files[src]
            b.health.files[Source.GLIDEIN_OUT] = len(scan.listing.present)
            b.health.files[Source.CONDOR_EVENT_LOG] = len(scan.listing.logs)
            b.health.last_scan_end = now
            b.health.last_scan_duration = now - scan.t0
        self._save_when_due()  # 8

    def close(self) -> None:
        """The daemon stops: what the last ticks changed is saved, the watch closed."""
        if self._state_mark() != self._saved_mark:
            self.save_checkpoint()
        if self.discovery is not None:
            self.discovery.close()

    def _state_mark(self) -> tuple[int, ...]:
        """Changes whenever the checkpoint's content would (what a tick can change of it)."""
        b = self.books
        h = b.holds
        return (
            b.ledger.version,
            sum(b.health.bytes_read.values()),
            len(b.counted.seen),
            len(b.counted.bad_out),
            len(h.lines),
            len(h.ends),
            len(b.follower.cursors),
        )

    def _prune(self, listing: Listing) -> None:
        """Forget counted pilots whose files are gone, after the retention window, and only
        once no log still on disk can name them (else a log re-read from its start, say
        after its inode changed, would count them again).

        The factory's logs are per day; a pilot is named only in logs of days up to one
        after it was counted, so one counted a day before the oldest log's day is named
        by none.
        """
        b = self.books
        present = listing.present
        cutoff = b.clock() - self.cfg.seen_retention_seconds
        days = [m[1] for p in b.follower.cursors if (m := _LOG_DAY.search(os.path.basename(p)))]
        if days:
            with contextlib.suppress(ValueError, OverflowError):
                oldest = calendar.timegm(time.strptime(min(days), "%Y%m%d"))
                cutoff = min(cutoff, oldest - 86400.0)
        with b.lock:
            b.counted.forget(cutoff, present)
            for stage in self.stages:
                stage.prune(listing)
            b.follower.forget_missing(p for p in list(b.follower.cursors) if os.path.exists(p))

    # --- checkpoint -----------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        with self.books.lock:
            out: dict[str, Any] = {
                "version": checkpoint.VERSION,
                "factory_dir": os.path.abspath(self.cfg.factory_dir),
                **self.books.state(),
            }
            for stage in self.stages:
                out.update(stage.state())
            return out

    def save_checkpoint(self, journal: bool = False) -> None:
        """Write the checkpoint now (each scan does at its steps; a long read every minute).

        ``journal``: what changed since the last checkpoint is appended to its journal instead (a
        watching daemon's ticks), unless a base is due: none written by this process yet (a journal
        is appended only after a base it wrote), the journal past its bound (the base's size), or the
        last write failed."""
        if self.cfg.checkpoint:
            self.outlets.before_checkpoint()  # the traces of the pilots this checkpoint marks counted
            parts: list[Books | Stage] = [self.books, *self.stages]
            j, self._journal = self._journal, None  # until this write is done: a failed one leaves a base due
            ops = self._changes(parts) if journal and j is not None and not j.full() else None
            if ops is not None and j is not None:
                j.append(ops)
                self._journal = j
            else:
                self._journal = checkpoint.write(self.cfg.checkpoint, self.state())
            for part in parts:
                part.saved()
        self._saved_mark = self._state_mark()
        self._saved_at = self.books.clock()

    def _changes(self, parts: list[Books | Stage]) -> list[checkpoint.Op] | None:
        """A journal record's operations (None: a part needs a base)."""
        ops: list[checkpoint.Op] = []
        with self.books.lock:
            for part in parts:
                changed = part.changes()
                if changed is None:
                    return None
                ops += changed
        return ops

    def _torn(self, path: str, offset: int, why: str) -> None:
        """A journal's tail that a load ignores (a kill mid-append, a full disk): the records before it
        hold the state of their time, as a whole checkpoint of that time would."""
        self.books.errors.record("checkpoint", "torn_journal", path, offset, why)
