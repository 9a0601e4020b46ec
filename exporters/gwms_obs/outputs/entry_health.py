"""Per entry, for the factory operator (issue 33): holds by class and time in queue over a window.

Fed by the scan's outlets (ingest/outlets.py): each hold the event-log stage counts (``holds``, by
the time HTCondor logged the 012) and each counted pilot's event-log times (``times``, by the
pilot's end, as the report selects pilots). Without a window the holds are
gwms_glidein_holds_total summed over clients, and the queue counts and sums are
gwms_pilot_queue_seconds' and gwms_pilot_grid_queue_seconds' _count and _sum: both come from
the same events and the same ``ledger.queue_seconds``. ``report`` shows the rows, ``analyze``
turns them into actions (analysis/entry_actions.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..accounting.ledger import queue_seconds
from ..accounting.pilot import PilotAccount
from ..ingest.outlets import FactoryLogCount, HoldCount
from ..model import PilotTimes


def quantile(sorted_values: list[float], q: float) -> float:
    """The q-quantile of sorted values, linear between closest ranks (numpy's default, as analyze's)."""
    if not sorted_values:
        return math.nan
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True, slots=True)
class QueueTimes:
    """An entry's pilots' times in a queue over the window, seconds."""

    count: int
    total: float
    p50: float
    p90: float

    @classmethod
    def of(cls, values: list[float]) -> QueueTimes:
        v = sorted(values)
        return cls(len(v), sum(v), quantile(v, 0.5), quantile(v, 0.9))

    def to_json(self) -> dict[str, Any]:
        nan = math.isnan(self.p50)
        return {
            "pilots": self.count,
            "sum_seconds": round(self.total, 3),
            "p50_seconds": None if nan else round(self.p50, 3),
            "p90_seconds": None if nan else round(self.p90, 3),
        }


@dataclass(frozen=True, slots=True)
class EntryRow:
    entry: str
    site: str
    holds: dict[str, int]  # class -> holds in the window, most first
    queue: QueueTimes  # submit -> first execute
    grid_queue: QueueTimes  # the CE accepted it (027) -> first execute

    @property
    def held(self) -> int:
        return sum(self.holds.values())

    @property
    def top_class(self) -> str | None:
        return next(iter(self.holds), None)


@dataclass
class EntryHealth:
    since: float | None = None
    until: float | None = None
    holds: dict[str, dict[str, int]] = field(default_factory=dict)  # entry -> class -> holds
    queue: dict[str, list[float]] = field(default_factory=dict)  # entry -> seconds, one a pilot
    # entry -> when each of ``queue`` was observed (the pilot's end, when the exporter counts it):
    # analyze compares an entry's latest times in queue with its own earlier ones (analysis/entry_actions.py)
    queue_at: dict[str, list[float]] = field(default_factory=dict)
    grid_queue: dict[str, list[float]] = field(default_factory=dict)
    sites: dict[str, str] = field(default_factory=dict)
    # The factory's own entry logs, per entry: (site, {what: {label: glideins}}), what being submitted
    # (by client), submit_failures (label ""), removed (by reason).
    factory_log: dict[str, tuple[str, dict[str, dict[str, int]]]] = field(default_factory=dict)

    def _in(self, t: float) -> bool:
        return (self.since is None or t >= self.since) and (self.until is None or t < self.until)

    # its Outlets.holds
    def add_hold(self, h: HoldCount) -> None:
        if not self._in(h.t):
            return
        by = self.holds.setdefault(h.entry, {})
        by[h.cls] = by.get(h.cls, 0) + 1
        self.sites.setdefault(h.entry, h.site)

    # its Outlets.times
    def add_times(self, acc: PilotAccount, times: PilotTimes) -> None:
        if not self._in(acc.end):
            return
        queued, grid = queue_seconds(times)
        if queued is not None:
            self.queue.setdefault(acc.entry, []).append(queued)
            self.queue_at.setdefault(acc.entry, []).append(acc.end)
            self.sites[acc.entry] = acc.site
        if grid is not None:
            self.grid_queue.setdefault(acc.entry, []).append(grid)

    # its Outlets.factory_log
    def add_factory_log(self, c: FactoryLogCount) -> None:
        """A count of the factory's entry log, when the factory logged it inside [since, until)."""
        if not self._in(c.t):
            return
        _, by = self.factory_log.setdefault(c.entry, (c.site, {}))
        self.factory_log[c.entry] = (c.site, by)
        labels = by.setdefault(c.what, {})
        labels[c.label] = labels.get(c.label, 0) + c.n

    def factory_log_rows(self) -> list[dict[str, Any]]:
        """Per entry: glideins submitted (per client and in all), condor_submit failures, glideins removed by reason."""
        out = []
        for entry, (site, by) in sorted(self.factory_log.items()):
            submitted = dict(sorted(by.get("submitted", {}).items()))
            out.append(
                {
                    "entry": entry,
                    "site": site,
                    "submitted": sum(submitted.values()),
                    "submitted_by_client": submitted,
                    "submit_failures": sum(by.get("submit_failures", {}).values()),
                    "removed": dict(sorted(by.get("removed", {}).items())),
                }
            )
        return out

    def rows(self) -> list[EntryRow]:
        out = []
        for e in sorted({*self.holds, *self.queue, *self.grid_queue}):
            by = sorted(self.holds.get(e, {}).items(), key=lambda kv: (-kv[1], kv[0]))
            out.append(
                EntryRow(
                    e,
                    self.sites.get(e, ""),
                    dict(by),
                    QueueTimes.of(self.queue.get(e, [])),
                    QueueTimes.of(self.grid_queue.get(e, [])),
                )
            )
        return out

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {
                "entry": r.entry,
                "site": r.site,
                "holds": r.held,
                "holds_by_class": r.holds,
                "queue": r.queue.to_json(),
                "grid_queue": r.grid_queue.to_json(),
            }
            for r in self.rows()
        ]

    def table(self) -> list[list[str]]:
        """The rows as the report's text table: holds (top class) and queue p50/p90 in minutes."""

        def mins(v: float) -> str:
            return "" if math.isnan(v) else f"{v / 60:,.1f}"

        head = ["entry", "site", "holds", "top class", "queue p50 min", "p90", "CE queue p50", "p90", "pilots"]
        rows = [head]
        for r in self.rows():
            top = f"{r.top_class} ({100 * r.holds[r.top_class] / r.held:.0f}%)" if r.top_class else ""
            rows.append([r.entry, r.site, str(r.held), top, mins(r.queue.p50), mins(r.queue.p90),
                         mins(r.grid_queue.p50), mins(r.grid_queue.p90), str(r.queue.count)])  # fmt: skip
        return rows
