"""Follow append-only logs by byte offset, across restarts, rotation and deletion.

A cursor is (inode, offset). A file whose inode changed, or that shrank below
its cursor, was replaced (rotated or truncated) and is read from the start; a
file that disappeared is forgotten. Only complete records advance a cursor, so
a half-written last line is read again, whole, next time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from .sources import files

T = TypeVar("T")

READ_CHUNK = 8 << 20

# parse(buf, path, base_offset) -> (records, bytes consumed)
Parser = Callable[[bytes, str, int], tuple[list[T], int]]


@dataclass(slots=True)
class Cursor:
    inode: int
    offset: int


class Follower:
    def __init__(self, cursors: dict[str, Cursor] | None = None) -> None:
        self.cursors: dict[str, Cursor] = cursors or {}

    def read_new(self, path: str, parse: Parser[T], sink: Callable[[list[T]], None], *, root: str | None = None) -> int:
        """Parse what was appended to ``path`` since the last call; return bytes consumed.

        ``sink`` gets each batch before the cursor moves past it, so a crash
        between the two re-reads the batch rather than losing it.

        Only a regular file is read (inside ``root``, when given), and only up
        to the size it had when opened: a FIFO or a device raises
        :class:`~gwms_obs.sources.files.FileRefused` (an ``OSError`` whose
        ``reason`` is the parse-error word) instead of blocking or reading
        forever; what a writer appends meanwhile is read next time.
        """
        try:
            f = files.open_regular(path, root=root)
        except OSError:
            self.cursors.pop(path, None)
            raise
        consumed = 0
        with f:
            st = f.st
            c = self.cursors[path] = Cursor(st.st_ino, self.resume_at(path, st.st_ino, st.st_size))
            f.seek(c.offset)
            pending = b""
            while True:
                chunk = f.read(READ_CHUNK)
                if not chunk:
                    break
                buf = pending + chunk if pending else chunk
                records, used = parse(buf, path, c.offset)
                if records:
                    sink(records)
                c.offset += used
                consumed += used
                pending = buf[used:]
        return consumed

    def resume_at(self, path: str, inode: int, size: int) -> int:
        """Where the next read of ``path`` (now ``inode``, ``size`` bytes) begins; moves nothing.

        Its cursor's offset, or 0 when it has none or the file was replaced (its
        inode changed, or it shrank below the cursor).
        """
        c = self.cursors.get(path)
        return c.offset if c is not None and c.inode == inode and c.offset <= size else 0

    def forget_missing(self, present: Iterable[str]) -> None:
        keep = set(present)
        for p in [p for p in self.cursors if p not in keep]:
            del self.cursors[p]

    def to_json(self) -> dict[str, Any]:
        return {p: [c.inode, c.offset] for p, c in self.cursors.items()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Follower:
        return cls({p: Cursor(int(v[0]), int(v[1])) for p, v in data.items() if isinstance(v, list) and len(v) == 2})
