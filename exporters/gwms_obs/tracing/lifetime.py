"""A pilot's spans lie within its life: what keeps one hostile pilot out of everyone's statistics.

A span's times come from the worker node, so a pilot can claim a script ran
for 31 years. Such a span would reach the collector (spanmetrics' duration
histograms), Jaeger, and ``gwms-obs analyze``, where it moved the p90, p99
and mean of every script at its entry to 10^8 s. A span is dropped when

* it lasts longer than any pilot may live (:data:`MAX_PILOT_SECONDS`, the
  global lifetime bound of ``accounting.plausible`` plus its walltime margin);
* it lasts longer than its own pilot lived, where the caller knows that life
  (analyze: the accounting's, which the factory's records bound);
* it lies outside its pilot root (the nearest ``glidein`` span above it, or
  itself), :data:`SLACK_SECONDS` either side.

A pilot's spans all come from one clock (its node's), so its root's interval
needs no skew allowance beyond the slack; the accounting's lifetime may come
from the factory's clock, so it is compared as a duration only, which no skew
changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

from ..accounting.plausible import DEFAULT_LIMITS
from . import conventions as C

REASON: Final = "beyond_pilot_life"  # the parse-error reason of a dropped span
MAX_PILOT_SECONDS: Final = DEFAULT_LIMITS.max_lifetime + DEFAULT_LIMITS.walltime_margin
# Rounding between the .out's whole seconds and the spans' nanoseconds, and the
# tracer's own start before glidein_startup.sh's first line: minutes, not days.
SLACK_SECONDS: Final = 600.0


class Timed(NamedTuple):
    trace_id: str
    span_id: str
    parent_id: str  # "" for none
    name: str
    start: float  # Unix seconds
    end: float


def pilot_windows(spans: Sequence[Timed], max_seconds: float = MAX_PILOT_SECONDS) -> list[tuple[float, float] | None]:
    """Each span's pilot root interval: its nearest ancestor-or-self named ``glidein`` no longer than
    ``max_seconds``; None when it has none among ``spans`` (or its parents loop)."""
    index = {(s.trace_id, s.span_id): i for i, s in enumerate(spans)}
    memo: dict[int, tuple[float, float] | None] = {}
    for i in range(len(spans)):
        path: list[int] = []
        on_path: set[int] = set()
        j: int | None = i
        found: tuple[float, float] | None = None
        while j is not None:
            if j in memo:
                found = memo[j]
                break
            if j in on_path:  # hostile parents that loop: no root
                break
            path.append(j)
            on_path.add(j)
            s = spans[j]
            if s.name == C.SPAN_PILOT and 0 <= s.end - s.start <= max_seconds:
                found = (s.start, s.end)
                break
            j = index.get((s.trace_id, s.parent_id)) if s.parent_id else None
        for n in path:
            memo[n] = found
    return [memo[i] for i in range(len(spans))]


def beyond_life(
    start: float,
    end: float,
    window: tuple[float, float] | None,
    life: float | None = None,
    *,
    max_seconds: float = MAX_PILOT_SECONDS,
    slack: float = SLACK_SECONDS,
) -> str | None:
    """Why a span is beyond its pilot's life (a log detail), None when it is not."""
    d = end - start
    if d > max_seconds:
        return f"lasts {d:.0f} s, longer than any pilot lives ({max_seconds:.0f} s)"
    if life is not None and d > life + slack:
        return f"lasts {d:.0f} s, its pilot lived {life:.0f} s"
    if window is not None and not (window[0] - slack <= start and end <= window[1] + slack):
        return f"{start:.0f}-{end:.0f} s is outside its pilot's span {window[0]:.0f}-{window[1]:.0f} s"
    return None


def drops(
    spans: Sequence[Timed],
    life: float | None = None,
    *,
    max_seconds: float = MAX_PILOT_SECONDS,
    slack: float = SLACK_SECONDS,
) -> dict[int, str]:
    """index -> why, for the spans of one pilot (or one trace) that lie beyond its life."""
    out = {}
    for i, (s, w) in enumerate(zip(spans, pilot_windows(spans, max_seconds), strict=True)):
        why = beyond_life(s.start, s.end, w, life, max_seconds=max_seconds, slack=slack)
        if why is not None:
            out[i] = why
    return out
