"""Where the factory keeps each source (formats doc §0), found with one scandir walk.

<factory>/client/user_<user>/glidein_<name>/entry_<entry>/job.<C>.<P>.out|.err
<factory>/client/user_<user>/glidein_<name>/entry_<entry>/condor_activity_<YYYYMMDD>_<client>.log
<factory>/server/entry_<entry>/completed_jobs_<YYYYMMDD>.log
<monitor>/entry_<entry>/schedd_status.xml, descript.xml
<frontend monitor>/group_<group>/frontend_status.xml, frontend_status.xml, descript.xml (the VO frontend's)

The walk has a fixed depth and never follows a directory symlink, so it
cannot run away; what it skips is counted when the caller passes ``errors``:

* ``unreadable_dir``: a directory that cannot be listed (permissions, I/O),
  a directory symlink where a directory belongs (not followed: it could loop
  or leave the tree), or a directory seen twice by (device, inode) (a bind
  mount loop, which would list the same pilots under two entries);
* ``noncanonical_name``: ``job.<C>.<P>.out`` whose ids are not plain decimal
  (``job.01.0.out``, ``job.1.00.out``, non-ASCII digits). HTCondor writes
  ``$(Cluster).$(Process)`` without leading zeros, so such a name is not a
  pilot's file; reading it as pilot (1, 0) would let one pilot count many
  times, or a forged file stand in for the real one. It is counted, not read.

A directory that vanished during the walk (ENOENT) is the factory cleaning
up, not an error. Each listing counts again what it skips; :class:`OncePerPath`
counts each (source, reason, path) once across listings.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ..catalogue import Source

UNREADABLE_DIR = "unreadable_dir"
NONCANONICAL_NAME = "noncanonical_name"

# [0-9], not \d: a str pattern's \d matches any Unicode digit, and int() reads them.
_ID = r"(0|[1-9][0-9]{0,17})\.(0|[1-9][0-9]{0,8})"
_JOB_OUT = re.compile(rf"job\.{_ID}\.out")
_ANY_JOB_OUT = re.compile(r"job\..*\.out", re.S)  # the shape of a pilot's .out, canonical or not
# A log may carry a logrotate-style suffix (".1", ".2"...: the same log, renamed; older
# the higher the number). GlideinWMS itself never renames them (one file per day, deleted
# by its cleanup), but a site's logrotate may; the daemon follows a renamed file by its inode.
ROTATED = r"(?:\.([1-9][0-9]{0,3}))?"
_EVENT_LOG = re.compile(rf"condor_activity_([0-9]{{8}})_(.+)\.log{ROTATED}")
_COMPLETED = re.compile(rf"completed_jobs_([0-9]{{8}})\.log{ROTATED}")


class Recorder(Protocol):
    """What the walk needs of :class:`~gwms_obs.parse_errors.ParseErrors`."""

    def record(self, source: str, reason: str, path: str, offset: int | None = None, detail: str = "") -> None: ...


class OncePerPath:
    """Passes each (source, reason, path) to ``errors`` once: the exporter lists
    the tree every scan, and a bad directory or name must not count every scan.

    Memory is bounded: past ``max_keys`` keys the memory is cleared (and what
    is still there counts once more).
    """

    def __init__(self, errors: Recorder, max_keys: int = 100_000) -> None:
        self.errors = errors
        self.max_keys = max_keys
        self._seen: set[tuple[str, str, str]] = set()

    def record(self, source: str, reason: str, path: str, offset: int | None = None, detail: str = "") -> None:
        key = (source, reason, path)
        if key in self._seen:
            return
        if len(self._seen) >= self.max_keys:
            self._seen.clear()
        self._seen.add(key)
        self.errors.record(source, reason, path, offset, detail)


@dataclass(frozen=True, slots=True)
class PilotFiles:
    entry: str
    username: str
    cluster: int
    proc: int
    out: str
    err: str
    has_err: bool  # the .err was in the same directory listing

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.entry, self.cluster, self.proc)


@dataclass(frozen=True, slots=True)
class EventLogFile:
    path: str
    entry: str
    username: str
    client: str
    day: str  # YYYYMMDD, the submit day
    rotation: int = 0  # N of a logrotate-style ".log.N" name (0: the log's own name)


def _listing_failed(e: OSError, path: str, errors: Recorder | None, source: str) -> None:
    if errors is not None and e.errno != errno.ENOENT:
        errors.record(source, UNREADABLE_DIR, path, None, f"{type(e).__name__}: {e.strerror or e}")


def _subdirs(
    path: str, prefix: str, errors: Recorder | None, source: str, seen: set[tuple[int, int]] | None = None
) -> Iterator[tuple[str, str]]:
    """(name after ``prefix``, path) of each real subdirectory named ``prefix``…

    ``seen`` holds the (device, inode) of directories already yielded by this
    walk: one seen again is a loop (bind mount) and is skipped, counted.
    """
    try:
        with os.scandir(path) as it:
            for e in it:
                if not e.name.startswith(prefix):
                    continue
                try:
                    if e.is_symlink():
                        if errors is not None:
                            target = os.readlink(e.path)
                            errors.record(
                                source, UNREADABLE_DIR, e.path, None, f"a symlink to {target!r}, not followed"
                            )
                        continue
                    if not e.is_dir(follow_symlinks=False):
                        continue  # a stray file named like a directory
                    if seen is not None:
                        st = e.stat(follow_symlinks=False)
                        ident = (st.st_dev, st.st_ino)
                        if ident in seen:
                            if errors is not None:
                                errors.record(source, UNREADABLE_DIR, e.path, None, "seen twice (a loop or bind mount)")
                            continue
                        seen.add(ident)
                except OSError as err:
                    _listing_failed(err, e.path, errors, source)
                    continue
                yield e.name[len(prefix) :], e.path
    except OSError as e:
        _listing_failed(e, path, errors, source)


def entry_dirs(factory_dir: str, errors: Recorder | None = None) -> Iterator[tuple[str, str, str]]:
    """(username, entry, dir) of every client/user_*/glidein_*/entry_* directory."""
    src = Source.GLIDEIN_OUT.value
    seen: set[tuple[int, int]] = set()
    for user, udir in _subdirs(os.path.join(factory_dir, "client"), "user_", errors, src, seen):
        for _, gdir in _subdirs(udir, "glidein_", errors, src, seen):
            for entry, edir in _subdirs(gdir, "entry_", errors, src, seen):
                yield user, entry, edir


def scan_client_dir(
    username: str, entry: str, edir: str, errors: Recorder | None = None
) -> tuple[list[PilotFiles], list[EventLogFile]]:
    names = _names_in(edir, errors)
    return _parse_client_dir(username, entry, edir, names, errors) if names is not None else ([], [])


def _names_in(edir: str, errors: Recorder | None) -> list[str] | None:
    try:
        with os.scandir(edir) as it:
            return [e.name for e in it]
    except OSError as e:
        _listing_failed(e, edir, errors, Source.GLIDEIN_OUT.value)
        return None


def _parse_client_dir(
    username: str, entry: str, edir: str, names: list[str], errors: Recorder | None
) -> tuple[list[PilotFiles], list[EventLogFile]]:
    pilots: list[PilotFiles] = []
    logs: list[EventLogFile] = []
    src = Source.GLIDEIN_OUT.value
    present = set(names)
    for name in names:
        if m := _JOB_OUT.fullmatch(name):
            out = os.path.join(edir, name)
            err = name[:-4] + ".err"
            pilots.append(PilotFiles(entry, username, int(m[1]), int(m[2]), out, out[:-4] + ".err", err in present))
        elif m := _EVENT_LOG.fullmatch(name):
            logs.append(EventLogFile(os.path.join(edir, name), entry, username, m[2], m[1], int(m[3] or 0)))
        elif errors is not None and _ANY_JOB_OUT.fullmatch(name):
            errors.record(
                src, NONCANONICAL_NAME, os.path.join(edir, name), None, "not job.<cluster>.<proc>.out in plain decimal"
            )
    pilots.sort(key=lambda p: (p.cluster, p.proc))
    logs.sort(key=lambda f: (f.day, f.client, -f.rotation))
    return pilots, logs


@dataclass(slots=True)
class _DirListing:
    names: tuple[int, int]  # (how many, hash) of the directory's names, in the order listed
    pilots: dict[str, PilotFiles]  # key -> files, by (cluster, proc)
    logs: list[EventLogFile]


class ClientDirs:
    """Lists every entry's client directory, parsing again only those whose names changed.

    A full scan of a large factory lists some 600,000 names, nearly all as they were an hour
    before: a directory whose names are those of its last listing (their count and the hash
    of the names in order; str hashes are keyed per process, so no name can be chosen to
    collide) gives back its last parse, not a regular expression, a join and an object per
    file again. ``key_of``: the pilots' key in the listing (ingest/books.py's key_str).
    Holds only the directories of the last listing: their dicts, ~28 bytes a pilot (8.4 MB at
    301,040), the files' objects being the listing's own.
    """

    def __init__(self, key_of: Callable[[tuple[str, int, int]], str]) -> None:
        self._key_of = key_of
        self._last: dict[str, _DirListing] = {}

    def list(
        self, factory_dir: str, errors: Recorder | None = None
    ) -> tuple[list[tuple[str, str, str]], dict[str, PilotFiles], list[EventLogFile]]:
        """(user, entry, dir) of each client directory, the pilots' files by key (a pilot listed
        in two directories: the first), and the event logs; as :func:`scan_client_dir` on each."""
        client_dirs = list(entry_dirs(factory_dir, errors))
        last, self._last = self._last, {}
        parts: list[dict[str, PilotFiles]] = []
        logs: list[EventLogFile] = []
        for user, entry, edir in client_dirs:
            names = _names_in(edir, errors)
            if names is None:
                continue
            sig = (len(names), hash(tuple(names)))
            got = last.get(edir)
            if got is None or got.names != sig:
                pilots, dlogs = _parse_client_dir(user, entry, edir, names, errors)
                got = _DirListing(sig, {self._key_of(p.key): p for p in pilots}, dlogs)
            self._last[edir] = got
            parts.append(got.pilots)
            logs.extend(got.logs)
        present: dict[str, PilotFiles] = {}
        for part in parts:
            present.update(part)
        if len(present) != sum(map(len, parts)):  # a pilot in two directories: the first listed is its
            present = {}
            for part in parts:
                for k, p in part.items():
                    present.setdefault(k, p)
        return client_dirs, present, logs


# What a name in an entry's client directory is, for the watch (ingest/watch.py) that sees
# one name at a time: the same patterns as the listing's.
_JOB_ERR = re.compile(rf"job\.{_ID}\.err")


def pilot_key_of(name: str) -> tuple[int, int, bool] | None:
    """(cluster, proc, is_out) of a pilot's canonical ``job.C.P.out`` or ``.err`` name, else None."""
    if m := _JOB_OUT.fullmatch(name):
        return int(m[1]), int(m[2]), True
    if m := _JOB_ERR.fullmatch(name):
        return int(m[1]), int(m[2]), False
    return None


def event_log_of(username: str, entry: str, edir: str, name: str) -> EventLogFile | None:
    """The event log named ``name`` in an entry's client directory, else None."""
    m = _EVENT_LOG.fullmatch(name)
    return EventLogFile(os.path.join(edir, name), entry, username, m[2], m[1], int(m[3] or 0)) if m else None


def is_completed_log(name: str) -> bool:
    return _COMPLETED.fullmatch(name) is not None


def completed_logs(factory_dir: str, errors: Recorder | None = None) -> Iterator[tuple[str, str]]:
    """(entry, path) of every completed_jobs log, oldest first per entry (by day, then
    rotated copies before the log: ``.log.2``, ``.log.1``, ``.log``)."""
    src = Source.COMPLETED_JOBS.value
    for entry, sdir in _subdirs(os.path.join(factory_dir, "server"), "entry_", errors, src, set()):
        yield from completed_logs_in(entry, sdir, errors)


def completed_logs_in(entry: str, sdir: str, errors: Recorder | None = None) -> list[tuple[str, str]]:
    """(entry, path) of the completed_jobs logs of one ``server/entry_*`` directory, oldest first."""
    try:
        with os.scandir(sdir) as it:
            # (day, -rotation, name): by day, then .log.2, .log.1, .log (oldest first)
            found = sorted((m[1], -int(m[2] or 0), m[0]) for e in it if (m := _COMPLETED.fullmatch(e.name)))
    except OSError as e:
        _listing_failed(e, sdir, errors, Source.COMPLETED_JOBS.value)
        return []
    return [(entry, os.path.join(sdir, name)) for *_, name in found]


def monitor_entries(
    monitor_dir: str, errors: Recorder | None = None, *, source: str = Source.SCHEDD_STATUS.value
) -> Iterator[tuple[str, str]]:
    """(entry, dir) of every monitor/entry_* directory (what is skipped is counted under ``source``)."""
    yield from _subdirs(monitor_dir, "entry_", errors, source, set())


def frontend_groups(monitor_dir: str, errors: Recorder | None = None) -> Iterator[tuple[str, str]]:
    """(group, dir) of every group_* directory of a VO frontend's monitor dir."""
    yield from _subdirs(monitor_dir, "group_", errors, Source.FRONTEND_STATUS.value, set())


def monitor_files(entries: Iterable[tuple[str, str]], name: str) -> Iterator[tuple[str, str, float]]:
    """(entry, path, mtime) of each entry's ``name`` that exists, from :func:`monitor_entries`."""
    for entry, d in entries:
        path = os.path.join(d, name)
        try:
            yield entry, path, os.stat(path).st_mtime
        except OSError:
            continue  # not written yet, or gone: nothing to read
