"""Plain-text pieces the human outputs share (``report``'s table, ``analyze``'s): times and aligned columns."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import UTC, datetime


def utc_minute(t: float) -> str:
    """``2026-11-23 04:05``: a Unix time to the minute, UTC."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def aligned(rows: Sequence[Sequence[str]], left: int, rules_after: Collection[int] = (0,)) -> list[str]:
    """Columns padded to their widest cell: the first ``left`` flush left, the rest (numbers) right;
    a rule of dashes after each row index in ``rules_after`` (the header's, by default)."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, r in enumerate(rows):
        out.append(
            "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        )
        if n in rules_after:
            out.append("  ".join("-" * w for w in widths))
    return out
