"""Sources → accounting: one incremental scan of a factory's files into a Ledger.

A pilot is counted once, from its best source (docs/accounting.md, "Which
source wins"):

1. entry descriptions (site, GLIDEIN_CPUS, GPUs for pilots that do not say);
2. the directory listing: every ``job.C.P.out`` present is the pilot's source.
   It is read once it has settled (neither it nor its .err written for
   ``settle_seconds``, by its mtime or by our own clock watching it unchanged);
3. new completed_jobs lines; a line of a pilot not yet counted waits in
   ``pending`` (its frontend's name is learned on the way);
4. new event-log events; a pilot that ended and is not counted waits in
   ``waiting``;
5. fallbacks, only for pilots whose .out is really absent (or unreadable):
   the completed_jobs line first, then, ``lost_after_seconds`` after its end,
   the event log;
6. entry status (schedd_status.xml).

All state — the ledger, log cursors, the pilots already counted, the lines
and event-log ends waiting for a .out — is saved in one checkpoint file
written atomically after each phase, so a restart neither re-counts nor
loses a pilot.
"""

from __future__ import annotations

import calendar
import contextlib
import dataclasses
import functools
import json
import logging
import os
import re
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .accounting import plausible
from .accounting.ledger import Ledger
from .accounting.partition import DEFAULT_RULES, Rules
from .accounting.pilot import (
    EntryDefaults,
    PilotAccount,
    from_completed_job,
    from_event_log,
    from_glidein,
    line_total_is_raw,
)
from .catalogue import Source
from .follow import Follower
from .model import CompletedJob, EntryDescript, GlideinErr, GlideinOut, PilotTimes, StatsFormat
from .parse_errors import ParseErrors
from .sources import completed_jobs, condor_eventlog, descript, files, glidein_err, glidein_out, schedd_status, tree
from .sources.budget import Budget

log = logging.getLogger("gwms_obs.pipeline")

# A pilot file at least this large is marked in flight while read (one small write and unlink).
INFLIGHT_MIN_BYTES = 1 << 20

CHECKPOINT_VERSION = 2  # 2: pending lines, format evidence, client_by_user names frontends


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
    settle_seconds: float = 30.0  # a .out (or .err) written more recently may still be arriving
    lost_after_seconds: float = 3600.0  # as the factory: wait this long for a .out
    seen_retention_seconds: float = 2 * 86400.0  # remember counted pilots this long after their files go
    max_file_bytes: int = 64 << 20
    rules: Rules = DEFAULT_RULES
    reset_checkpoint: bool = False  # ignore (and overwrite) an existing checkpoint
    # completed_jobs user/@duration: "auto" (learned per entry, docs/accounting.md),
    # "raw" (every line is v3.10.12+) or "normalized" (every line is older).
    completed_total: str = "auto"
    # factory-side username (client/user_<name>) -> frontend client_log_name, for
    # factories whose completed_jobs logs do not (yet) show the pair.
    client_map: dict[str, str] = field(default_factory=dict)
    # One-shot (report): the tree is final; nothing waits for a later scan.
    final: bool = False
    limits: plausible.Limits = plausible.DEFAULT_LIMITS  # bounds on what pilots say of themselves

    @property
    def monitor(self) -> str:
        return self.monitor_dir or os.path.join(self.factory_dir, "monitor")


@dataclass
class Health:
    records: Counter[str] = field(default_factory=Counter)
    bytes_read: Counter[str] = field(default_factory=Counter)
    files: dict[str, int] = field(default_factory=dict)
    # source -> when the oldest input of it not yet accounted appeared (absent: none waits)
    backlog: dict[str, float] = field(default_factory=dict)
    started: float = 0.0  # the scan-timestamp metric's value until a first scan ends (the stalled alert)
    last_scan_end: float | None = None
    last_scan_duration: float | None = None

    def lag(self, now: float) -> dict[str, float]:
        """Age of the oldest input not yet accounted, per source (0 when caught up)."""
        return {s.value: max(0.0, now - self.backlog[s]) if s in self.backlog else 0.0 for s in LAG_SOURCES}


# The sources whose input waits to be accounted (the lag metric has one series each, from the start).
LAG_SOURCES = (Source.GLIDEIN_OUT, Source.COMPLETED_JOBS, Source.EVENT_LOG, Source.SCHEDD_STATUS)


@dataclass(slots=True)
class ScanResult:
    pilots: int = 0
    by_source: Counter[str] = field(default_factory=Counter)
    failed: list[str] = field(default_factory=list)  # sources whose phase raised (counted, logged)


@dataclass(slots=True)
class Listing:
    """One walk of the client directories."""

    present: dict[str, tree.PilotFiles]  # key -> the pilot's files
    dirs_by_entry: dict[str, list[str]]
    logs: list[tree.EventLogFile]


@dataclass(slots=True)
class EntryEvidence:
    """What an entry's own pilots show about how its completed_jobs lines are written."""

    real_min: int | None = None  # lowest cluster whose .out (or line) shows a raw v3.10.12+ Total
    legacy_max: int | None = None  # highest cluster whose .out shows the older, normalized one

    def raw_total(self, cluster: int) -> bool:
        """Whether a line of this entry that does not show it itself has a raw Total.

        Clusters grow with submission, and the format changes when the factory
        is upgraded: a line is raw when it comes after the last pilot seen
        writing the old format and some pilot was seen writing the new one.
        """
        if self.real_min is None:
            return False
        return self.legacy_max is None or cluster > self.legacy_max

    def note(self, cluster: int, *, raw: bool) -> None:
        if raw:
            self.real_min = cluster if self.real_min is None else min(self.real_min, cluster)
        else:
            self.legacy_max = cluster if self.legacy_max is None else max(self.legacy_max, cluster)

    def learn(self, out: GlideinOut, cluster: int) -> None:
        if out.stats_format in (StatsFormat.REAL, StatsFormat.LEGACY):
            self.note(cluster, raw=out.stats_format is StatsFormat.REAL)


# The day in a completed_jobs or event log's name.
_LOG_DAY = re.compile(r"_(\d{8})(?:_|\.log$)")

# client="<client_log_name>" username="<user>" of a completed_jobs line, for the frontend map.
_CLIENT_USER = re.compile(rb'client="([^"\n]{1,512})" +username="([^"\n]{1,512})"')


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
        self._once = tree.OncePerPath(self.errors)  # what every scan lists again is counted once
        self.health = Health()
        self.follower = Follower()
        self.seen: dict[str, float] = {}  # key -> when counted
        self.timeline = condor_eventlog.PilotTimeline()
        self.waiting: dict[str, PilotTimes] = {}  # ended in the event log, not counted (yet)
        self.pending: dict[str, CompletedJob] = {}  # completed_jobs lines of pilots not counted (yet)
        self.bad_out: dict[str, float] = {}  # key -> when its .out proved unusable (fallbacks may count it)
        self.client_by_user: dict[str, str] = {}  # username -> client_log_name, from completed_jobs lines
        self.evidence: dict[str, EntryEvidence] = {}  # entry -> its completed_jobs format evidence
        self.defaults: dict[str, EntryDefaults] = {}
        self.status_mtimes: dict[str, float] = {}
        self.descript_mtimes: dict[str, float] = {}
        # key -> ((sizes, mtimes), when first seen so): a file unchanged that long by our
        # own clock has settled, whatever its mtime says (clock skew). Not checkpointed.
        self.unsettled: dict[str, tuple[tuple[float, ...], float]] = {}
        self.unmapped_since: dict[str, float] = {}  # key -> first seen with no frontend name for its user
        self._unmapped: set[str] = set()  # listed users with no frontend name yet (looked for in lines)
        self.health.started = clock()
        if cfg.checkpoint and not cfg.reset_checkpoint:
            self._load()
        self._quarantine_inflight()

    # --- one scan -------------------------------------------------------------------------------
    def scan(self) -> ScanResult:
        t0 = self.clock()
        res = ScanResult()

        def phase(source: Source, fn: Callable[..., Any], *args: Any) -> Any:
            """Run one source's phase; its failure is counted and logged, the others go on."""
            try:
                return fn(*args)
            except Exception as e:  # a bug or a hostile file in one source must not stop the rest
                log.error("scan: %s failed: %s: %s", source.value, type(e).__name__, e, exc_info=True)
                self.errors.record(source, "scan_failed", self.cfg.factory_dir, None, f"{type(e).__name__}: {e}")
                with self.lock:
                    self.health.backlog.setdefault(source, t0)  # its lag grows until it succeeds
                res.failed.append(source.value)
                return None

        phase(Source.DESCRIPT, self._descripts)
        listing: Listing | None = phase(Source.GLIDEIN_OUT, self._listing)
        if listing is not None:
            deferred = phase(Source.GLIDEIN_OUT, self._pilots, list(listing.present.values()), res, t0) or []
        self._checkpoint()
        phase(Source.COMPLETED_JOBS, self._completed, res, t0)
        if listing is not None:
            # Pilots whose user had no frontend name: the lines just read may have taught it.
            phase(Source.GLIDEIN_OUT, self._pilots, deferred, res, t0, True)
            phase(Source.GLIDEIN_OUT, self._out_backlog, listing.present)
        self._checkpoint()
        phase(Source.EVENT_LOG, self._event_logs, listing.logs if listing is not None else [], t0)
        if listing is not None:
            # Without a listing nothing shows which .out files exist: no fallback may count a pilot.
            phase(Source.COMPLETED_JOBS, self._fallbacks, listing.present, listing.dirs_by_entry, res)
        phase(Source.SCHEDD_STATUS, self._entry_status)
        if listing is not None:
            self._prune(listing.present)
        now = self.clock()
        with self.lock:
            self.health.last_scan_end = now
            self.health.last_scan_duration = now - t0
        self._checkpoint()
        return res

    def _listing(self) -> Listing:
        client_dirs = list(tree.entry_dirs(self.cfg.factory_dir, self._once))
        listings = [(user, entry, *tree.scan_client_dir(user, entry, d, self._once)) for user, entry, d in client_dirs]
        present: dict[str, tree.PilotFiles] = {}
        for _, _, pilots, _ in listings:
            for p in pilots:
                present.setdefault(key_str(p.key), p)
        dirs_by_entry: dict[str, list[str]] = {}
        for _, entry, d in client_dirs:
            dirs_by_entry.setdefault(entry, []).append(d)
        self._unmapped = {user for user, _, _ in client_dirs if self.client_of(user) is None}
        return Listing(present, dirs_by_entry, [f for *_, logs in listings for f in logs])

    def _account(self, acc: PilotAccount, res: ScanResult, source: str) -> None:
        k = acc.key
        with self.lock:
            self.ledger.add(acc)
            if k is not None:
                ks = key_str(k)
                self.seen[ks] = self.clock()
                self.waiting.pop(ks, None)
                self.pending.pop(ks, None)
                self.unsettled.pop(ks, None)
                self.unmapped_since.pop(ks, None)
        res.pilots += 1
        res.by_source[source] += 1
        if self.sink is not None:
            self.sink(acc)

    def _descripts(self) -> None:
        for entry, d in tree.monitor_entries(self.cfg.monitor, self._once, source=Source.DESCRIPT):
            path = os.path.join(d, "descript.xml")
            try:
                mtime = os.stat(path).st_mtime
            except OSError:
                continue
            if self.descript_mtimes.get(path) == mtime and entry in self.defaults:
                continue  # unchanged: neither re-read nor a bad one counted again
            self.descript_mtimes[path] = mtime
            for ed in descript.read_descript(path, self.errors, root=self.cfg.monitor):
                self.defaults[ed.entry or entry] = entry_defaults(ed)
        self.health.files[Source.DESCRIPT] = len(self.defaults)

    def client_of(self, username: str) -> str | None:
        """The frontend's client_log_name for a factory-side username, if the factory has shown it."""
        return self.cfg.client_map.get(username) or self.client_by_user.get(username)

    def _client_label(self, username: str, source: str, path: str) -> str:
        name = self.client_of(username)
        if name is None:
            # Visible fallback: one value per username, counted and logged.
            self.errors.record(source, "unmapped_client", path, None, f"no frontend name known for user_{username}")
            return f"user_{username}"
        return name

    def _settled(self, p: tree.PilotFiles, ks: str, now: float) -> os.stat_result | None:
        """The .out's stat when the pilot's files have settled, else None (and noted)."""
        try:
            st = os.stat(p.out)
        except OSError:
            return None  # deleted since the listing
        sig: tuple[float, ...] = (st.st_size, st.st_mtime)
        young = now - st.st_mtime < self.cfg.settle_seconds
        if not young and p.has_err:
            with contextlib.suppress(OSError):
                est = os.stat(p.err)
                sig += (est.st_size, est.st_mtime)
                young = now - est.st_mtime < self.cfg.settle_seconds
        if not young or self.cfg.final:
            return st
        prev = self.unsettled.get(ks)
        if prev is not None and prev[0] == sig and now - prev[1] >= self.cfg.settle_seconds:
            return st  # unchanged for settle_seconds by our clock: its mtime is skewed
        if prev is None or prev[0] != sig:
            self.unsettled[ks] = (sig, now)
        return None

    def _pilots(
        self, pilots: list[tree.PilotFiles], res: ScanResult, t0: float, last_call: bool = False
    ) -> list[tree.PilotFiles]:
        """Account the settled pilots; return those whose user has no frontend name yet."""
        now = self.clock()
        seen, bad = self.seen, self.bad_out
        todo = [(k, p) for p in pilots if (k := key_str(p.key)) not in seen and k not in bad]
        if not last_call:
            self.health.files[Source.GLIDEIN_OUT] = len(pilots)
        if todo:
            self.health.backlog.setdefault(Source.GLIDEIN_OUT, t0)
        bar = _progress(len(todo), "pilots") if self.progress and len(todo) > 1000 else None
        last_save = now
        deferred: list[tree.PilotFiles] = []
        for ks, p in todo:
            if bar is not None:
                bar.update(1)
            st = self._settled(p, ks, now)
            if st is None:
                continue  # still arriving: the next scan takes it
            if self.client_of(p.username) is None:
                if not last_call:
                    deferred.append(p)  # the completed_jobs lines read next may name its frontend
                    continue
                if not self.cfg.final and now - self.unmapped_since.setdefault(ks, now) < self.cfg.lost_after_seconds:
                    continue  # the factory names the frontend in its next completed_jobs lines
            self._read_pilot(p, ks, st, res)
            if self.clock() - last_save > 60:
                self._checkpoint()
                last_save = self.clock()
        if bar is not None:
            bar.close()
        return deferred

    def _out_backlog(self, present: dict[str, tree.PilotFiles]) -> None:
        """The .out lag: the oldest .out still waiting (to settle, or for its frontend's name)."""
        with self.lock:
            times = [sig[1] for k, (sig, _) in self.unsettled.items() if k in present and k not in self.seen]
            times += [t for k, t in self.unmapped_since.items() if k in present and k not in self.seen]
            if times:
                self.health.backlog[Source.GLIDEIN_OUT] = min(times)
            else:
                self.health.backlog.pop(Source.GLIDEIN_OUT, None)

    def _read_pilot(self, p: tree.PilotFiles, ks: str, st: os.stat_result, res: ScanResult) -> None:
        """Read and account one settled pilot; a file that makes the reader fail is quarantined.

        Quarantined (``bad_out``, checkpointed): never read again, so a file
        that breaks the reader cannot do it on every scan. A large file is
        marked in flight first, so even a crash the process cannot catch (the
        kernel's OOM killer under the unit's MemoryMax) quarantines it at the
        next start instead of crashing again.
        """
        inflight = st.st_size >= INFLIGHT_MIN_BYTES and self._inflight(ks)
        try:
            self._account_pilot(p, ks, st, res)
        except Exception as e:  # one hostile file must not stop the scan
            log.error("%s: reading failed, quarantined: %s: %s", p.out, type(e).__name__, e, exc_info=True)
            self.errors.record(Source.GLIDEIN_OUT, "quarantined", p.out, None, f"{type(e).__name__}: {e}")
            self._mark_bad(ks)
        finally:
            if inflight:
                self._inflight(None)

    def _inflight_path(self) -> str | None:
        return self.cfg.checkpoint + ".inflight" if self.cfg.checkpoint else None

    def _inflight(self, ks: str | None) -> bool:
        """Note (or, with None, clear) the pilot being read, beside the checkpoint."""
        path = self._inflight_path()
        if path is None:
            return False
        try:
            if ks is None:
                os.unlink(path)
            else:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(ks)
        except OSError:
            return False  # best effort: a full disk must not stop the accounting
        return True

    def _quarantine_inflight(self) -> None:
        """A pilot left in flight by the last run crashed it: never read it again."""
        path = self._inflight_path()
        if path is None:
            return
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                ks = f.read(1024).strip()
            os.unlink(path)
        except OSError:
            return
        if ks and ks not in self.seen:
            log.error("%s was being read when the exporter stopped: quarantined", ks)
            self.errors.record(Source.GLIDEIN_OUT, "quarantined", path, None, f"{ks} crashed the last run")
            self.bad_out[ks] = self.clock()

    def _account_pilot(self, p: tree.PilotFiles, ks: str, st: os.stat_result, res: ScanResult) -> None:
        # One budget for the pilot's two files: no file of a pilot may cost more than a real one.
        budget = Budget()
        root = self.cfg.factory_dir
        out = glidein_out.read_out(p.out, self.errors, self.cfg.max_file_bytes, root=root, budget=budget)
        self.health.bytes_read[Source.GLIDEIN_OUT] += st.st_size
        if out is None:
            self._mark_bad(ks)  # counted as a parse error; its line or event log may still count it
            return
        err = None
        if p.has_err:  # known from the directory listing: no extra stat per pilot
            err = glidein_err.read_err(p.err, self.errors, detail=False, root=root, budget=budget)
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
        d = self.defaults.get(p.entry)
        verdict = plausible.check_glidein(out, err, self._bounds(p.entry, st.st_mtime))
        if verdict.problems:
            self.errors.record(Source.GLIDEIN_OUT, plausible.REASON, p.out, None, "; ".join(verdict.problems))
        self._check_labels(p, out, err, d)
        if not verdict.believed:
            self._mark_bad(ks)  # the factory's own records count it (its line, else the event log)
            return
        self.evidence.setdefault(p.entry, EntryEvidence()).learn(out, p.cluster)
        acc = from_glidein(
            out,
            err,
            d,
            entry=p.entry,
            client=out.client,
            end_hint=st.st_mtime,
            rules=self.cfg.rules,
        )
        if acc is None:
            self.errors.record(Source.GLIDEIN_OUT, "no_times", p.out)
            self._mark_bad(ks)
            return
        # Labels from the factory (the file's place), not from what the pilot wrote;
        # the path's entry/cluster/proc are the key the other sources use.
        acc.entry, acc.cluster, acc.proc = p.entry, p.cluster, p.proc
        acc.client = self._client_label(p.username, Source.GLIDEIN_OUT, p.out)
        self._account(acc, res, Source.GLIDEIN_OUT)

    def _bounds(self, entry: str, written: float) -> plausible.Bounds:
        # Times are bounded by the factory's clock when the file was written, or now.
        return plausible.bounds(self.defaults.get(entry), self.cfg.limits, max(self.clock(), written))

    def _check_labels(
        self, p: tree.PilotFiles, out: GlideinOut, err: GlideinErr | None, d: EntryDefaults | None
    ) -> None:
        """Count what the pilot says about where it ran that the factory contradicts (never a label)."""
        said = []
        if out.entry is not None and out.entry != p.entry:
            said.append(f"entry {out.entry!r} in {p.entry!r}")
        if err is not None and err.site and d is not None and d.site and err.site != d.site:
            said.append(f"GLIDEIN_Site {err.site!r}, entry's {d.site!r}")
        if said:
            self.errors.record(Source.GLIDEIN_OUT, "label_mismatch", p.out, None, "; ".join(s[:300] for s in said))

    def _mark_bad(self, ks: str) -> None:
        with self.lock:
            self.bad_out[ks] = self.clock()
            self.unsettled.pop(ks, None)

    def _completed(self, res: ScanResult, t0: float) -> None:
        paths = list(tree.completed_logs(self.cfg.factory_dir, self._once))
        self.health.files[Source.COMPLETED_JOBS] = len(paths)
        self.health.backlog.setdefault(Source.COMPLETED_JOBS, t0)

        def sink(lines: list[completed_jobs.RawLine | CompletedJob], entry: str, path: str) -> None:
            self.health.records[Source.COMPLETED_JOBS] += len(lines)
            seen = self.seen
            keys = completed_jobs.line_keys(lines, entry)
            b: plausible.Bounds | None = None
            # Counted from its .out: the usual case, filtered in one comprehension, nothing converted.
            for k, raw in [(k, raw) for k, raw in zip(keys, lines, strict=True) if k not in seen]:
                line = completed_jobs.to_record(raw, entry)
                if isinstance(line, str):
                    self.errors.record(Source.COMPLETED_JOBS, line, path)
                    continue
                b = b or self._bounds(entry, 0.0)
                if problems := plausible.check_line(line, b):
                    # Not used: the event log counts the pilot (as unknown) if its .out cannot.
                    detail = f"job {line.cluster}.{line.proc}: " + "; ".join(problems)
                    self.errors.record(Source.COMPLETED_JOBS, plausible.REASON, path, None, detail)
                    continue
                kind = line_total_is_raw(line, self._fixed_cpus(entry))
                if kind is not None:
                    self.evidence.setdefault(entry, EntryEvidence()).note(line.cluster, raw=kind)
                with self.lock:
                    self.pending[k] = line  # waits for its .out; the fallbacks decide

        def scan_buffer(
            buf: bytes, path: str, offset: int, entry: str
        ) -> tuple[list[completed_jobs.RawLine | CompletedJob], int]:
            lines, used = completed_jobs.scan_buffer(buf, path, offset, self.errors, entry)
            if self._unmapped:
                self._learn_clients(buf, used)
            return lines, used

        for entry, path in paths:
            try:
                n = self.follower.read_new(
                    path,
                    functools.partial(scan_buffer, entry=entry),
                    functools.partial(sink, entry=entry, path=path),
                    root=self.cfg.factory_dir,
                )
            except OSError as e:  # listed every scan: counted once
                self._once.record(Source.COMPLETED_JOBS, files.reason_of(e), path, None, files.describe(e))
                continue
            self.health.bytes_read[Source.COMPLETED_JOBS] += n
        self.health.backlog.pop(Source.COMPLETED_JOBS, None)

    def _event_logs(self, logs: list[tree.EventLogFile], t0: float) -> None:
        self.health.files[Source.EVENT_LOG] = len(logs)
        self.health.backlog.setdefault(Source.EVENT_LOG, t0)
        for f in logs:

            def sink(events: list[condor_eventlog.CondorEvent], f: tree.EventLogFile = f) -> None:
                self.health.records[Source.EVENT_LOG] += len(events)
                for t in self.timeline.feed(events, f.path):
                    k = key_str((f.entry, t.cluster, t.proc))
                    if k not in self.seen and t.ended is not None:
                        t.client = f.username  # the factory-side user; named at accounting time
                        self.waiting[k] = t

            try:
                n = self.follower.read_new(
                    f.path,
                    lambda b, p, o: condor_eventlog.parse_buffer(b, p, o, self.errors),
                    sink,
                    root=self.cfg.factory_dir,
                )
            except OSError as e:  # listed every scan: counted once
                self._once.record(Source.EVENT_LOG, files.reason_of(e), f.path, None, files.describe(e))
                continue
            self.health.bytes_read[Source.EVENT_LOG] += n
        # Pilots silent for weeks (held forever, or their end rotated away) are dropped, not guessed.
        self.timeline.expire(self.clock())
        self.health.backlog.pop(Source.EVENT_LOG, None)

    def _learn_clients(self, buf: bytes, end: int) -> None:
        """The frontend's name for each listed user that has none yet, from the lines in ``buf``.

        Only users still unknown are looked for (one C-level find each), so the
        usual buffer costs nothing here.
        """
        for user in list(self._unmapped):
            i = buf.find(b'username="' + user.encode("utf-8", "surrogateescape") + b'"', 0, end)
            if i < 0:
                continue
            eol = buf.find(b"\n", i, end)
            m = _CLIENT_USER.search(buf, buf.rfind(b"\n", 0, i) + 1, end if eol < 0 else eol)
            if m is not None and m.group(2).decode("utf-8", "replace") == user:
                self.client_by_user[user] = m.group(1).decode("utf-8", "replace")
                self._unmapped.discard(user)

    def _fixed_cpus(self, entry: str) -> int | None:
        d = self.defaults.get(entry)
        return d.cpus if d is not None and d.cpus_fixed else None

    def _out_waits(self, ks: str, present: dict[str, tree.PilotFiles], dirs: list[str], recheck: bool) -> bool:
        """Whether the pilot's .out is there to be read (so no fallback may count it)."""
        if ks in self.bad_out:
            return False
        if ks in present:
            return True
        if not recheck:
            return False
        # Arrived after the listing (the factory writes a line only once the .out is in).
        name = "job." + ks.rsplit("/", 1)[1] + ".out"
        return any(os.path.exists(os.path.join(d, name)) for d in dirs)

    def _fallbacks(self, present: dict[str, tree.PilotFiles], dirs: dict[str, list[str]], res: ScanResult) -> None:
        """Count pilots whose .out is absent: from their line, else (lost) from the event log."""
        now = self.clock()
        for k, line in list(self.pending.items()):
            if k in self.seen:
                del self.pending[k]
                continue
            entry = k.rsplit("/", 1)[0]
            if self._out_waits(k, present, dirs.get(entry, []), recheck=True):
                continue
            with self.lock:
                del self.pending[k]
                ended = self.waiting.get(k)
            ev = self.evidence.get(entry) or EntryEvidence()
            mode = self.cfg.completed_total
            raw = line_total_is_raw(line, self._fixed_cpus(entry))
            if raw is None:
                raw = ev.raw_total(line.cluster) if mode == "auto" else mode == "raw"
            acc = from_completed_job(
                line,
                self.defaults.get(entry),
                client=self.client_of(line.username) or line.client,
                raw_total=raw,
                end=ended.ended if ended is not None else None,
            )
            if acc is not None:
                self._account(acc, res, Source.COMPLETED_JOBS)
            # else: duration -1/0, the factory had no .out either; the event log decides.
        for k, t in list(self.waiting.items()):
            if k in self.seen:
                with self.lock:
                    del self.waiting[k]
                continue
            if k in self.pending:
                continue
            entry = k.rsplit("/", 1)[0]
            if self._out_waits(k, present, dirs.get(entry, []), recheck=False):
                continue
            if t.ended is not None and now - t.ended >= self.cfg.lost_after_seconds:
                with self.lock:
                    del self.waiting[k]
                user = t.client or ""
                t.client = self.client_of(user) or f"user_{user}"
                acc = from_event_log(t, self.defaults.get(t.entry or ""))
                if acc is not None:
                    self._account(acc, res, Source.EVENT_LOG)

    def _entry_status(self) -> None:
        n = 0
        for entry, d in tree.monitor_entries(self.cfg.monitor, self._once):
            path = os.path.join(d, "schedd_status.xml")
            try:
                mtime = os.stat(path).st_mtime
            except OSError:
                continue
            n += 1
            if self.status_mtimes.get(path) == mtime:
                continue
            st = schedd_status.read_schedd_status(path, self.errors, root=self.cfg.monitor)
            self.status_mtimes[path] = mtime
            if st is None:
                continue
            self.health.records[Source.SCHEDD_STATUS] += 1
            site = (self.defaults.get(st.entry or entry) or EntryDefaults()).site or "unknown"
            with self.lock:
                self.ledger.update_entry(st, site)
        self.health.files[Source.SCHEDD_STATUS] = n

    def _prune(self, present: dict[str, tree.PilotFiles]) -> None:
        """Forget counted pilots whose files are gone, after the retention window, and only
        once no log still on disk can name them (else a log re-read from its start, say
        after its inode changed, would count them again).

        The factory's logs are per day; a pilot is named only in logs of days up to one
        after it was counted, so one counted a day before the oldest log's day is named
        by none.
        """
        cutoff = self.clock() - self.cfg.seen_retention_seconds
        days = [m[1] for p in self.follower.cursors if (m := _LOG_DAY.search(os.path.basename(p)))]
        if days:
            with contextlib.suppress(ValueError, OverflowError):
                oldest = calendar.timegm(time.strptime(min(days), "%Y%m%d"))
                cutoff = min(cutoff, oldest - 86400.0)
        with self.lock:
            for k in [k for k, t in self.seen.items() if t < cutoff and k not in present]:
                del self.seen[k]
            for k in [k for k, t in self.bad_out.items() if t < cutoff and k not in present]:
                del self.bad_out[k]
            for k in [k for k in self.unsettled if k not in present]:
                del self.unsettled[k]
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
                "bad_out": self.bad_out,
                "waiting": {k: dataclasses.asdict(t) for k, t in self.waiting.items()},
                "pending": {k: dataclasses.asdict(line) for k, line in self.pending.items()},
                "timeline": self.timeline.to_json(),
                "client_by_user": self.client_by_user,
                "evidence": {e: dataclasses.asdict(ev) for e, ev in self.evidence.items()},
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
        self.pending = {str(k): CompletedJob(**v) for k, v in data.get("pending", {}).items()}
        self.bad_out = {str(k): float(v) for k, v in data.get("bad_out", {}).items()}
        self.evidence = {str(e): EntryEvidence(**v) for e, v in data.get("evidence", {}).items()}
        self.timeline = condor_eventlog.PilotTimeline.from_json(data.get("timeline", {}))
        self.client_by_user = {str(k): str(v) for k, v in data.get("client_by_user", {}).items()}


def entry_defaults(ed: EntryDescript) -> EntryDefaults:
    def num(*names: str) -> int | None:
        for n in names:
            for src in (ed.attributes, ed.params, ed.descript):
                v = src.get(n)
                v = v.strip() if v is not None else None
                # isascii: str.isdigit() accepts "²", which int() refuses
                if v and v.isascii() and v.isdigit() and len(v) <= 18 and int(v) > 0:
                    return int(v)
        return None

    return EntryDefaults(
        site=ed.site,
        cpus=num("GLIDEIN_CPUS", "GLIDEIN_ESTIMATED_CPUS"),
        cpus_fixed=num("GLIDEIN_CPUS") is not None,
        memory_mb=num("GLIDEIN_MaxMemMBs"),
        max_idle=num("GLIDEIN_Max_Idle"),
        max_walltime=num("GLIDEIN_Max_Walltime"),
        gpus=resource_slots_gpus(
            ed.attributes.get("GLIDEIN_Resource_Slots") or ed.params.get("GLIDEIN_Resource_Slots")
        ),
    )


def resource_slots_gpus(value: str | None) -> int | None:
    """GPUs of a GLIDEIN_Resource_Slots value (``name,number[,type=..];...``), None if none.

    The factory requests that many GPUs for each of the entry's pilots.
    """
    if not value:
        return None
    for slot in value.split(";"):
        parts = [x.strip() for x in slot.split(",")]
        if parts[0].lower() in ("gpus", "gpu") and len(parts) > 1 and parts[1].isascii() and parts[1].isdigit():
            return int(parts[1]) or None
    return None


def _progress(total: int, unit: str) -> Any:
    """A tqdm bar on a terminal, nothing elsewhere (logs stay clean)."""
    import sys

    from tqdm import tqdm

    return tqdm(total=total, unit=unit, disable=not sys.stderr.isatty(), leave=False)
