"""Open an input file only if it is what it claims: a regular file inside the factory tree.

Every reader opens its files here. The files come from a tree that pilots'
output lands in, so a name like ``job.1.0.out`` may be a FIFO (``open()``
blocks forever waiting for a writer, and SIGTERM cannot interrupt it), a
symlink to ``/dev/zero`` (reads never end) or to ``/etc/passwd`` (a file that
is not the factory's). :func:`open_regular`:

* opens with ``O_NONBLOCK`` (a FIFO or device open returns at once) and
  ``O_NOCTTY``, then refuses anything ``fstat`` does not call a regular file
  (:data:`NOT_REGULAR`);
* with ``root`` given, refuses a symlink whose target resolves outside
  ``root`` (:data:`OUTSIDE_TREE`), and a path outside it; a symlink inside the
  tree is followed (see :func:`_open_in_tree` for what is trusted);
* remembers the size ``fstat`` reported at open: :meth:`RegularFile.read`
  never reads past it, so a file that grows while it is read (or lies about
  its size) costs at most that many bytes; the rest is read next time.
"""

from __future__ import annotations

import errno
import os
import stat
from types import TracebackType

from .. import native
from ..parse_errors import ParseErrors

# Reason words (the ``reason`` label of gwms_obs_parse_errors_total).
NOT_REGULAR = "not_regular"
OUTSIDE_TREE = "outside_tree"
UNREADABLE = "unreadable"

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


class FileRefused(OSError):
    """A file that is not a regular file inside the tree. An ``OSError``, so
    callers that already handle unreadable files handle it; ``reason`` is the
    metric-safe word to record."""

    def __init__(self, reason: str, path: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.path = path
        self.detail = detail


def reason_of(e: OSError) -> str:
    """The parse-error reason for a failed open: ``not_regular``, ``outside_tree`` or ``unreadable``."""
    return e.reason if isinstance(e, FileRefused) else UNREADABLE


def describe(e: OSError) -> str:
    """A short detail for the log line of a failed open."""
    if isinstance(e, FileRefused):
        return e.detail
    return f"{type(e).__name__}: {e.strerror or e}"


def within(path: str, root: str) -> bool:
    """Whether the resolved ``path`` is ``root`` or below it (both already resolved)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


class RegularFile:
    """A regular file opened by :func:`open_regular`; reads stop at ``size``."""

    __slots__ = ("fd", "path", "pos", "size", "st")

    def __init__(self, fd: int, path: str, st: os.stat_result) -> None:
        self.fd = fd
        self.path = path
        self.st = st
        self.size = st.st_size  # as fstat said at open: the read bound
        self.pos = 0

    def seek(self, offset: int) -> None:
        """Move to ``offset`` (clamped to ``[0, size]``)."""
        self.pos = min(max(offset, 0), self.size)

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all up to ``size`` when ``n < 0``), never past ``size``.

        A file truncated while read returns what is left (possibly ``b""``).
        """
        want = self.size - self.pos if n < 0 else min(n, self.size - self.pos)
        parts: list[bytes] = []
        while want > 0:
            chunk = os.pread(self.fd, min(want, 8 << 20), self.pos)
            if not chunk:
                break  # truncated under us
            parts.append(chunk)
            self.pos += len(chunk)
            want -= len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> RegularFile:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def open_regular(path: str, *, root: str | None = None) -> RegularFile:
    """Open ``path`` for reading if it is a regular file (inside ``root``, when given).

    Raises :class:`FileRefused` (reason ``not_regular`` or ``outside_tree``)
    or the ``OSError`` of the failed open (missing, permission, symlink loop).
    Never blocks: FIFOs and devices are opened non-blocking and refused.
    """
    fd = _open_in_tree(path, root) if root is not None else os.open(path, _FLAGS)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileRefused(NOT_REGULAR, path, f"{_kind(st.st_mode)}, not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return RegularFile(fd, path, st)


def lexically_inside(path: str, root: str) -> bool:
    """Whether ``path`` is lexically under ``root`` without ``..``: then :func:`open_regular`
    opens it with ``O_NOFOLLOW`` (a symlink is resolved only after that open fails with ELOOP)."""
    # Asked for every pilot file read: a normal absolute path under an absolute root (no
    # "." or ".." component, no "//", no trailing "/": what the tree walk yields) is
    # inside as it is; anything else is compared as abspath makes it.
    top = _PREFIX.get(root)
    if top is None and os.path.isabs(root):
        top = _PREFIX[root] = os.path.abspath(root).rstrip(os.sep) + os.sep
    if top is not None and path.startswith(top) and "/." not in path and "//" not in path and path[-1] != os.sep:
        return True
    return ".." not in path.split(os.sep) and within(os.path.abspath(path), os.path.abspath(root))


# An absolute root -> its abspath and a "/" (abspath of an absolute path is a pure function of it).
_PREFIX: dict[str, str] = {}


def fast_read(path: str, root: str | None, limit: int) -> bytes | None:
    """The whole file in one compiled call (``gwms_obs_native.read_regular``), when it is a
    regular file of at most ``limit`` bytes that :func:`open_regular` would open the same
    way: without ``root``, or lexically inside it (``O_NOFOLLOW``). None otherwise, or for
    any failure, and then the caller reads through :func:`open_regular`, which records why."""
    core = native.core
    if core is None:
        return None
    if root is None:
        return core.read_regular(path, False, limit)  # type: ignore[no-any-return]
    if not lexically_inside(path, root):
        return None  # a symlink or ".." to resolve: open_regular's slow path
    return core.read_regular(path, True, limit)  # type: ignore[no-any-return]


def _open_in_tree(path: str, root: str) -> int:
    """An fd for ``path`` if it resolves inside ``root``, else :class:`FileRefused`.

    Fast path (the usual pilot file, ~1 syscall): a path lexically under
    ``root``, without ``..``, whose last component is not a symlink
    (``O_NOFOLLOW``). Its directories are trusted as the tree walk found them
    (:mod:`gwms_obs.sources.layout` never yields a directory symlink), so that
    the ~8 lstat calls of a full resolution are paid only by symlinked files:
    those are resolved (``realpath``) and their target must be inside the
    resolved ``root``.
    """
    if lexically_inside(path, root):
        try:
            return os.open(path, _FLAGS | os.O_NOFOLLOW)
        except OSError as e:
            if e.errno != errno.ELOOP:  # ELOOP: the file is a symlink; resolve it below
                raise
    # strict: a missing target or a symlink loop is an OSError here, not a guess.
    target = os.path.realpath(path, strict=True)
    real_root = os.path.realpath(root)
    if not within(target, real_root):
        raise FileRefused(OUTSIDE_TREE, path, f"resolves to {target}, outside {real_root}")
    # O_NOFOLLOW: the resolved last component cannot be swapped for a symlink since the check.
    return os.open(target, _FLAGS | os.O_NOFOLLOW)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return f"mode {stat.S_IFMT(mode):o}"


def open_or_record(path: str, errors: ParseErrors, source: str, *, root: str | None = None) -> RegularFile | None:
    """:func:`open_regular`, with a failure recorded (its reason word) instead of raised."""
    try:
        return open_regular(path, root=root)
    except OSError as e:
        errors.record(source, reason_of(e), path, None, describe(e))
        return None
