"""One exporter per checkpoint: an exclusive flock on ``<checkpoint>.lock``, held while it runs.

Two exporters on one checkpoint would both count every pilot, both serve the
full counts and overwrite each other's file (issue 29). The kernel releases a
flock when its holder dies, however it dies, so a lock left by a crashed or
killed exporter never blocks the next one; the holder's pid, start time and
host are written into the file only so the refusal can say who holds it. The
file itself is never removed: unlinking a lock file lets two processes lock
two different inodes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from datetime import UTC, datetime

from .checkpoint import CheckpointError

_HOLDER_BYTES = 4096  # what is read of the lock file to name its holder


class CheckpointLocked(CheckpointError):
    """Another live process holds the checkpoint's lock."""


class CheckpointLock:
    """The lock on one checkpoint; :func:`acquire` takes it, :meth:`release` (or the process's end) frees it."""

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the flock
            self._fd = None

    def __enter__(self) -> CheckpointLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_path(checkpoint: str) -> str:
    return checkpoint + ".lock"


def acquire(checkpoint: str, *, wait_for_holder: float = 1.0) -> CheckpointLock:
    """Lock ``checkpoint`` for this process, or raise CheckpointLocked naming the process that holds it.

    ``wait_for_holder``: how long to wait for a holder that has just taken the
    lock to write its pid, before saying it is unknown.
    """
    path = lock_path(checkpoint)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise CheckpointError(f"cannot open the checkpoint's lock {path}: {e.strerror or e}") from e
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd, wait_for_holder)
        os.close(fd)
        raise CheckpointLocked(
            f"checkpoint {checkpoint} is in use by another gwms-obs export ({holder}; lock {path}): "
            "stop that one, or give this one a checkpoint of its own"
        ) from None
    except OSError as e:  # a file system without locks: refuse rather than risk two writers
        os.close(fd)
        raise CheckpointError(f"cannot lock the checkpoint's lock {path}: {e.strerror or e}") from e
    me = {
        "pid": os.getpid(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
    }
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(me) + "\n").encode(), 0)
    except OSError:  # the lock is held all the same; only the refusal's message would lack the pid
        pass
    return CheckpointLock(path, fd)


def _holder(fd: int, wait: float) -> str:
    """Who holds the lock, as its file says ("pid N, started T on H"), waiting briefly for a new holder to write."""
    deadline = time.monotonic() + wait
    while True:
        with contextlib.suppress(OSError):
            raw = os.pread(fd, _HOLDER_BYTES, 0)
            if raw.strip():
                break
        if time.monotonic() >= deadline:
            return "pid unknown: its lock file is empty"
        time.sleep(0.05)
    try:
        doc = json.loads(raw)
        pid, started, host = int(doc["pid"]), str(doc["started"]), str(doc["host"])
    except (ValueError, TypeError, KeyError):
        return "pid unknown: its lock file is not ours"
    return f"pid {pid}, started {started} on {host[:255]!r}"
