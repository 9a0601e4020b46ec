"""The ingest state every stage of a scan shares, each part owned by its own module, and the
one way a pilot gets counted in it (:meth:`Books.account`).

One ``Books`` per :class:`~gwms_obs.pipeline.Ingest`: the ledger
(accounting/ledger.py), the cursors of the followed logs (follow.py), the
pilots counted and the unusable .out files (counted.py), the frontend names
(names.py), what the fallback sources hold and which source counts a pilot
(resolve.py), the parse errors and health. Which stage counts a pilot is decided by
precedence (docs/accounting.md, "Which source wins"), never by two stages at
once, because :meth:`Books.account` marks the pilot ``seen`` and every stage
skips what is seen. Where a counted pilot goes besides the ledger (a report,
its trace, the span spools) is not here: ingest/outlets.py.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..accounting import plausible
from ..accounting.ledger import Ledger
from ..accounting.pilot import EntryDefaults, PilotAccount
from ..catalogue import Source
from ..follow import Follower
from ..model import CompletedJob, GlideinErr, GlideinOut, PilotTimes, StatsFormat
from ..parse_errors import ParseErrors
from ..sources import layout
from .checkpoint import Op
from .counted import Counted
from .names import FrontendNames
from .resolve import Holds

if TYPE_CHECKING:
    from .config import IngestConfig

Key = tuple[str, int, int]


def key_str(k: Key) -> str:
    return f"{k[0]}/{k[1]}.{k[2]}"


# The sources whose input waits to be accounted (the lag metric has one series each, from the start).
LAG_SOURCES = (Source.GLIDEIN_OUT, Source.COMPLETED_JOBS, Source.CONDOR_EVENT_LOG, Source.SCHEDD_STATUS)


@dataclass
class Health:
    records: Counter[str] = field(default_factory=Counter)
    bytes_read: Counter[str] = field(default_factory=Counter)
    files: dict[str, int] = field(default_factory=dict)
    # source -> when the oldest input of it not yet accounted appeared (absent: none waits)
    backlog: dict[str, float] = field(default_factory=dict)
    started: float = 0.0  # the scan-timestamp metric's value until a first scan ends (the stalled alert)
    last_scan_end: float | None = None
    last_scan_duration: float | None = None
    # reason -> times scanning took over from the inotify watch (ingest/watch.py)
    discovery_fallbacks: Counter[str] = field(default_factory=Counter)

    def lag(self, now: float) -> dict[str, float]:
        """Age of the oldest input not yet accounted, per source (0 when caught up)."""
        return {s.value: max(0.0, now - self.backlog[s]) if s in self.backlog else 0.0 for s in LAG_SOURCES}


@dataclass(slots=True)
class ScanResult:
    pilots: int = 0
    by_source: Counter[str] = field(default_factory=Counter)
    failed: list[str] = field(default_factory=list)  # sources whose phase raised (counted, logged)


@dataclass(slots=True)
class PilotFacts:
    """What the stage that counted a pilot read of it: its trace is built from these
    (outputs/pilot_traces.py). ``times``: the event log's, when it holds the pilot."""

    source: str
    out: GlideinOut | None = None
    err: GlideinErr | None = None
    line: CompletedJob | None = None
    times: PilotTimes | None = None


@dataclass(slots=True)
class Listing:
    """One walk of the client directories: what the pilot and event-log stages read."""

    present: dict[str, layout.PilotFiles]  # key -> the pilot's files
    dirs_by_entry: dict[str, list[str]]
    logs: list[layout.EventLogFile]


@dataclass(slots=True)
class EntryEvidence:
    """What an entry's own pilots show about how its completed_jobs lines are written."""

    real_min: int | None = None  # lowest cluster whose .out (or line) shows a raw v3.10.12+ Total
    legacy_max: int | None = None  # highest cluster whose .out shows the older, normalized one

    def raw_total(self, cluster: int) -> bool:
        """Whether a line of this entry that does not show it itself has a raw Total.

        Clusters grow with submission, and the format changes when the factory
        is upgraded: a line is raw when it comes after the last pilot seen
        writing the old format and some pilot was seen writing the new one.
        """
        if self.real_min is None:
            return False
        return self.legacy_max is None or cluster > self.legacy_max

    def note(self, cluster: int, *, raw: bool) -> None:
        if raw:
            self.real_min = cluster if self.real_min is None else min(self.real_min, cluster)
        else:
            self.legacy_max = cluster if self.legacy_max is None else max(self.legacy_max, cluster)

    def learn(self, out: GlideinOut, cluster: int) -> None:
        if out.stats_format in (StatsFormat.REAL, StatsFormat.LEGACY):
            self.note(cluster, raw=out.stats_format is StatsFormat.REAL)


class Books:
    """The state every stage reads and writes, and the one way a pilot gets counted in it."""

    def __init__(self, cfg: IngestConfig, clock: Callable[[], float], errors: ParseErrors | None = None) -> None:
        self.cfg = cfg
        self.clock = clock
        self.lock = threading.RLock()  # held while state changes; the collector reads under it
        self.ledger = Ledger()
        self.errors = errors if errors is not None else ParseErrors()
        self.once = layout.OncePerPath(self.errors)  # what every scan lists again is counted once
        self.client_dirs = layout.ClientDirs(key_str)  # each client directory's last listing, parsed
        self.health = Health()
        self.follower = Follower()  # cursors of the followed logs (completed_jobs, event logs)
        self.counted = Counted()  # the pilots counted, and those whose .out proved unusable
        self.names = FrontendNames(cfg.client_map)  # which frontend each factory-side user is
        self.evidence: dict[str, EntryEvidence] = {}  # entry -> its completed_jobs format evidence
        self.defaults: dict[str, EntryDefaults] = {}  # entry -> what its descript.xml says
        # What the fallback sources hold for pilots not counted yet, and which source counts
        # each (docs/accounting.md, "Which source wins").
        self.holds = Holds()

    def account(self, acc: PilotAccount, res: ScanResult, source: str, times: PilotTimes | None) -> PilotTimes | None:
        """Count a pilot: into the ledger, marked seen, its holds dropped. Returns the event log's
        times of it (``times``, else what the event log holds), which its trace is built with."""
        k = acc.key
        with self.lock:
            ks = key_str(k) if k is not None else None
            if times is None and ks is not None:  # the event log's times of it, before counting drops them
                times = self.holds.end_of(ks)
            self.ledger.add(acc, times)  # its queue time, when the event log holds it
            if ks is not None:
                self.counted.count(ks, self.clock())
                self.holds.counted(ks)
        res.pilots += 1
        res.by_source[source] += 1
        return times

    def list_clients(self) -> Listing:
        """Walk the client directories once: the pilots' files and the event logs."""
        client_dirs, present, logs = self.client_dirs.list(self.cfg.factory_dir, self.once)
        dirs_by_entry: dict[str, list[str]] = {}
        for _, entry, d in client_dirs:
            dirs_by_entry.setdefault(entry, []).append(d)
        self.names.listed(user for user, _, _ in client_dirs)
        return Listing(present, dirs_by_entry, logs)

    def out_waits(self, ks: str, listing: Listing, recheck: bool) -> bool:
        """Whether the pilot's .out is there to be read (so no fallback may count it)."""
        if ks in self.counted.bad_out:
            return False
        if ks in listing.present:
            return True
        if not recheck:
            return False
        # Arrived after the listing (the factory writes a line only once the .out is in).
        entry, name = ks.rsplit("/", 1)
        return any(os.path.exists(os.path.join(d, f"job.{name}.out")) for d in listing.dirs_by_entry.get(entry, []))

    def bounds(self, entry: str, written: float) -> plausible.Bounds:
        # Times are bounded by the factory's clock when the file was written, or now.
        return plausible.bounds(self.defaults.get(entry), self.cfg.limits, max(self.clock(), written))

    def fixed_cpus(self, entry: str) -> int | None:
        d = self.defaults.get(entry)
        return d.cpus if d is not None and d.cpus_fixed else None

    def evidence_of(self, entry: str) -> EntryEvidence:
        return self.evidence.setdefault(entry, EntryEvidence())

    # --- checkpoint: the shared part (each stage saves its own) -------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "ledger": self.ledger.to_json(),
            "cursors": self.follower.to_json(),
            **self.counted.state(),
            "client_by_user": self.names.to_json(),
            "evidence": {e: dataclasses.asdict(ev) for e, ev in self.evidence.items()},
        }

    def changes(self) -> list[Op] | None:
        """Its part of a checkpoint journal record: the pilots counted since the last checkpoint, the
        rest (the ledger, the cursors: ~3 MB at 300,000 pilots) whole. None: the next must be a base."""
        counted = self.counted.changes()
        if counted is None:
            return None
        mine = self.counted.state()
        whole = {k: v for k, v in self.state().items() if k not in mine}
        return [("whole", [k], v) for k, v in whole.items()] + counted

    def saved(self) -> None:
        self.counted.saved()

    def restore(self, data: dict[str, Any]) -> None:
        self.ledger = Ledger.from_json(data.get("ledger", {}))
        self.follower = Follower.from_json(data.get("cursors", {}))
        self.counted.restore(data)
        self.evidence = {str(e): EntryEvidence(**v) for e, v in data.get("evidence", {}).items()}
        self.names.restore(data.get("client_by_user", {}))
