"""Sources → accounting: one incremental scan of a factory's files into a Ledger.

Order inside a scan, so every pilot is counted once and from its best source:

1. entry descriptions (site labels, GLIDEIN_CPUS for pilots that do not say);
2. glidein .out/.err that have settled (not written for ``settle_seconds``);
3. new completed_jobs lines of pilots whose .out is gone;
4. new event-log events; a pilot that ended ``lost_after_seconds`` ago with no
   .out and no completed_jobs line is counted as lost;
5. entry status (schedd_status.xml).

All state — the ledger, log cursors, the pilots already counted, the event-log
timeline — is saved in one checkpoint file written atomically after each
phase, so a restart neither re-counts nor loses a pilot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import os
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .accounting.ledger import Ledger
from .accounting.partition import DEFAULT_RULES, Rules
from .accounting.pilot import EntryDefaults, PilotAccount, from_completed_job, from_event_log, from_glidein
from .follow import Follower
from .model import CompletedJob, EntryDescript, PilotTimes
from .parse_errors import ParseErrors
from .registry import Source
from .sources import completed_jobs, condor_eventlog, descript, glidein_err, glidein_out, schedd_status, tree

log = logging.getLogger("gwms_obs.pipeline")

CHECKPOINT_VERSION = 1


class CheckpointError(RuntimeError):
    """The checkpoint cannot be used: corrupt, another version, another factory, wrong shape.

    The exporter refuses to start rather than silently re-count or merge
    (docs/runbooks.md says how to recover; ``--reset-checkpoint`` starts over).
    """


Key = tuple[str, int, int]


def key_str(k: Key) -> str:
    return f"{k[0]}/{k[1]}.{k[2]}"


@dataclass(slots=True)
class IngestConfig:
    factory_dir: str
    monitor_dir: str | None = None  # default: <factory_dir>/monitor
    checkpoint: str | None = None  # None: keep state in memory only (one-shot reports)
    settle_seconds: float = 30.0  # a .out younger than this may still be arriving
    lost_after_seconds: float = 3600.0  # as the factory: wait this long for a .out
    seen_retention_seconds: float = 2 * 86400.0  # remember counted pilots this long after their files go
    max_file_bytes: int = 64 << 20
    rules: Rules = DEFAULT_RULES
    reset_checkpoint: bool = False  # ignore (and overwrite) an existing checkpoint

    @property
    def monitor(self) -> str:
        return self.monitor_dir or os.path.join(self.factory_dir, "monitor")


@dataclass
class Health:
    records: Counter[str] = field(default_factory=Counter)
    bytes_read: Counter[str] = field(default_factory=Counter)
    files: dict[str, int] = field(default_factory=dict)
    caught_up: dict[str, float] = field(default_factory=dict)  # source -> when it last had nothing left
    last_scan_end: float | None = None
    last_scan_duration: float | None = None


@dataclass(slots=True)
class ScanResult:
    pilots: int = 0
    by_source: Counter[str] = field(default_factory=Counter)


class Ingest:
    def __init__(
        self,
        cfg: IngestConfig,
        *,
        sink: Callable[[PilotAccount], None] | None = None,
        clock: Callable[[], float] = time.time,
        progress: bool = False,
        spool_sink: Callable[[bytes, str], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.sink = sink
        # Gets (span spool, .err path) of each pilot that returned its spans in
        # its stderr (tracing.spool.SpoolForwarder); None: spools are ignored.
        self.spool_sink = spool_sink
        self.clock = clock
        self.progress = progress
        self.lock = threading.RLock()  # held while state changes; the collector reads under it
        self.ledger = Ledger()
        self.errors = ParseErrors()
        self.health = Health()
        self.follower = Follower()
        self.seen: dict[str, float] = {}  # key -> when counted
        self.timeline = condor_eventlog.PilotTimeline()
        self.waiting: dict[str, PilotTimes] = {}  # ended in the event log, no .out (yet)
        self.client_by_user: dict[str, str] = {}  # learned from .out paths, for completed_jobs lines
        self.defaults: dict[str, EntryDefaults] = {}
        self.status_mtimes: dict[str, float] = {}
        if cfg.checkpoint and not cfg.reset_checkpoint:
            self._load()

    # --- one scan -------------------------------------------------------------------------------
    def scan(self) -> ScanResult:
        t0 = self.clock()
        res = ScanResult()
        self._descripts()
        client_dirs = list(tree.entry_dirs(self.cfg.factory_dir))
        listings = [(user, entry, *tree.scan_client_dir(user, entry, d)) for user, entry, d in client_dirs]
        present: set[str] = set()
        for _, _, pilots, _ in listings:
            present.update(key_str(p.key) for p in pilots)
        self._pilots([p for *_, pilots, _ in listings for p in pilots], res)
        self._checkpoint()
        self._completed(res)
        self._checkpoint()
        self._event_logs([f for *_, logs in listings for f in logs], res)
        self._entry_status()
        self._prune(present)
        now = self.clock()
        with self.lock:
            self.health.last_scan_end = now
            self.health.last_scan_duration = now - t0
        self._checkpoint()
        return res

    def _account(self, acc: PilotAccount, res: ScanResult, source: str) -> None:
        k = acc.key
        with self.lock:
            self.ledger.add(acc)
            if k is not None:
                self.seen[key_str(k)] = self.clock()
                self.waiting.pop(key_str(k), None)
        res.pilots += 1
        res.by_source[source] += 1
        if self.sink is not None:
            self.sink(acc)

    def _descripts(self) -> None:
        for entry, d in tree.monitor_entries(self.cfg.monitor):
            path = os.path.join(d, "descript.xml")
            if not os.path.exists(path):
                continue
            for ed in descript.read_descript(path, self.errors):
                self.defaults[ed.entry or entry] = entry_defaults(ed)
        self.health.files[Source.DESCRIPT] = len(self.defaults)

    def _pilots(self, pilots: list[tree.PilotFiles], res: ScanResult) -> None:
        now = self.clock()
        todo = [p for p in pilots if key_str(p.key) not in self.seen]
        self.health.files[Source.GLIDEIN_OUT] = len(pilots)
        bar = _progress(len(todo), "pilots") if self.progress and len(todo) > 1000 else None
        last_save = now
        for p in todo:
            if bar is not None:
                bar.update(1)
            try:
                st = os.stat(p.out)
            except OSError:
                continue  # deleted since the listing
            if now - st.st_mtime < self.cfg.settle_seconds:
                continue  # still arriving; not lag, the next scan takes it
            out = glidein_out.read_out(p.out, self.errors, self.cfg.max_file_bytes)
            self.health.bytes_read[Source.GLIDEIN_OUT] += st.st_size
            if out is None:
                self._mark_seen(p)  # counted as a parse error; do not retry every scan
                continue
            err = None
            if p.has_err:  # known from the directory listing: no extra stat per pilot
                err = glidein_err.read_err(p.err, self.errors, detail=False)
                if err is not None and err.trace_spool is not None and self.spool_sink is not None:
                    try:
                        self.spool_sink(err.trace_spool, p.err)
                    except Exception:  # tracing must never cost the accounting of a pilot
                        log.exception("trace spool of %s not handled", p.err)
                with contextlib.suppress(OSError):
                    self.health.bytes_read[Source.GLIDEIN_ERR] += os.path.getsize(p.err)
                if err is not None:
                    self.health.records[Source.GLIDEIN_ERR] += 1
            self.health.records[Source.GLIDEIN_OUT] += 1
            if out.client:
                self.client_by_user[p.username] = out.client
            acc = from_glidein(
                out,
                err,
                self.defaults.get(out.entry or p.entry),
                entry=p.entry,
                client=out.client,
                end_hint=st.st_mtime,
                rules=self.cfg.rules,
            )
            if acc is None:
                self.errors.record(Source.GLIDEIN_OUT, "no_times", p.out)
                self._mark_seen(p)
                continue
            # The path's entry/cluster/proc are the key the other sources use.
            acc.entry, acc.cluster, acc.proc = p.entry, p.cluster, p.proc
            self._account(acc, res, Source.GLIDEIN_OUT)
            if self.clock() - last_save > 60:
                self._checkpoint()
                last_save = self.clock()
        if bar is not None:
            bar.close()
        self.health.caught_up[Source.GLIDEIN_OUT] = self.clock()

    def _mark_seen(self, p: tree.PilotFiles) -> None:
        with self.lock:
            self.seen[key_str(p.key)] = self.clock()

    def _completed(self, res: ScanResult) -> None:
        paths = list(tree.completed_logs(self.cfg.factory_dir))
        self.health.files[Source.COMPLETED_JOBS] = len(paths)

        def sink(lines: list[completed_jobs.RawLine | CompletedJob], entry: str, path: str) -> None:
            self.health.records[Source.COMPLETED_JOBS] += len(lines)
            seen = self.seen
            keys = completed_jobs.line_keys(lines, entry)
            # Counted from its .out: the usual case, filtered in one comprehension, nothing converted.
            for k, raw in [(k, raw) for k, raw in zip(keys, lines, strict=True) if k not in seen]:
                if k in seen:
                    continue  # a repeated line of a pilot this batch just counted
                line = completed_jobs.to_record(raw, entry)
                if isinstance(line, str):
                    self.errors.record(Source.COMPLETED_JOBS, line, path)
                    continue
                acc = from_completed_job(line, self.defaults.get(entry), client=self.client_by_user.get(line.username))
                if acc is not None:
                    self._account(acc, res, Source.COMPLETED_JOBS)

        for entry, path in paths:
            try:
                n = self.follower.read_new(
                    path,
                    functools.partial(self._scan_completed, entry=entry),
                    functools.partial(sink, entry=entry, path=path),
                )
            except OSError as e:
                self.errors.record(Source.COMPLETED_JOBS, "unreadable", path, None, str(e))
                continue
            self.health.bytes_read[Source.COMPLETED_JOBS] += n
        self.health.caught_up[Source.COMPLETED_JOBS] = self.clock()

    def _scan_completed(
        self, buf: bytes, path: str, offset: int, entry: str
    ) -> tuple[list[completed_jobs.RawLine | CompletedJob], int]:
        return completed_jobs.scan_buffer(buf, path, offset, self.errors, entry)

    def _event_logs(self, logs: list[tree.EventLogFile], res: ScanResult) -> None:
        self.health.files[Source.EVENT_LOG] = len(logs)
        for f in logs:

            def sink(events: list[condor_eventlog.CondorEvent], f: tree.EventLogFile = f) -> None:
                self.health.records[Source.EVENT_LOG] += len(events)
                for t in self.timeline.feed(events, f.path):
                    k = key_str((f.entry, t.cluster, t.proc))
                    if k not in self.seen and t.ended is not None:
                        self.waiting[k] = t

            try:
                n = self.follower.read_new(
                    f.path, lambda b, p, o: condor_eventlog.parse_buffer(b, p, o, self.errors), sink
                )
            except OSError as e:
                self.errors.record(Source.EVENT_LOG, "unreadable", f.path, None, str(e))
                continue
            self.health.bytes_read[Source.EVENT_LOG] += n
        now = self.clock()
        # Pilots silent for weeks (held forever, or their end rotated away) are dropped, not guessed.
        self.timeline.expire(now)
        for k, t in list(self.waiting.items()):
            if k in self.seen:
                del self.waiting[k]
            elif t.ended is not None and now - t.ended >= self.cfg.lost_after_seconds:
                del self.waiting[k]
                acc = from_event_log(t, self.defaults.get(t.entry or ""))
                if acc is not None:
                    self._account(acc, res, Source.EVENT_LOG)
        self.health.caught_up[Source.EVENT_LOG] = self.clock()

    def _entry_status(self) -> None:
        n = 0
        for entry, d in tree.monitor_entries(self.cfg.monitor):
            path = os.path.join(d, "schedd_status.xml")
            try:
                mtime = os.stat(path).st_mtime
            except OSError:
                continue
            n += 1
            if self.status_mtimes.get(path) == mtime:
                continue
            st = schedd_status.read_schedd_status(path, self.errors)
            self.status_mtimes[path] = mtime
            if st is None:
                continue
            self.health.records[Source.SCHEDD_STATUS] += 1
            site = (self.defaults.get(st.entry or entry) or EntryDefaults()).site or "unknown"
            with self.lock:
                self.ledger.update_entry(st, site)
        self.health.files[Source.SCHEDD_STATUS] = n
        self.health.caught_up[Source.SCHEDD_STATUS] = self.clock()

    def _prune(self, present: set[str]) -> None:
        """Forget counted pilots whose files are gone, after the retention window."""
        cutoff = self.clock() - self.cfg.seen_retention_seconds
        with self.lock:
            for k in [k for k, t in self.seen.items() if t < cutoff and k not in present]:
                del self.seen[k]
            self.follower.forget_missing(p for p in list(self.follower.cursors) if os.path.exists(p))

    # --- checkpoint -----------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        with self.lock:
            return {
                "version": CHECKPOINT_VERSION,
                "factory_dir": os.path.abspath(self.cfg.factory_dir),
                "ledger": self.ledger.to_json(),
                "cursors": self.follower.to_json(),
                "seen": self.seen,
                "waiting": {k: dataclasses.asdict(t) for k, t in self.waiting.items()},
                "timeline": self.timeline.to_json(),
                "client_by_user": self.client_by_user,
            }

    def _checkpoint(self) -> None:
        if not self.cfg.checkpoint:
            return
        data = json.dumps(self.state(), separators=(",", ":")).encode()
        d = os.path.dirname(os.path.abspath(self.cfg.checkpoint))
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".checkpoint.", dir=d)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.cfg.checkpoint)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def _load(self) -> None:
        assert self.cfg.checkpoint
        try:
            with open(self.cfg.checkpoint, "rb") as f:
                data = json.load(f)
        except FileNotFoundError:
            return
        except (OSError, ValueError) as e:
            # Refuse rather than silently start from zero and re-count everything.
            raise CheckpointError(f"checkpoint {self.cfg.checkpoint} unreadable: {e}") from e
        if not isinstance(data, dict):
            raise CheckpointError(f"checkpoint {self.cfg.checkpoint} is not a gwms-obs checkpoint (not a JSON object)")
        if data.get("version") != CHECKPOINT_VERSION:
            raise CheckpointError(
                f"checkpoint {self.cfg.checkpoint} has version {data.get('version')}, expected {CHECKPOINT_VERSION}"
            )
        mine, theirs = os.path.abspath(self.cfg.factory_dir), data.get("factory_dir")
        if theirs != mine:
            raise CheckpointError(
                f"checkpoint {self.cfg.checkpoint} belongs to factory {theirs}, not {mine}: "
                "use another checkpoint file, or --reset-checkpoint to start over"
            )
        try:
            self._restore(data)
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as e:
            raise CheckpointError(
                f"checkpoint {self.cfg.checkpoint} has the wrong shape ({type(e).__name__}: {e}); "
                "see docs/runbooks.md, or --reset-checkpoint to start over"
            ) from e

    def _restore(self, data: dict[str, Any]) -> None:
        self.ledger = Ledger.from_json(data.get("ledger", {}))
        self.follower = Follower.from_json(data.get("cursors", {}))
        self.seen = {str(k): float(v) for k, v in data.get("seen", {}).items()}
        self.waiting = {str(k): PilotTimes(**v) for k, v in data.get("waiting", {}).items()}
        self.timeline = condor_eventlog.PilotTimeline.from_json(data.get("timeline", {}))
        self.client_by_user = {str(k): str(v) for k, v in data.get("client_by_user", {}).items()}


def entry_defaults(ed: EntryDescript) -> EntryDefaults:
    def num(*names: str) -> int | None:
        for n in names:
            for src in (ed.attributes, ed.params, ed.descript):
                v = src.get(n)
                if v is not None and v.strip().isdigit() and int(v) > 0:
                    return int(v)
        return None

    return EntryDefaults(
        site=ed.site, cpus=num("GLIDEIN_CPUS", "GLIDEIN_ESTIMATED_CPUS"), memory_mb=num("GLIDEIN_MaxMemMBs")
    )


def _progress(total: int, unit: str) -> Any:
    """A tqdm bar on a terminal, nothing elsewhere (logs stay clean)."""
    import sys

    from tqdm import tqdm

    return tqdm(total=total, unit=unit, disable=not sys.stderr.isatty(), leave=False)
