"""The pilots already counted, and those whose .out proved unusable: what every stage skips.

Keys are ``entry/cluster.proc`` strings: the compiled completed_jobs reader
looks its lines up in ``seen`` as it is (native.completed_jobs.scan_unseen),
and the checkpoint stores both under these keys.
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any


class Counted:
    def __init__(self) -> None:
        self.seen: dict[str, float] = {}  # key -> when counted
        self.bad_out: dict[str, float] = {}  # key -> when its .out proved unusable (fallbacks may count it)

    def forget(self, cutoff: float, present: Container[str]) -> None:
        """Forget the pilots counted (or quarantined) before ``cutoff`` whose files are gone."""
        for d in (self.seen, self.bad_out):
            for k in [k for k, t in d.items() if t < cutoff and k not in present]:
                del d[k]

    def state(self) -> dict[str, Any]:
        return {"seen": self.seen, "bad_out": self.bad_out}

    def restore(self, data: dict[str, Any]) -> None:
        self.seen = {str(k): float(v) for k, v in data.get("seen", {}).items()}
        self.bad_out = {str(k): float(v) for k, v in data.get("bad_out", {}).items()}
