"""Follow append-only logs by byte offset, across restarts, rotation, rewrites and deletion.

A cursor is (inode, offset, fingerprint): the fingerprint is a hash of the
bytes just before the offset (at most ``FINGERPRINT_BYTES``), checked with one
small ``pread`` before each read. A file whose inode changed, that shrank below
its cursor, or whose bytes before the cursor changed (rewritten in place: same
inode, truncated, written again longer) was replaced and is read from the
start; what was counted from it before stays counted once (the stages skip
pilots already seen). A file renamed by a logrotate-style rotation
(``x.log`` -> ``x.log.1``) keeps its cursor: a path with no cursor of its own
takes the cursor of its inode from the path that no longer holds it, when its
bytes still match. A file that disappeared is forgotten. Only complete records
advance a cursor, so a half-written last line is read again, whole, next time.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from .sources import files

READ_CHUNK = 8 << 20
FINGERPRINT_BYTES = 4096  # the bytes before a cursor that must not change: one page, one pread


def fingerprint(window: bytes) -> str:
    return hashlib.blake2b(window, digest_size=8).hexdigest()


@dataclass(slots=True)
class Cursor:
    inode: int
    offset: int
    # Hash of the FINGERPRINT_BYTES (or fewer, from 0) before ``offset``; None: not known
    # (a checkpoint written before fingerprints), the offset is trusted as it was.
    fp: str | None = None


class Reading:
    """One read of a followed log, from its cursor to the size it had when opened.

    Iterating gives buffers: the bytes after the cursor, the incomplete tail of the
    previous buffer first. The reader parses each and calls :meth:`advance` with
    the bytes of the complete records it took; only then does the cursor move past
    them, so a crash before re-reads them rather than losing them. What was not
    taken comes again at the start of the next buffer (a record cut by a read).
    """

    def __init__(self, f: files.RegularFile, cursor: Cursor, tail: bytes) -> None:
        self._f = f
        self._cursor = cursor
        self._tail = tail  # the bytes just before the cursor, for its fingerprint
        self._buf = b""
        self._used = 0
        self.bytes_read = 0  # taken by advance(), this read

    @property
    def offset(self) -> int:
        """Where the current buffer begins in the file."""
        return self._cursor.offset

    def __iter__(self) -> Iterator[bytes]:
        while True:
            chunk = self._f.read(READ_CHUNK)
            if not chunk:
                return
            pending = self._buf[self._used :]
            self._buf = pending + chunk if pending else chunk
            self._used = 0
            yield self._buf

    def advance(self, used: int) -> None:
        """The first ``used`` bytes of the current buffer were taken: move the cursor past them."""
        if not used:
            return
        buf, c = self._buf, self._cursor
        # The bytes just before the new offset, for its fingerprint.
        tail = buf[used - FINGERPRINT_BYTES : used] if used >= FINGERPRINT_BYTES else (self._tail + buf[:used])
        self._tail = tail[-FINGERPRINT_BYTES:]
        c.offset += used
        c.fp = fingerprint(self._tail)
        self._used = used
        self.bytes_read += used

    def __enter__(self) -> Reading:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._f.close()
        self._buf = b""  # the read is done: its last buffer is not kept alive while the next file is read


class Follower:
    def __init__(self, cursors: dict[str, Cursor] | None = None) -> None:
        self.cursors: dict[str, Cursor] = cursors or {}
        # inode -> the path whose cursor had it (a hint, checked): where a renamed file's cursor is
        self._by_inode: dict[int, str] = {c.inode: p for p, c in self.cursors.items()}
        # Cursors displaced this scan by a new file under their path, kept until forget_missing
        # for the rotated name the old file may be read under later in the same scan.
        self._displaced: dict[int, Cursor] = {}

    def open(self, path: str, *, root: str | None = None) -> Reading:
        """Open ``path`` to read what was appended since its cursor (see :class:`Reading`).

        Only a regular file is read (inside ``root``, when given), and only up
        to the size it had when opened: a FIFO or a device raises
        :class:`~gwms_obs.sources.files.FileRefused` (an ``OSError`` whose
        ``reason`` is the parse-error word) instead of blocking or reading
        forever; what a writer appends meanwhile is read next time.
        """
        try:
            f = files.open_regular(path, root=root)
        except OSError:
            self._drop(path)
            raise
        try:
            owner, start, tail, fp = self._resume(path, f)
        except BaseException:
            f.close()
            raise
        old = self.cursors.get(path)
        if old is not None and old.inode != f.st.st_ino:
            self._displaced[old.inode] = old  # its file may be read under a rotated name next
        if owner is not None and owner != path:
            del self.cursors[owner]  # the file was renamed: its cursor moves with it
        self._displaced.pop(f.st.st_ino, None)
        c = self.cursors[path] = Cursor(f.st.st_ino, start, fp)
        self._by_inode[c.inode] = path
        f.seek(start)
        return Reading(f, c, tail)

    def resume_at(self, path: str, f: files.RegularFile) -> int:
        """Where the next read of ``path`` (open as ``f``) begins; moves nothing.

        Its cursor's offset (or, for a renamed file, the cursor it had under its
        old name), or 0 when there is none or the file was replaced: its inode
        changed, it shrank below the cursor, or its bytes before the cursor changed.
        """
        return self._resume(path, f)[1]

    def _resume(self, path: str, f: files.RegularFile) -> tuple[str | None, int, bytes, str | None]:
        """(whose cursor applies, where the read begins, the bytes before it (up to
        FINGERPRINT_BYTES) and their fingerprint)."""
        ino, size = f.st.st_ino, f.st.st_size
        owner: str | None = path
        c = self.cursors.get(path)
        if c is None or c.inode != ino:
            owner, c = self._renamed_from(path, ino)
        if c is None or c.offset > size or c.offset == 0:
            return None, 0, b"", None
        lo = max(0, c.offset - FINGERPRINT_BYTES)
        try:
            window = os.pread(f.fd, c.offset - lo, lo)
        except OSError:
            return None, 0, b"", None
        fp = fingerprint(window)
        if len(window) != c.offset - lo or (c.fp is not None and fp != c.fp):
            return None, 0, b"", None  # rewritten in place: read it again from its start
        return owner, c.offset, window, fp

    def _renamed_from(self, path: str, ino: int) -> tuple[str | None, Cursor | None]:
        """The cursor ``ino`` had under another path that no longer holds it (a rotation)."""
        if (c := self._displaced.get(ino)) is not None:
            return None, c
        old = self._by_inode.get(ino)
        c = self.cursors.get(old) if old is not None and old != path else None
        if old is None or c is None or c.inode != ino:
            return None, None
        try:
            if os.stat(old).st_ino == ino:
                return None, None  # the old name still holds it (a hard link): two files to us
        except OSError:
            pass  # gone: renamed
        return old, c

    def _drop(self, path: str) -> None:
        c = self.cursors.pop(path, None)
        if c is not None and self._by_inode.get(c.inode) == path:
            del self._by_inode[c.inode]

    def forget_missing(self, present: Iterable[str]) -> None:
        keep = set(present)
        for p in [p for p in self.cursors if p not in keep]:
            self._drop(p)
        self._displaced.clear()
        self._by_inode = {c.inode: p for p, c in self.cursors.items()}

    def to_json(self) -> dict[str, Any]:
        return {p: [c.inode, c.offset] if c.fp is None else [c.inode, c.offset, c.fp] for p, c in self.cursors.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Follower:
        """Cursors as :meth:`to_json` wrote them; ``[inode, offset]`` (no fingerprint) is trusted as before."""
        out: dict[str, Cursor] = {}
        for p, v in data.items():
            if isinstance(v, list) and len(v) in (2, 3):
                out[p] = Cursor(int(v[0]), int(v[1]), str(v[2]) if len(v) == 3 else None)
        return cls(out)
