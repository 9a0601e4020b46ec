"""The factory's per-entry completed_jobs logs (``server/entry_*/completed_jobs_*.log``).

Second in precedence: a line of a pilot not counted from its .out waits in
the books' holds (:class:`~gwms_obs.ingest.resolve.Holds`; checkpointed as
``pending``). Once every stage has read, a held line whose .out is really
absent (or proved unusable) counts the pilot. The lines teach
the frontend's name of each factory-side user (looked for right after the
listing, before any pilot is read: :meth:`CompletedJobsStage.name_clients`)
and how the entry's lines are written (raw or normalized Total).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Any

from ..accounting import plausible
from ..accounting.pilot import from_completed_job, line_total_is_raw
from ..catalogue import Source
from ..follow import READ_CHUNK
from ..model import CompletedJob
from ..sources import completed_jobs, files, layout
from .books import Books, PilotFacts
from .outlets import Outlets
from .stage import Scan, Stage

# client="<client_log_name>" username="<user>" of a completed_jobs line, for the frontend map.
_CLIENT_USER = re.compile(rb'client="([^"\n]{1,512})" +username="([^"\n]{1,512})"')


@dataclasses.dataclass(slots=True)
class _Scanned:
    """A buffer read: how many lines, and ``(key, line)`` of those whose pilot is not counted yet."""

    lines: int
    unseen: list[tuple[str, completed_jobs.RawLine | CompletedJob]]


class CompletedJobsStage(Stage):
    sources = (Source.COMPLETED_JOBS,)
    precedence = 20
    checkpoint_keys = ("pending",)

    def __init__(self, books: Books, outlets: Outlets) -> None:
        super().__init__(books, outlets)
        self.holds = books.holds  # its lines of pilots not counted (yet) are books.holds.lines

    def discover(self, scan: Scan) -> Sequence[tuple[str, str]]:
        b = self.books
        return list(layout.completed_logs(b.cfg.factory_dir, b.once))

    def read(self, scan: Scan, found: Sequence[tuple[str, str]]) -> None:
        b = self.books
        b.health.files[Source.COMPLETED_JOBS] = len(found)
        b.health.backlog.setdefault(Source.COMPLETED_JOBS, scan.t0)
        for entry, path in found:
            try:
                b.health.bytes_read[Source.COMPLETED_JOBS] += self._follow(entry, path)
            except OSError as e:  # listed every scan: counted once
                b.once.record(Source.COMPLETED_JOBS, files.reason_of(e), path, None, files.describe(e))
        b.health.backlog.pop(Source.COMPLETED_JOBS, None)

    def _follow(self, entry: str, path: str) -> int:
        """Read what is new in one log since its cursor; the bytes taken."""
        with self.books.follower.open(path, root=self.books.cfg.factory_dir) as log:
            for buf in log:
                scanned, used = self._scan(buf, path, log.offset, entry)
                self._hold(scanned, entry, path)
                log.advance(used)  # past the lines held: a crash before reads them again
        return log.bytes_read

    def _scan(self, buf: bytes, path: str, offset: int, entry: str) -> tuple[_Scanned, int]:
        """The buffer's complete lines, and those of pilots not counted yet; the bytes they take."""
        seen = self.books.counted.seen
        got = completed_jobs.scan_unseen(buf, entry, seen)  # the usual buffer, in compiled code
        if got is not None:
            used, n, unseen = got
            scanned = _Scanned(n, list(unseen))
        else:
            lines, used = completed_jobs.scan_buffer(buf, path, offset, self.books.errors, entry)
            keys = completed_jobs.line_keys(lines, entry)
            # Counted from its .out: the usual case, filtered in one comprehension, nothing converted.
            scanned = _Scanned(len(lines), [(k, raw) for k, raw in zip(keys, lines, strict=True) if k not in seen])
        if self.books.names.unmapped:
            self._learn_clients(buf, used)
        return scanned, used

    def _hold(self, scanned: _Scanned, entry: str, path: str) -> None:
        """Keep the lines of pilots not counted yet; the .out of the others already counted them."""
        b = self.books
        b.health.records[Source.COMPLETED_JOBS] += scanned.lines
        bounds: plausible.Bounds | None = None
        for k, raw in scanned.unseen:
            line = completed_jobs.to_record(raw, entry)
            if isinstance(line, str):
                b.errors.record(Source.COMPLETED_JOBS, line, path)
                continue
            bounds = bounds or b.bounds(entry, 0.0)
            if problems := plausible.check_line(line, bounds):
                # Not used: the event log counts the pilot (as unknown) if its .out cannot.
                detail = f"job {line.cluster}.{line.proc}: " + "; ".join(problems)
                b.errors.record(Source.COMPLETED_JOBS, plausible.REASON, path, None, detail)
                continue
            kind = line_total_is_raw(line, b.fixed_cpus(entry))
            if kind is not None:
                b.evidence_of(entry).note(line.cluster, raw=kind)
            with b.lock:
                self.holds.lines[k] = line  # waits for its .out; settle() decides

    def name_clients(self, scan: Scan) -> None:
        """The names of the listed users with none yet, from the lines this scan will read.

        Only a look: from each log's cursor (its start, if new or replaced) to its end,
        no cursor moved, nothing counted (the read that follows counts it all). Without
        it, a first scan of a factory whose ``[clients]`` do not name its frontends
        would read every pilot before the lines that name them, and then convert and
        check every line, the lines of pilots already counted from their .out included:
        that scan would record line errors and format evidence that a scan with
        ``[clients]``, or any later one, does not.
        """
        b = self.books
        for _, path in self.discover(scan):
            try:
                f = files.open_regular(path, root=b.cfg.factory_dir)
            except OSError:
                continue  # the read says why
            with f:
                f.seek(b.follower.resume_at(path, f))
                while b.names.unmapped and (buf := f.read(READ_CHUNK)):
                    self._learn_clients(buf, len(buf))
            if not b.names.unmapped:
                return

    def _learn_clients(self, buf: bytes, end: int) -> None:
        """The frontend's name for each listed user that has none yet, from the lines in ``buf``.

        Only users still unknown are looked for (one C-level find each), so the
        usual buffer costs nothing here.
        """
        b = self.books
        for user in list(b.names.unmapped):
            i = buf.find(b'username="' + user.encode("utf-8", "surrogateescape") + b'"', 0, end)
            if i < 0:
                continue
            eol = buf.find(b"\n", i, end)
            m = _CLIENT_USER.search(buf, buf.rfind(b"\n", 0, i) + 1, end if eol < 0 else eol)
            if m is not None and m.group(2).decode("utf-8", "replace") == user:
                b.names.learn(user, m.group(1).decode("utf-8", "replace"))

    def settle(self, scan: Scan) -> None:
        """Count the pilots whose .out is absent from their line (the event log's end, if known)."""
        listing = scan.listing
        if listing is None:
            return  # nothing shows which .out files exist: no fallback may count a pilot
        b = self.books
        holds = self.holds
        for k, line in list(holds.lines.items()):
            if k in b.counted.seen:
                del holds.lines[k]
                continue
            entry = k.rsplit("/", 1)[0]
            if holds.winner(k, b.out_waits(k, listing, recheck=True)) is not Source.COMPLETED_JOBS:
                continue
            with b.lock:
                del holds.lines[k]
                # the event log's end of the pilot, when it has one: a better end than the line's
                ended = holds.end_of(k)
            mode = b.cfg.completed_total
            raw = line_total_is_raw(line, b.fixed_cpus(entry))
            if raw is None:
                raw = b.evidence_of(entry).raw_total(line.cluster) if mode == "auto" else mode == "raw"
            acc = from_completed_job(
                line,
                b.defaults.get(entry),
                client=b.names.of(line.username) or line.client,
                raw_total=raw,
                end=ended.ended if ended is not None else None,
            )
            if acc is not None:
                # what a trace is built from, only when one is (this loop runs for every new line)
                facts = PilotFacts(Source.COMPLETED_JOBS, line=line, times=ended) if self.outlets.traces else None
                self.count(acc, scan, Source.COMPLETED_JOBS, facts)
            # else: duration -1/0, the factory had no .out either; the event log decides.

    def state(self) -> dict[str, Any]:
        return {"pending": {k: dataclasses.asdict(line) for k, line in self.holds.lines.items()}}

    def restore(self, data: dict[str, Any]) -> None:
        self.holds.lines = {str(k): CompletedJob(**v) for k, v in data.get("pending", {}).items()}
