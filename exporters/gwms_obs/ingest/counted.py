"""The pilots already counted, and those whose .out proved unusable: what every stage skips.

Keys are ``entry/cluster.proc`` strings: the compiled completed_jobs reader
looks its lines up in ``seen`` as it is (native.completed_jobs.scan_unseen),
and the checkpoint stores both under these keys. ``seen`` is written to through :meth:`Counted.count`,
which notes the key for the checkpoint's journal (ingest/checkpoint.py): between two checkpoints a
watching daemon counts a few hundred of the hundreds of thousands it remembers.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any

from .checkpoint import Op


class Counted:
    def __init__(self) -> None:
        self.seen: dict[str, float] = {}  # key -> when counted
        self.bad_out: dict[str, float] = {}  # key -> when its .out proved unusable (fallbacks may count it)
        # Counted and forgotten since the last checkpoint (None: it is written whole next).
        self._new: list[str] | None = None
        self._gone: list[str] = []

    def count(self, key: str, when: float) -> None:
        self.seen[key] = when
        if self._new is not None:
            self._new.append(key)

    def forget(self, cutoff: float, present: Container[str]) -> None:
        """Forget the pilots counted (or quarantined) before ``cutoff`` whose files are gone."""
        for d in (self.seen, self.bad_out):
            old = [k for k, t in d.items() if t < cutoff and k not in present]
            for k in old:
                del d[k]
            if d is self.seen and self._new is not None:
                self._gone += old  # an hour's pilots at most, at a full scan's prune

    def state(self) -> dict[str, Any]:
        return {"seen": self.seen, "bad_out": self.bad_out}

    def changes(self) -> list[Op] | None:
        """Its part of a journal record: the pilots counted and forgotten since the last checkpoint
        (``bad_out``, a handful, whole). None: it cannot say, the next checkpoint must be a base."""
        if self._new is None:
            return None
        seen = self.seen
        return [
            ("dict", ["seen"], {"set": {k: seen[k] for k in self._new if k in seen}, "del": self._gone}),
            ("whole", ["bad_out"], self.bad_out),
        ]

    def saved(self) -> None:
        """The checkpoint on disk holds what it has now."""
        self._new, self._gone = [], []

    def restore(self, data: dict[str, Any]) -> None:
        self.seen = {str(k): float(v) for k, v in data.get("seen", {}).items()}
        self.bad_out = {str(k): float(v) for k, v in data.get("bad_out", {}).items()}
        self._new, self._gone = None, []
