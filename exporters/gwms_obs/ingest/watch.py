"""Event-driven discovery: the factory's trees watched with inotify, a full scan as the safety net.

A full scan walks and stats every file the factory keeps (300,000 pilots on
disk at a large factory), though only a few arrive each second. Once the first
full scan is done, :class:`Discovery` keeps its listing up to date from the
kernel's inotify events instead: a pilot's ``.out``/``.err`` closed, created or
renamed into place, an appended completed_jobs or event log, a rewritten
``descript.xml`` or ``schedd_status.xml``, a new user, frontend or entry
directory (watched as it appears, then listed once for the files written
before its watch). The daemon's short tick (``tick_seconds``) reads just
those files. A full scan still runs at start and every ``full_scan_seconds``,
and catches anything missed.

Scanning takes over, logged and counted in ``gwms_obs_discovery_fallbacks_total``
(catalogue.DISCOVERY_FALLBACKS), whenever the events cannot be trusted:

* ``queue_overflow``: the kernel dropped events (IN_Q_OVERFLOW, a burst beyond
  fs.inotify.max_queued_events): the next tick is a full scan, then watching goes on;
* ``watch_limit``: a directory could not be watched (ENOSPC: fs.inotify.max_user_watches);
* ``remote_filesystem``: the tree is on NFS, CIFS, a FUSE or cluster filesystem
  (its type in /proc/self/mountinfo), where writes from other hosts raise no event;
* ``unavailable``: no inotify here (not Linux, or inotify_init failed);
* ``configured``: ``discovery = "scan"`` in exporter.toml.

The last four scan every ``interval``, as before. The library is
``inotify_simple`` (PyPI, maintained; one ctypes module, no thread of its
own, the raw masks and IN_Q_OVERFLOW as the kernel gives them), chosen over
``watchdog`` (its own observer threads, and a polling fallback that would hide
the overflow we must see) and ``asyncinotify`` (asyncio; the exporter has no
event loop).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..sources import layout
from .books import Listing, key_str

log = logging.getLogger("gwms_obs.ingest.watch")

# Fallback reasons: the reason label of catalogue.DISCOVERY_FALLBACKS.
QUEUE_OVERFLOW = "queue_overflow"
WATCH_LIMIT = "watch_limit"
REMOTE_FILESYSTEM = "remote_filesystem"
UNAVAILABLE = "unavailable"
CONFIGURED = "configured"
FALLBACK_REASONS = (QUEUE_OVERFLOW, WATCH_LIMIT, REMOTE_FILESYSTEM, UNAVAILABLE, CONFIGURED)

# Filesystems where inotify sees only this host's writes (the factory may write from another).
REMOTE_FS_TYPES = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "gpfs", "afs", "beegfs", "fuse"}
)

# inotify(7) masks (as <sys/inotify.h>; inotify_simple.flags has the same values).
IN_MODIFY = 0x2
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x1000000
IN_DONT_FOLLOW = 0x2000000
IN_ISDIR = 0x40000000

_GONE = IN_DELETE | IN_MOVED_FROM
_ARRIVED = IN_CREATE | IN_CLOSE_WRITE | IN_MOVED_TO
# Directories whose subdirectories we follow; entry directories also hold the files we read.
_DIR_MASK = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF
_FILES_MASK = _DIR_MASK | IN_CLOSE_WRITE | IN_MODIFY
_WATCH_FLAGS = IN_ONLYDIR | IN_DONT_FOLLOW  # never a symlink to elsewhere, as the listing

# kind of a watched directory -> (the prefix of the subdirectories it holds, their kind)
_CHILDREN: dict[str, tuple[str, str]] = {
    "client": ("user_", "user"),
    "user": ("glidein_", "glidein"),
    "glidein": ("entry_", "entry"),
    "server": ("entry_", "server_entry"),
    "monitor": ("entry_", "monitor_entry"),
}
_MONITOR_FILES = frozenset({"descript.xml", "schedd_status.xml"})


def remote_fs(path: str, mountinfo: str = "/proc/self/mountinfo") -> str | None:
    """The filesystem type holding ``path`` when inotify cannot see others' writes there, else None.

    The mount is the longest mount point above the resolved path (proc(5): field 5
    the mount point, octal-escaped; the type follows the ``-`` separator).
    """
    try:
        with open(mountinfo, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError:
        return None  # not Linux: inotify is unavailable anyway
    real = os.path.realpath(path)
    best, fstype = -1, ""
    for line in lines:
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right:
            continue
        mnt = fields[4].encode().decode("unicode_escape", errors="replace")
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) > best:
            best, fstype = len(mnt), right.split()[0]
    if fstype in REMOTE_FS_TYPES or fstype.startswith("fuse."):
        return fstype
    return None


@dataclass(slots=True)
class Changes:
    """What changed since the last tick: the files an incremental scan reads."""

    pilots: set[str] = field(default_factory=set)  # keys whose .out/.err arrived, closed or went
    logs: set[str] = field(default_factory=set)  # event-log paths written or renamed into place
    completed: set[str] = field(default_factory=set)  # server/entry_* dirs whose completed_jobs logs changed
    monitor: bool = False  # a descript.xml or schedd_status.xml changed, or a monitor entry appeared
    users: set[str] = field(default_factory=set)  # factory-side users whose directory appeared

    def __bool__(self) -> bool:
        return bool(self.pilots or self.logs or self.completed or self.monitor or self.users)


@dataclass(frozen=True, slots=True)
class _Dir:
    kind: str  # root, client, user, glidein, entry, server, server_entry, monitor, monitor_entry
    path: str
    user: str = ""
    entry: str = ""


class Discovery:
    """The daemon's discovery: when to scan in full, and what changed in between.

    ``count`` is called with a fallback reason each time scanning takes over
    (the health counter on /metrics). Single-threaded: the scan loop calls it.
    """

    def __init__(
        self,
        factory_dir: str,
        monitor_dir: str,
        *,
        full_scan_seconds: float,
        count: Callable[[str], None],
        clock: Callable[[], float] = time.monotonic,
        mode: str = "inotify",
    ) -> None:
        self.factory_dir = factory_dir
        self.monitor_dir = monitor_dir
        self.full_scan_seconds = full_scan_seconds
        self._count = count
        self._clock = clock
        self.ino: Any = None  # inotify_simple.INotify while watching
        self._dirs: dict[int, _Dir] = {}  # wd -> what it watches
        self._wd_of: dict[str, int] = {}  # path -> wd
        self.listing: Listing | None = None  # the last full scan's, kept up to date by the events
        self._logs: dict[str, layout.EventLogFile] = {}  # path -> listing.logs' entry
        self._pending = Changes()
        self._full_due: str | None = "start"  # why the next scan is a full one (None: incremental)
        self._last_full = 0.0
        self.stopped: str | None = None  # the fallback reason, once scanning took over for good
        if mode == "scan":
            self._fall_back(CONFIGURED, 'discovery = "scan" in the config: every interval, a full scan')
            return
        for d in dict.fromkeys((factory_dir, monitor_dir)):
            if os.path.isdir(d) and (fs := remote_fs(d)) is not None:
                self._fall_back(REMOTE_FILESYSTEM, f"{d} is on {fs}: inotify does not see other hosts' writes")
                return
        try:
            from inotify_simple import INotify

            self.ino = INotify(nonblocking=True)
        except (ImportError, AttributeError, OSError) as e:  # not Linux, or no inotify instance left
            self._fall_back(UNAVAILABLE, f"no inotify: {type(e).__name__}: {e}")

    @property
    def watching(self) -> bool:
        return self.ino is not None

    def _fall_back(self, reason: str, why: str) -> None:
        """Scanning takes over for good (this run): logged once, counted."""
        log.warning("discovery: %s; scanning the whole tree every interval instead", why)
        self._count(reason)
        self.stopped = reason
        self.close()

    def close(self) -> None:
        if self.ino is not None:
            self.ino.close()
            self.ino = None
        self._dirs.clear()
        self._wd_of.clear()

    # --- what the next scan is ------------------------------------------------------------------
    def begin(self) -> Changes | None:
        """The changes since the last scan, or None when this scan must be a full one."""
        if self.ino is None:
            return None
        self._drain()
        if self.ino is None:  # the watch limit was hit while following a new directory
            return None
        if self._full_due is None and self._clock() - self._last_full >= self.full_scan_seconds:
            self._full_due = "periodic"
        if self._full_due is not None or self.listing is None:
            return None
        ch, self._pending = self._pending, Changes()
        return ch

    def before_listing(self) -> None:
        """A full scan is about to list the tree: every directory watched first, so nothing
        written from now on is missed; what the queue holds is what the listing will show."""
        if self.ino is None:
            return
        self._drain()
        self._pending = Changes()
        self._full_due = None
        self._last_full = self._clock()
        self._sync()

    def adopt(self, listing: Listing) -> None:
        """The full scan's listing, from now on kept up to date by the events."""
        if self.ino is None:
            return
        self.listing = listing
        self._logs = {f.path: f for f in listing.logs}

    # --- watches --------------------------------------------------------------------------------
    def _watch(self, d: _Dir) -> bool:
        """Watch one directory; False when it cannot be (gone, unreadable, or the watch limit)."""
        if self.ino is None:
            return False
        if d.path in self._wd_of:
            return True
        mask = _FILES_MASK if d.kind in ("entry", "server_entry", "monitor_entry") else _DIR_MASK
        try:
            wd = self.ino.add_watch(d.path, mask | _WATCH_FLAGS)
        except OSError as e:
            if e.errno == errno.ENOSPC:  # fs.inotify.max_user_watches (or max_user_instances)
                self._fall_back(
                    WATCH_LIMIT,
                    f"cannot watch {d.path}: the inotify watch limit is reached (raise fs.inotify.max_user_watches)",
                )
            return False  # gone or unreadable: the full scan's listing counts what it cannot read
        self._dirs[wd] = d
        self._wd_of[d.path] = wd
        return True

    def _sync(self) -> None:
        """Watch every directory of the layout not watched yet (a walk of directories only)."""
        root = _Dir("root", self.factory_dir)
        if self._watch(root):
            for name, kind in (("client", "client"), ("server", "server")):
                self._follow(_Dir(kind, os.path.join(self.factory_dir, name)), list_files=False)
        self._follow(_Dir("monitor", self.monitor_dir), list_files=False)

    def _follow(self, d: _Dir, *, list_files: bool) -> None:
        """Watch ``d`` and the layout's directories below it. ``list_files``: a directory that
        appeared after the listing: what it already holds is a change (written before its watch)."""
        if not self._watch(d):
            return
        if d.kind == "entry":
            if list_files and self.listing is not None:
                self.listing.dirs_by_entry.setdefault(d.entry, []).append(d.path)
                self._pending.users.add(d.user)
                for name in _names(d.path):
                    self._entry_file(d, name, IN_CREATE | IN_CLOSE_WRITE)
            return
        if d.kind == "server_entry":
            if list_files:
                self._pending.completed.add(d.path)
            return
        if d.kind == "monitor_entry":
            self._pending.monitor = self._pending.monitor or list_files
            return
        if d.kind not in _CHILDREN:
            return
        prefix, kind = _CHILDREN[d.kind]
        for name in _names(d.path):
            if name.startswith(prefix):
                child = self._child(d, name, kind)
                if child is not None:
                    self._follow(child, list_files=list_files)

    def _child(self, d: _Dir, name: str, kind: str) -> _Dir | None:
        path = os.path.join(d.path, name)
        if os.path.islink(path):
            return None  # the listing counts it (a symlink is never followed)
        if kind == "user":
            return _Dir(kind, path, user=name[len("user_") :])
        if kind in ("entry", "server_entry", "monitor_entry"):
            return _Dir(kind, path, user=d.user, entry=name[len("entry_") :])
        return _Dir(kind, path, user=d.user)

    # --- events ---------------------------------------------------------------------------------
    def _drain(self) -> None:
        """Apply every queued event to the listing and the pending changes."""
        while self.ino is not None:
            events = self.ino.read(timeout=0)
            if not events:
                return
            for ev in events:
                self._event(ev.wd, ev.mask, ev.name)

    def _event(self, wd: int, mask: int, name: str) -> None:
        if mask & IN_Q_OVERFLOW:
            if self._full_due != QUEUE_OVERFLOW:
                log.warning(
                    "discovery: the inotify queue overflowed (fs.inotify.max_queued_events): "
                    "events were lost, the next scan is a full one"
                )
                self._count(QUEUE_OVERFLOW)
            self._full_due = QUEUE_OVERFLOW
            return
        d = self._dirs.get(wd)
        if d is None:
            return
        if mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF):
            # Gone or moved: its watch no longer names its path (a directory made again under that
            # path is watched by the full scan this asks for).
            del self._dirs[wd]
            if self._wd_of.get(d.path) == wd:
                del self._wd_of[d.path]
            if mask & IN_MOVE_SELF and self.ino is not None:
                with contextlib.suppress(OSError):
                    self.ino.rm_watch(wd)
            self._full_due = self._full_due or "a watched directory went"
            return
        if mask & IN_ISDIR:
            if d.kind in _CHILDREN and mask & (IN_CREATE | IN_MOVED_TO):
                prefix, kind = _CHILDREN[d.kind]
                if name.startswith(prefix) and (child := self._child(d, name, kind)) is not None:
                    self._follow(child, list_files=True)
            elif d.kind == "root" and mask & (IN_CREATE | IN_MOVED_TO) and name in ("client", "server"):
                self._follow(_Dir(name, os.path.join(d.path, name)), list_files=True)
            elif mask & (IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO):
                self._full_due = self._full_due or "a directory moved or went"
            return
        if d.kind == "entry":
            self._entry_file(d, name, mask)
        elif d.kind == "server_entry":
            if layout.is_completed_log(name):
                self._pending.completed.add(d.path)
        elif d.kind == "monitor_entry" and name in _MONITOR_FILES and mask & (_ARRIVED | IN_MODIFY):
            self._pending.monitor = True

    def _entry_file(self, d: _Dir, name: str, mask: int) -> None:
        """One file event in an entry's client directory: the listing follows it."""
        listing = self.listing
        if listing is None:
            return
        path = os.path.join(d.path, name)
        pk = layout.pilot_key_of(name)
        if pk is not None:
            cluster, proc, is_out = pk
            ks = key_str((d.entry, cluster, proc))
            p = listing.present.get(ks)
            if is_out:
                if mask & _GONE:
                    if p is not None and p.out == path:
                        del listing.present[ks]
                        self._pending.pilots.add(ks)
                elif mask & _ARRIVED and (p is None or p.out == path):
                    err = path[:-4] + ".err"
                    listing.present[ks] = layout.PilotFiles(
                        d.entry, d.user, cluster, proc, path, err, os.path.lexists(err)
                    )
                    self._pending.pilots.add(ks)
            elif p is not None and p.err == path:
                if mask & _GONE:
                    listing.present[ks] = replace(p, has_err=False)
                    self._pending.pilots.add(ks)
                elif mask & _ARRIVED:
                    if not p.has_err:
                        listing.present[ks] = replace(p, has_err=True)
                    self._pending.pilots.add(ks)
            return
        f = self._logs.get(path)
        if mask & _GONE:
            if f is not None:
                del self._logs[path]
                listing.logs.remove(f)
            return
        if f is None and mask & (_ARRIVED | IN_MODIFY):
            f = layout.event_log_of(d.user, d.entry, d.path, name)
            if f is None:
                return
            self._logs[path] = f
            listing.logs.append(f)
        if f is not None and mask & (_ARRIVED | IN_MODIFY):
            self._pending.logs.add(path)

    # --- what an incremental scan reads ---------------------------------------------------------
    def pilots(self, ch: Changes, waiting: Iterable[str]) -> list[str]:
        """The pilots to look at, by key in the listing: those whose files changed and those still
        waiting to settle."""
        assert self.listing is not None
        present = self.listing.present
        return [k for k in sorted(ch.pilots.union(waiting)) if k in present]

    def logs(self, ch: Changes) -> list[layout.EventLogFile]:
        """The event logs written since, in the listing's order within each directory."""
        got = [self._logs[p] for p in ch.logs if p in self._logs]
        return sorted(got, key=lambda f: (f.path.rsplit("/", 1)[0], f.day, f.client, -f.rotation))

    def completed(self, ch: Changes, errors: layout.Recorder | None) -> list[tuple[str, str]]:
        """(entry, path) of every completed_jobs log in the server directories that changed, oldest first."""
        out: list[tuple[str, str]] = []
        for sdir in sorted(ch.completed):
            out += layout.completed_logs_in(os.path.basename(sdir)[len("entry_") :], sdir, errors)
        return out


def _names(path: str) -> list[str]:
    try:
        with os.scandir(path) as it:
            return [e.name for e in it]
    except OSError:
        return []  # gone, or unreadable: the full scan's listing counts it
