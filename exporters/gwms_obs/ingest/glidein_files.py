"""The pilots' own files (``job.C.P.out`` and ``.err``; the span spool the .err carries).

First of the pilot sources in precedence: a pilot whose .out is present is
counted from it once it has settled: at once when both files end with the
line glidein_startup.sh writes last (complete, the evidence), else when neither
was written for ``settle_seconds``, by its mtime or by our clock watching it
unchanged (a file still arriving). A
.out that cannot be believed (unreadable, quarantined, implausible) is marked
``bad_out``: its completed_jobs line or its event log counts the pilot then.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys
import traceback
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..accounting.pilot import EntryDefaults
from ..catalogue import Source
from ..model import StatsFormat
from ..sources import glidein_err, glidein_out, layout
from . import pool
from .books import Books, Listing, PilotFacts
from .outlets import Outlets
from .stage import Scan, Stage

log = logging.getLogger("gwms_obs.pipeline")

# A pilot file at least this large is marked in flight while read (one small write and unlink).
INFLIGHT_MIN_BYTES = 1 << 20
# A scan with at least this many pilots to read (a backfill) reads them in ``workers``
# processes; fewer (the exporter's steady state: a few new pilots a scan) are read here.
POOL_MIN_PILOTS = 2000
MIN_CHUNK, MAX_CHUNK = 32, 256  # pilots per chunk a worker reads: small enough to balance the workers
AHEAD = 4  # chunks in flight per worker: the workers never wait for the merge, memory stays bounded
SAVE_SECONDS = 60.0  # a long read of pilots saves the checkpoint this often (a kill loses at most this much)

Listed = tuple[str, layout.PilotFiles]  # a pilot's key and files
Ready = tuple[str, layout.PilotFiles, os.stat_result]  # a settled pilot to read: key, files, the .out's stat


class GlideinFilesStage(Stage):
    sources = (Source.GLIDEIN_OUT, Source.GLIDEIN_ERR, Source.TRACE_SPOOL)
    precedence = 10

    def __init__(self, books: Books, outlets: Outlets) -> None:
        super().__init__(books, outlets)
        # key -> ((sizes, mtimes), when first seen so): a file unchanged that long by our
        # own clock has settled, whatever its mtime says (clock skew). Not checkpointed.
        self.unsettled: dict[str, tuple[tuple[float, ...], float]] = {}
        self.unmapped_since: dict[str, float] = {}  # key -> first seen with no frontend name for its user
        self.deferred: list[str] = []  # settled, waiting for this scan's completed_jobs lines (keys)
        self._bar: Any = None  # the progress bar of a long scan
        self._last_save = 0.0  # when a long scan last saved the checkpoint

    def discover(self, scan: Scan) -> Sequence[str] | None:
        """The listing's pilots, by key: a list of the keys it holds, no object made per pilot
        (300,000 pairs set off a collection of the whole heap)."""
        return list(scan.listing.present) if scan.listing is not None else None

    def read(self, scan: Scan, found: Sequence[str]) -> None:
        self.deferred = self._pilots(found, scan, last_call=False)

    def settle(self, scan: Scan) -> None:
        """Right after the completed_jobs lines are read: the pilots whose user had no frontend
        name, which those lines may have taught."""
        if scan.listing is None:
            return
        # Pilots whose user had no frontend name: the lines read since may have taught it.
        deferred, self.deferred = self.deferred, []
        self._pilots(deferred, scan, last_call=True)
        self._backlog(scan.listing.present)

    def prune(self, listing: Listing) -> None:
        """Forget the pilots it watched that are gone, or counted (by it or a fallback)."""
        seen = self.books.counted.seen
        for watched in (self.unsettled, self.unmapped_since):
            for k in [k for k in watched if k not in listing.present or k in seen]:
                del watched[k]

    # --- reading --------------------------------------------------------------------------------
    def _settled(self, p: layout.PilotFiles, ks: str, now: float) -> os.stat_result | None:
        """The .out's stat when the pilot's files have settled, else None (and noted)."""
        cfg = self.books.cfg
        try:
            st = os.stat(p.out)
        except OSError:
            return None  # deleted since the listing
        sig: tuple[float, ...] = (st.st_size, st.st_mtime)
        young = now - st.st_mtime < cfg.settle_seconds
        if not young and p.has_err and not cfg.final:  # a final tree has settled: no .err stat
            with contextlib.suppress(OSError):
                est = os.stat(p.err)
                sig += (est.st_size, est.st_mtime)
                young = now - est.st_mtime < cfg.settle_seconds
        if not young or cfg.final:
            return st
        if p.has_err and _closed(p.out, st.st_size, glidein_out.XML_END) and _closed(p.err, None, glidein_err.XML_END):
            return st  # both files end with what glidein_startup.sh writes last: complete, counted at once
        prev = self.unsettled.get(ks)
        if prev is not None and prev[0] == sig and now - prev[1] >= cfg.settle_seconds:
            return st  # unchanged for settle_seconds by our clock: its mtime is skewed
        if prev is None or prev[0] != sig:
            self.unsettled[ks] = (sig, now)
        return None

    def _pilots(self, pilots: Sequence[str], scan: Scan, last_call: bool) -> list[str]:
        """Account the settled pilots (keys in the listing); return those whose user has no frontend name yet."""
        b = self.books
        now = b.clock()
        seen, bad = b.counted.seen, b.counted.bad_out
        assert scan.listing is not None
        present = scan.listing.present
        todo = [(k, present[k]) for k in pilots if k not in seen and k not in bad]  # a known pilot: two lookups
        if not last_call:
            b.health.files[Source.GLIDEIN_OUT] = len(pilots)
        if todo:
            b.health.backlog.setdefault(Source.GLIDEIN_OUT, scan.t0)
        self._bar = _progress(len(todo), "pilots") if self.outlets.progress and len(todo) > 1000 else None
        self._last_save = now
        deferred: list[str] = []
        ready = self._ready(todo, now, last_call, deferred)
        if b.cfg.workers > 1 and len(todo) >= POOL_MIN_PILOTS:
            self._read_pool(ready, scan, len(todo))
        else:
            for ks, p, st in ready:
                self._read_pilot(p, ks, st, scan)
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        return deferred

    def _ready(
        self,
        todo: list[Listed],
        now: float,
        last_call: bool,
        deferred: list[str],
    ) -> Iterator[Ready]:
        """The pilots to read now, in the listing's order (the others wait; in the first call
        those that only wait for their frontend's name go to ``deferred``)."""
        b = self.books
        for ks, p in todo:
            st = self._settled(p, ks, now)
            if st is not None and b.names.of(p.username) is None:
                if not last_call:
                    deferred.append(ks)  # the completed_jobs lines read next may name its frontend
                    st = None
                elif not b.cfg.final and now - self.unmapped_since.setdefault(ks, now) < b.cfg.lost_after_seconds:
                    st = None  # the factory names the frontend in its next completed_jobs lines
            if st is None:  # still arriving: the next scan takes it
                self._tick(None)
                continue
            yield ks, p, st

    def _tick(self, scan: Scan | None) -> None:
        """One pilot done: the progress bar, and the checkpoint every minute of a long scan
        (None: a pilot not read, which changed nothing to save)."""
        if self._bar is not None:
            self._bar.update(1)
        b = self.books
        if scan is not None and b.clock() - self._last_save > SAVE_SECONDS:
            scan.checkpoint()
            self._last_save = b.clock()

    def _backlog(self, present: dict[str, layout.PilotFiles]) -> None:
        """The .out lag: the oldest .out still waiting (to settle, or for its frontend's name)."""
        b = self.books
        with b.lock:
            times = [sig[1] for k, (sig, _) in self.unsettled.items() if k in present and k not in b.counted.seen]
            times += [t for k, t in self.unmapped_since.items() if k in present and k not in b.counted.seen]
            if times:
                b.health.backlog[Source.GLIDEIN_OUT] = min(times)
            else:
                b.health.backlog.pop(Source.GLIDEIN_OUT, None)

    def _read_pilot(self, p: layout.PilotFiles, ks: str, st: os.stat_result, scan: Scan) -> None:
        """Read and account one settled pilot here; a file that makes the reader fail is quarantined.

        Quarantined (``bad_out``, checkpointed): never read again, so a file
        that breaks the reader cannot do it on every scan. A large file is
        marked in flight first, so even a crash the process cannot catch (the
        kernel's OOM killer under the unit's MemoryMax) quarantines it at the
        next start instead of crashing again.
        """
        inflight = st.st_size >= INFLIGHT_MIN_BYTES and self._inflight(ks)
        try:
            r = pool.read_pilot(_task(p, st), self._context(self.books.clock(), self.books.defaults))
            self._apply(p, ks, st.st_size, r, scan)
        finally:
            if inflight:
                self._inflight(None)
        self._tick(scan)

    # --- reading across cores (a backfill) ------------------------------------------------------
    def _read_pool(self, ready: Iterator[Ready], scan: Scan, n: int) -> None:
        """Read ``ready`` in worker processes, chunks of one entry each; apply them here, in order.

        A pilot is applied (counted, ``seen``, in the next checkpoint) only
        here, so a kill mid-backfill loses none counted and counts none twice.
        A large .out is read here, marked in flight, as by the serial path; a
        chunk whose worker failed is read here; once the pool is broken (a
        worker killed: the OOM killer), every pilot not yet applied is.
        """
        b = self.books
        workers = b.cfg.workers
        window: deque[tuple[list[Ready], Future[list[pool.Read]] | None]] = deque()
        broken = False
        ex: ProcessPoolExecutor | None = None  # started with the first chunk (all may wait for names)
        with pool.frozen_heap():
            try:
                for chunk, here in _chunks(ready, _chunk_size(n, workers)):
                    fut = None
                    if not here and not broken:
                        try:
                            ex = ex or pool.executor(workers)
                            fut = ex.submit(pool.read_chunk, *self._chunk_args(chunk))
                        except (BrokenProcessPool, RuntimeError, OSError) as e:  # OSError: no process to start
                            broken = self._pool_broke(e)
                    window.append((chunk, fut))
                    while len(window) > workers * AHEAD:
                        broken = self._merge(*window.popleft(), scan) or broken
                while window:
                    broken = self._merge(*window.popleft(), scan) or broken
            finally:
                if ex is not None:
                    ex.shutdown(wait=True, cancel_futures=True)

    def _merge(self, chunk: list[Ready], fut: Future[list[pool.Read]] | None, scan: Scan) -> bool:
        """Apply one chunk, in order; True when the pool turned out broken."""
        broken = False
        reads: list[pool.Read] | None = None
        if fut is not None:
            try:
                reads = fut.result()
            except BrokenProcessPool as e:
                broken = self._pool_broke(e)
            except Exception as e:  # the chunk's results did not come back: read it here
                log.error("backfill: a worker failed on %s: %s: %s; read here", chunk[0][1].out, type(e).__name__, e)
        if reads is None or len(reads) != len(chunk):
            for ks, p, st in chunk:
                self._read_pilot(p, ks, st, scan)
            return broken
        for (ks, p, st), r in zip(chunk, reads, strict=True):
            self._apply(p, ks, st.st_size, r, scan)
            self._tick(scan)
        return broken

    def _chunk_args(self, chunk: list[Ready]) -> tuple[pool.Context, list[pool.Task]]:
        """What a worker needs to read ``chunk`` (pilots of one entry)."""
        b = self.books
        d = b.defaults.get(chunk[0][1].entry)
        ctx = self._context(b.clock(), {chunk[0][1].entry: d} if d is not None else {})
        return ctx, [_task(p, st) for _, p, st in chunk]

    def _pool_broke(self, e: BaseException) -> bool:
        log.error("backfill: the worker pool broke (%s: %s); the rest is read in this process", type(e).__name__, e)
        return True

    def _context(self, now: float, defaults: dict[str, EntryDefaults]) -> pool.Context:
        cfg = self.books.cfg
        return pool.Context(
            root=cfg.factory_dir,
            max_file_bytes=cfg.max_file_bytes,
            limits=cfg.limits,
            rules=cfg.rules,
            now=now,
            spools=self.outlets.spools is not None,
            traces=self.outlets.traces is not None,
            defaults=defaults,
        )

    def _apply(self, p: layout.PilotFiles, ks: str, size: int, r: pool.Read, scan: Scan) -> None:
        """What reading one pilot found, into the books; a failure quarantines the file."""
        try:
            self._account(p, ks, size, r, scan)
        except Exception as e:  # one hostile file must not stop the scan
            r.failure, r.trace = f"{type(e).__name__}: {e}", traceback.format_exc()
        if r.failure is not None:
            log.error("%s: reading failed, quarantined: %s\n%s", p.out, r.failure, r.trace.rstrip())
            self.books.errors.record(Source.GLIDEIN_OUT, "quarantined", p.out, None, r.failure)
            self._mark_bad(ks)

    def _account(self, p: layout.PilotFiles, ks: str, size: int, r: pool.Read, scan: Scan) -> None:
        b = self.books
        record = b.errors.record
        records = r.records
        if r.spool is not None:  # where the serial reader met it, among the records
            for x in records[: r.spool_at]:
                record(*x)
            records = records[r.spool_at :]
            self.outlets.spool(r.spool, p.err)
        for x in records:
            record(*x)
        h = b.health
        if r.out_bytes:
            h.bytes_read[Source.GLIDEIN_OUT] += size
        if r.err_size is not None:
            h.bytes_read[Source.GLIDEIN_ERR] += r.err_size
        if r.err_read:
            h.records[Source.GLIDEIN_ERR] += 1
        if r.out_read:
            h.records[Source.GLIDEIN_OUT] += 1
        if r.stats_format in (StatsFormat.REAL, StatsFormat.LEGACY):
            b.evidence_of(p.entry).note(p.cluster, raw=r.stats_format is StatsFormat.REAL)
        if r.failure is not None:
            return
        acc = r.acc
        if acc is None:
            self._mark_bad(ks)  # unreadable, implausible or timeless: the factory's own records count it
            return
        acc.client = b.names.label(p.username, b.errors, Source.GLIDEIN_OUT, p.out)
        facts = PilotFacts(Source.GLIDEIN_OUT, *r.facts) if r.facts is not None else None
        self.count(acc, scan, Source.GLIDEIN_OUT, facts)

    def _inflight_path(self) -> str | None:
        cp = self.books.cfg.checkpoint
        return cp + ".inflight" if cp else None

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
        """A pilot left in flight by the last run crashed it: never read it again.

        Runs once the checkpoint is loaded: ``restore`` is called at every start.
        """
        path = self._inflight_path()
        if path is None:
            return
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                ks = f.read(1024).strip()
            os.unlink(path)
        except OSError:
            return
        b = self.books
        if ks and ks not in b.counted.seen:
            log.error("%s was being read when the exporter stopped: quarantined", ks)
            b.errors.record(Source.GLIDEIN_OUT, "quarantined", path, None, f"{ks} crashed the last run")
            b.counted.bad_out[ks] = b.clock()

    def restore(self, data: dict[str, Any]) -> None:
        self._quarantine_inflight()

    def _mark_bad(self, ks: str) -> None:
        b = self.books
        with b.lock:
            b.counted.bad_out[ks] = b.clock()
            self.unsettled.pop(ks, None)


# The last bytes of a file looked at for its end marker: the marker and a little whitespace after it.
_TAIL = 256


def _closed(path: str, size: int | None, marker: bytes) -> bool:
    """Whether the regular file ``path`` ends with ``marker`` (then only whitespace): the line
    glidein_startup.sh writes last to that stream, so the factory has the whole file.

    Settling by this evidence, not by the file's age, is what puts a pilot on /metrics seconds
    after its files close. A file cut short (still arriving) lacks it and waits ``settle_seconds``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)  # a FIFO must not block
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (size is not None and st.st_size != size):
            return False  # not a pilot's file, or written since its stat
        tail = os.pread(fd, _TAIL, max(0, st.st_size - _TAIL))
    except OSError:
        return False
    finally:
        os.close(fd)
    return tail.rstrip().endswith(marker)


def _task(p: layout.PilotFiles, st: os.stat_result) -> pool.Task:
    return (p.out, p.err, p.has_err, p.entry, p.cluster, p.proc, st.st_mtime)


def _chunk_size(n: int, workers: int) -> int:
    return max(MIN_CHUNK, min(MAX_CHUNK, n // (workers * 16)))


def _chunks(ready: Iterator[Ready], size: int) -> Iterator[tuple[list[Ready], bool]]:
    """``ready`` in order, cut in chunks of one entry and at most ``size`` pilots; (chunk, read here).

    A .out large enough to be marked in flight is a chunk of its own, read here.
    """
    chunk: list[Ready] = []
    for item in ready:
        p, st = item[1], item[2]
        if st.st_size >= INFLIGHT_MIN_BYTES:
            if chunk:
                yield chunk, False
                chunk = []
            yield [item], True
            continue
        if chunk and (len(chunk) >= size or p.entry != chunk[0][1].entry):
            yield chunk, False
            chunk = []
        chunk.append(item)
    if chunk:
        yield chunk, False


def _progress(total: int, unit: str) -> Any:
    """A tqdm bar on a terminal, nothing elsewhere (logs stay clean)."""
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, disable=not sys.stderr.isatty(), leave=False)
