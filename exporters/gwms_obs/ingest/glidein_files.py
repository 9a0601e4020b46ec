"""The pilots' own files (``job.C.P.out`` and ``.err``; the span spool the .err carries).

First of the pilot sources in precedence: a pilot whose .out is present is
counted from it, once it has settled (neither it nor its .err written for
``settle_seconds``, by its mtime or by our clock watching it unchanged). A
.out that cannot be believed (unreadable, quarantined, implausible) is marked
``bad_out``: its completed_jobs line or its event log counts the pilot then.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..accounting import plausible
from ..accounting.pilot import EntryDefaults, from_glidein
from ..catalogue import Source
from ..model import GlideinErr, GlideinOut
from ..sources import glidein_err, glidein_out, layout
from ..sources.budget import Budget
from .books import Books, Listing, key_str
from .stage import Scan, Stage

log = logging.getLogger("gwms_obs.pipeline")

# A pilot file at least this large is marked in flight while read (one small write and unlink).
INFLIGHT_MIN_BYTES = 1 << 20


class GlideinFilesStage(Stage):
    sources = (Source.GLIDEIN_OUT, Source.GLIDEIN_ERR, Source.TRACE_SPOOL)
    precedence = 10
    reads_client_dirs = True
    save_after_read = True
    # Pilots of users with no frontend name yet wait for the names the completed_jobs lines teach.
    settle_after = Source.COMPLETED_JOBS

    def __init__(self, books: Books) -> None:
        super().__init__(books)
        # key -> ((sizes, mtimes), when first seen so): a file unchanged that long by our
        # own clock has settled, whatever its mtime says (clock skew). Not checkpointed.
        self.unsettled: dict[str, tuple[tuple[float, ...], float]] = {}
        self.unmapped_since: dict[str, float] = {}  # key -> first seen with no frontend name for its user
        self.deferred: list[layout.PilotFiles] = []  # settled, waiting for this scan's completed_jobs lines
        books.on_counted.append(self._forget)

    def _forget(self, ks: str) -> None:
        self.unsettled.pop(ks, None)
        self.unmapped_since.pop(ks, None)

    def discover(self, scan: Scan) -> Sequence[layout.PilotFiles] | None:
        return list(scan.listing.present.values()) if scan.listing is not None else None

    def read(self, scan: Scan, found: Sequence[layout.PilotFiles]) -> None:
        self.deferred = self._pilots(found, scan, last_call=False)

    def settle(self, scan: Scan) -> None:
        if scan.listing is None:
            return
        # Pilots whose user had no frontend name: the lines read since may have taught it.
        deferred, self.deferred = self.deferred, []
        self._pilots(deferred, scan, last_call=True)
        self._backlog(scan.listing.present)

    def prune(self, listing: Listing) -> None:
        for k in [k for k in self.unsettled if k not in listing.present]:
            del self.unsettled[k]

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
        if not young and p.has_err:
            with contextlib.suppress(OSError):
                est = os.stat(p.err)
                sig += (est.st_size, est.st_mtime)
                young = now - est.st_mtime < cfg.settle_seconds
        if not young or cfg.final:
            return st
        prev = self.unsettled.get(ks)
        if prev is not None and prev[0] == sig and now - prev[1] >= cfg.settle_seconds:
            return st  # unchanged for settle_seconds by our clock: its mtime is skewed
        if prev is None or prev[0] != sig:
            self.unsettled[ks] = (sig, now)
        return None

    def _pilots(self, pilots: Sequence[layout.PilotFiles], scan: Scan, last_call: bool) -> list[layout.PilotFiles]:
        """Account the settled pilots; return those whose user has no frontend name yet."""
        b = self.books
        now = b.clock()
        seen, bad = b.seen, b.bad_out
        todo = [(k, p) for p in pilots if (k := key_str(p.key)) not in seen and k not in bad]
        if not last_call:
            b.health.files[Source.GLIDEIN_OUT] = len(pilots)
        if todo:
            b.health.backlog.setdefault(Source.GLIDEIN_OUT, scan.t0)
        bar = _progress(len(todo), "pilots") if b.progress and len(todo) > 1000 else None
        last_save = now
        deferred: list[layout.PilotFiles] = []
        for ks, p in todo:
            if bar is not None:
                bar.update(1)
            st = self._settled(p, ks, now)
            if st is None:
                continue  # still arriving: the next scan takes it
            if b.client_of(p.username) is None:
                if not last_call:
                    deferred.append(p)  # the completed_jobs lines read next may name its frontend
                    continue
                if not b.cfg.final and now - self.unmapped_since.setdefault(ks, now) < b.cfg.lost_after_seconds:
                    continue  # the factory names the frontend in its next completed_jobs lines
            self._read_pilot(p, ks, st, scan)
            if b.clock() - last_save > 60:
                b.save()
                last_save = b.clock()
        if bar is not None:
            bar.close()
        return deferred

    def _backlog(self, present: dict[str, layout.PilotFiles]) -> None:
        """The .out lag: the oldest .out still waiting (to settle, or for its frontend's name)."""
        b = self.books
        with b.lock:
            times = [sig[1] for k, (sig, _) in self.unsettled.items() if k in present and k not in b.seen]
            times += [t for k, t in self.unmapped_since.items() if k in present and k not in b.seen]
            if times:
                b.health.backlog[Source.GLIDEIN_OUT] = min(times)
            else:
                b.health.backlog.pop(Source.GLIDEIN_OUT, None)

    def _read_pilot(self, p: layout.PilotFiles, ks: str, st: os.stat_result, scan: Scan) -> None:
        """Read and account one settled pilot; a file that makes the reader fail is quarantined.

        Quarantined (``bad_out``, checkpointed): never read again, so a file
        that breaks the reader cannot do it on every scan. A large file is
        marked in flight first, so even a crash the process cannot catch (the
        kernel's OOM killer under the unit's MemoryMax) quarantines it at the
        next start instead of crashing again.
        """
        inflight = st.st_size >= INFLIGHT_MIN_BYTES and self._inflight(ks)
        try:
            self._account_pilot(p, ks, st, scan)
        except Exception as e:  # one hostile file must not stop the scan
            log.error("%s: reading failed, quarantined: %s: %s", p.out, type(e).__name__, e, exc_info=True)
            self.books.errors.record(Source.GLIDEIN_OUT, "quarantined", p.out, None, f"{type(e).__name__}: {e}")
            self._mark_bad(ks)
        finally:
            if inflight:
                self._inflight(None)

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
        if ks and ks not in b.seen:
            log.error("%s was being read when the exporter stopped: quarantined", ks)
            b.errors.record(Source.GLIDEIN_OUT, "quarantined", path, None, f"{ks} crashed the last run")
            b.bad_out[ks] = b.clock()

    def restore(self, data: dict[str, Any]) -> None:
        self._quarantine_inflight()

    def _account_pilot(self, p: layout.PilotFiles, ks: str, st: os.stat_result, scan: Scan) -> None:
        b = self.books
        # One budget for the pilot's two files: no file of a pilot may cost more than a real one.
        budget = Budget()
        root = b.cfg.factory_dir
        out = glidein_out.read_out(p.out, b.errors, b.cfg.max_file_bytes, root=root, budget=budget)
        b.health.bytes_read[Source.GLIDEIN_OUT] += st.st_size
        if out is None:
            self._mark_bad(ks)  # counted as a parse error; its line or event log may still count it
            return
        err = None
        if p.has_err:  # known from the directory listing: no extra stat per pilot
            err = glidein_err.read_err(p.err, b.errors, detail=False, root=root, budget=budget)
            if err is not None and err.trace_spool is not None and b.spool_sink is not None:
                try:
                    b.spool_sink(err.trace_spool, p.err)
                except Exception:  # tracing must never cost the accounting of a pilot
                    log.exception("trace spool of %s not handled", p.err)
            with contextlib.suppress(OSError):
                b.health.bytes_read[Source.GLIDEIN_ERR] += os.path.getsize(p.err)
            if err is not None:
                b.health.records[Source.GLIDEIN_ERR] += 1
        b.health.records[Source.GLIDEIN_OUT] += 1
        d = b.defaults.get(p.entry)
        verdict = plausible.check_glidein(out, err, b.bounds(p.entry, st.st_mtime))
        if verdict.problems:
            b.errors.record(Source.GLIDEIN_OUT, plausible.REASON, p.out, None, "; ".join(verdict.problems))
        self._check_labels(p, out, err, d)
        if not verdict.believed:
            self._mark_bad(ks)  # the factory's own records count it (its line, else the event log)
            return
        b.evidence_of(p.entry).learn(out, p.cluster)
        acc = from_glidein(out, err, d, entry=p.entry, client=out.client, end_hint=st.st_mtime, rules=b.cfg.rules)
        if acc is None:
            b.errors.record(Source.GLIDEIN_OUT, "no_times", p.out)
            self._mark_bad(ks)
            return
        # Labels from the factory (the file's place), not from what the pilot wrote;
        # the path's entry/cluster/proc are the key the other sources use.
        acc.entry, acc.cluster, acc.proc = p.entry, p.cluster, p.proc
        acc.client = b.client_label(p.username, Source.GLIDEIN_OUT, p.out)
        b.account(acc, scan.result, Source.GLIDEIN_OUT)

    def _check_labels(
        self, p: layout.PilotFiles, out: GlideinOut, err: GlideinErr | None, d: EntryDefaults | None
    ) -> None:
        """Count what the pilot says about where it ran that the factory contradicts (never a label)."""
        said = []
        if out.entry is not None and out.entry != p.entry:
            said.append(f"entry {out.entry!r} in {p.entry!r}")
        if err is not None and err.site and d is not None and d.site and err.site != d.site:
            said.append(f"GLIDEIN_Site {err.site!r}, entry's {d.site!r}")
        if said:
            self.books.errors.record(
                Source.GLIDEIN_OUT, "label_mismatch", p.out, None, "; ".join(s[:300] for s in said)
            )

    def _mark_bad(self, ks: str) -> None:
        b = self.books
        with b.lock:
            b.bad_out[ks] = b.clock()
            self.unsettled.pop(ks, None)


def _progress(total: int, unit: str) -> Any:
    """A tqdm bar on a terminal, nothing elsewhere (logs stay clean)."""
    from tqdm import tqdm

    return tqdm(total=total, unit=unit, disable=not sys.stderr.isatty(), leave=False)
