"""Where the factory keeps each source (formats doc §0), found with one scandir walk.

<factory>/client/user_<user>/glidein_<name>/entry_<entry>/job.<C>.<P>.out|.err
<factory>/client/user_<user>/glidein_<name>/entry_<entry>/condor_activity_<YYYYMMDD>_<client>.log
<factory>/server/entry_<entry>/completed_jobs_<YYYYMMDD>.log
<monitor>/entry_<entry>/schedd_status.xml, descript.xml
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

_JOB_OUT = re.compile(r"job\.(\d{1,18})\.(\d{1,9})\.out")
_EVENT_LOG = re.compile(r"condor_activity_(\d{8})_(.+)\.log")
_COMPLETED = re.compile(r"completed_jobs_(\d{8})\.log")


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


def _subdirs(path: str, prefix: str) -> Iterator[tuple[str, str]]:
    try:
        with os.scandir(path) as it:
            for e in it:
                if e.name.startswith(prefix) and e.is_dir(follow_symlinks=False):
                    yield e.name[len(prefix) :], e.path
    except OSError:
        return


def entry_dirs(factory_dir: str) -> Iterator[tuple[str, str, str]]:
    """(username, entry, dir) of every client/user_*/glidein_*/entry_* directory."""
    for user, udir in _subdirs(os.path.join(factory_dir, "client"), "user_"):
        for _, gdir in _subdirs(udir, "glidein_"):
            for entry, edir in _subdirs(gdir, "entry_"):
                yield user, entry, edir


def scan_client_dir(username: str, entry: str, edir: str) -> tuple[list[PilotFiles], list[EventLogFile]]:
    pilots: list[PilotFiles] = []
    logs: list[EventLogFile] = []
    try:
        with os.scandir(edir) as it:
            names = [e.name for e in it]
    except OSError:
        return pilots, logs
    present = set(names)
    for name in names:
        if m := _JOB_OUT.fullmatch(name):
            out = os.path.join(edir, name)
            err = name[:-4] + ".err"
            pilots.append(PilotFiles(entry, username, int(m[1]), int(m[2]), out, out[:-4] + ".err", err in present))
        elif m := _EVENT_LOG.fullmatch(name):
            logs.append(EventLogFile(os.path.join(edir, name), entry, username, m[2], m[1]))
    pilots.sort(key=lambda p: (p.cluster, p.proc))
    logs.sort(key=lambda f: (f.day, f.path))
    return pilots, logs


def completed_logs(factory_dir: str) -> Iterator[tuple[str, str]]:
    """(entry, path) of every completed_jobs log, oldest day first per entry."""
    for entry, sdir in _subdirs(os.path.join(factory_dir, "server"), "entry_"):
        try:
            with os.scandir(sdir) as it:
                names = sorted(e.name for e in it if _COMPLETED.fullmatch(e.name))
        except OSError:
            continue
        for name in names:
            yield entry, os.path.join(sdir, name)


def monitor_entries(monitor_dir: str) -> Iterator[tuple[str, str]]:
    """(entry, dir) of every monitor/entry_* directory."""
    yield from _subdirs(monitor_dir, "entry_")
