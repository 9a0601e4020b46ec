"""The factory's own entry logs (``server/entry_<e>/<e>.<ext>.log``): submissions, failures, removals.

Each entry process's log files (sources/factory_log.py says where GlideinWMS
writes what) are followed like the completed_jobs logs, with the books'
Follower: a cursor per file, checkpointed, a rotated copy
(``<file>.YYYY-MM-DD_HH-MM``) read before the file under its old cursor. The
stage counts no pilot: it adds to the ledger's submitted, submit-failure and
removed tables as it reads, and runs last.

Two things are kept between reads (and in the checkpoint, ``factory_log``):
the client each file's newest request named (a submission line does not name
it), and which of an entry's files each level is counted from: the first (in
name order) that had a record of it. Two process logs that keep one level (an
``all`` log beside ``info``) hold its records twice; the other file's are not
counted. A file that is gone gives its levels up.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from typing import Any

from ..accounting.pilot import EntryDefaults
from ..catalogue import Source
from ..sources import factory_log, files, layout
from .books import Listing
from .outlets import FactoryLogCount
from .stage import Scan, Stage

log = logging.getLogger("gwms_obs.ingest.factory_log")

# Between full scans the inotify watch names the files that changed, not these logs: its ticks read
# them at most this often (a submission shows within it; the alert waits far longer).
TICK_SECONDS = 30.0
FAILURE_LOG_SECONDS = 600.0  # an entry's failure text is logged when it changes, else at most this often
_ROTATED = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}_[0-9]{2}-[0-9]{2}")
UNKNOWN_CLIENT = "unknown"  # a submission before any request line of its file (a log cut by hand)


def process_logs(factory_dir: str, errors: layout.Recorder | None = None) -> list[tuple[str, str, str]]:
    """(entry, file, path) of each entry's process logs, ``server/entry_<e>/<e>.<ext>.log``
    (``file``: that name, what a rotated copy's cursor and client belong to), with the
    copies GlideinHandler rotated (``<file>.YYYY-MM-DD_HH-MM``) before their file, oldest
    first. Compressed copies are not read: the handler renames then compresses, and
    what was not read before that is not counted."""
    out: list[tuple[str, str, str]] = []
    src = Source.FACTORY_LOG.value
    for entry, sdir in layout.monitor_entries(os.path.join(factory_dir, "server"), errors, source=src):
        prefix = entry + "."
        try:
            with os.scandir(sdir) as it:
                names = [e.name for e in it if e.name.startswith(prefix)]
        except OSError as e:
            if errors is not None:
                errors.record(src, layout.UNREADABLE_DIR, sdir, None, files.describe(e))
            continue
        found: list[tuple[str, int, str]] = []
        for name in names:
            ext, dot, rest = name[len(prefix) :].partition(".log")
            if not dot or not ext or "." in ext or ext.endswith("admin"):
                continue  # not <e>.<ext>.log (an ADMIN handler's <e>admin.<ext>.log repeats the others)
            if rest == "":
                found.append((name, 1, ""))
            elif rest[0] == "." and _ROTATED.fullmatch(rest[1:]):
                found.append((name[: -len(rest)], 0, rest[1:]))
        for base, current, stamp in sorted(found):
            out.append((entry, base, os.path.join(sdir, base if current else f"{base}.{stamp}")))
    return out


class FactoryLogStage(Stage):
    sources = (Source.FACTORY_LOG,)
    precedence = 60
    checkpoint_keys = ("factory_log",)

    def __init__(self, *args: Any) -> None:  # the Stage's own arguments
        super().__init__(*args)
        self.clients: dict[str, str] = {}  # a log file's path (rotated copies: their file's) -> its newest client
        self.owners: dict[str, dict[str, str]] = {}  # entry -> level -> the file (path) it is counted from
        self._failure_logged: dict[str, tuple[str, float]] = {}  # entry -> (text, when) last logged
        self._read_at = float("-inf")  # the start of the scan that last read the logs

    def due(self, now: float) -> bool:
        """Whether a watched tick at ``now`` should read the logs (TICK_SECONDS since the last read)."""
        return now - self._read_at >= TICK_SECONDS

    def discover(self, scan: Scan) -> Sequence[tuple[str, str, str]]:
        return process_logs(self.books.cfg.factory_dir, self.books.once)

    def read(self, scan: Scan, found: Sequence[tuple[str, str, str]]) -> None:
        b = self.books
        src = Source.FACTORY_LOG
        self._read_at = scan.t0
        # A level's file that is no longer listed gives the level up (to a file of the entry that has it).
        listed = {os.path.join(os.path.dirname(path), name) for _, name, path in found}
        for entry, owners in list(self.owners.items()):
            self.owners[entry] = {level: p for level, p in owners.items() if p in listed}
        b.health.files[src] = len(found)
        b.health.backlog.setdefault(src, scan.t0)
        for entry, name, path in found:
            try:
                b.health.bytes_read[src] += self._follow(entry, os.path.join(os.path.dirname(path), name), path)
            except OSError as e:  # listed every scan: counted once
                b.once.record(src, files.reason_of(e), path, None, files.describe(e))
        b.health.backlog.pop(src, None)

    def _follow(self, entry: str, name: str, path: str) -> int:
        """Read what is new in one log since its cursor; the bytes taken."""
        b = self.books
        with b.follower.open(path, root=b.cfg.factory_dir) as reading:
            for buf in reading:
                records, used = factory_log.scan_buffer(buf, path, reading.offset, b.errors)
                b.health.records[Source.FACTORY_LOG] += len(records)
                self._count(entry, name, records)
                reading.advance(used)
        return reading.bytes_read

    def _count(self, entry: str, name: str, records: list[factory_log.Record]) -> None:
        b = self.books
        site = (b.defaults.get(entry) or EntryDefaults()).site or "unknown"
        owners = self.owners.setdefault(entry, {})
        sink = self.outlets.factory_log
        for r in records:
            if r.kind is factory_log.Kind.CLIENT:
                self.clients[name] = r.client
                continue
            if owners.setdefault(r.level, name) != name:
                continue  # another of the entry's files keeps this level: counted from there
            with b.lock:
                if r.kind is factory_log.Kind.SUBMITTED:
                    what, label = "submitted", self.clients.get(name, UNKNOWN_CLIENT)
                    b.ledger.add_submitted(entry, label, site, r.n)
                elif r.kind is factory_log.Kind.SUBMIT_FAILED:
                    what, label = "submit_failures", ""
                    b.ledger.add_submit_failure(entry, site)
                elif r.reason is not None:
                    what, label = "removed", r.reason.value
                    b.ledger.add_removed(entry, site, label, r.n)
                else:
                    continue
            if sink is not None:
                sink(FactoryLogCount(entry, site, what, label, r.n, r.t))
            if r.kind is factory_log.Kind.SUBMIT_FAILED:
                self._log_failure(entry, r)

    def _log_failure(self, entry: str, r: factory_log.Record) -> None:
        """The entry's newest failure, redacted and bounded by the reader: when its text changes,
        else at most every FAILURE_LOG_SECONDS (a refused submitter fails every cycle, and a first
        read of a day's log would log each)."""
        now = self.books.clock()
        last = self._failure_logged.get(entry)
        if last is not None and last[0] == r.text and now - last[1] < FAILURE_LOG_SECONDS:
            return
        self._failure_logged[entry] = (r.text, now)
        log.warning("condor_submit failed at entry %s: %s", entry, r.text)

    def prune(self, listing: Listing) -> None:
        """Forget the clients of files gone, and the entries whose files all went."""
        self.clients = {p: c for p, c in self.clients.items() if os.path.exists(p)}
        self.owners = {e: o for e, o in self.owners.items() if o}

    def state(self) -> dict[str, Any]:
        return {"factory_log": {"clients": dict(self.clients), "owners": {e: dict(o) for e, o in self.owners.items()}}}

    def restore(self, data: dict[str, Any]) -> None:
        got = data.get("factory_log", {})
        self.clients = {str(k): str(v) for k, v in got.get("clients", {}).items()}
        self.owners = {str(e): {str(level): str(p) for level, p in o.items()} for e, o in got.get("owners", {}).items()}
