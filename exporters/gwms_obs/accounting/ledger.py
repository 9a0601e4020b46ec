"""Running totals of pilot accounts and entry status, keyed by metric labels.

The ledger is what the exporter serves and what the checkpoint saves: it
holds only label-keyed sums (bounded by entries × clients × categories),
never a pilot.
"""

from __future__ import annotations

import bisect
import enum
from dataclasses import dataclass, field
from typing import Any

from .. import catalogue
from ..model import EntryStatus, FrontendGroupStatus, FrontendStatus, PilotTimes
from .pilot import PilotAccount

Labels = tuple[str, ...]
# A bucket's exemplar: the last pilot observed in it, as (entry, cluster, proc, start, value). Its
# trace id is computed when served (outputs/prometheus.py), with the factory's name the traces use.
Exemplar = tuple[str, int, int, float, float]
# Every label value an enum member stands for (member.value costs a descriptor call a time).
_VALUE: dict[enum.Enum, str] = {
    m: m.value for e in (catalogue.Category, catalogue.Accuracy, catalogue.Outcome, catalogue.Overused) for m in e
}


@dataclass(slots=True)
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int]  # per bucket, not cumulative; last one is +Inf
    total: float = 0.0
    # Per bucket, the last pilot in it (None: none since the start). Not checkpointed: an
    # exemplar is an example, the next pilots bring new ones.
    exemplars: list[Exemplar | None] | None = None

    @classmethod
    def empty(cls, bounds: tuple[float, ...]) -> Histogram:
        return cls(bounds, [0] * (len(bounds) + 1))

    def observe(self, v: float, pilot: PilotAccount | None = None) -> None:
        i = bisect.bisect_left(self.bounds, v)
        self.counts[i] += 1
        self.total += v
        if pilot is not None and pilot.cluster is not None and pilot.proc is not None:
            ex = self.exemplars
            if ex is None:
                ex = self.exemplars = [None] * len(self.counts)
            ex[i] = (pilot.entry, pilot.cluster, pilot.proc, pilot.start, v)

    def cumulative(self) -> list[tuple[str, int]]:
        out, acc = [], 0
        for b, c in zip((*[repr(float(x)) for x in self.bounds], "+Inf"), self.counts, strict=True):
            acc += c
            out.append((b, acc))
        return out

    @property
    def count(self) -> int:
        return sum(self.counts)


def bottleneck(fs: FrontendStatus) -> tuple[int, int]:
    """(provisioning bottleneck jobs, insufficient demand cores) of one frontend at one entry.

    GIL report: a bottleneck is a user job waiting while no pilot is idle in the
    pool; insufficient demand is a pilot idle while no job waits.
    """
    cm = fs.client_monitor
    jobs_idle = cm.get("JobsIdle", 0)
    cores_idle = cm.get("CoresIdle", 0)
    glide_idle = cm.get("GlideIdle", 0)
    return (jobs_idle if glide_idle == 0 and cores_idle == 0 else 0, cores_idle if jobs_idle == 0 else 0)


@dataclass(slots=True)
class LabelBudget:
    """The cardinality caps of catalogue.LABEL_CAPS: the first values of a label are kept,
    later new ones become OVERFLOW (counted). Rebuilt from the ledger's keys on restore."""

    caps: dict[str, int] = field(default_factory=lambda: dict(catalogue.LABEL_CAPS))
    known: dict[str, set[str]] = field(default_factory=dict)
    overflow: dict[str, int] = field(default_factory=dict)

    def admit(self, label: str, value: str) -> str:
        seen = self.known.setdefault(label, set())
        if value in seen or value == catalogue.OVERFLOW:
            return value
        if len(seen) < self.caps.get(label, 1 << 62):
            seen.add(value)
            return value
        self.overflow[label] = self.overflow.get(label, 0) + 1
        return catalogue.OVERFLOW

    def pool(self, entry: str, client: str, site: str) -> Labels:
        return (self.admit("entry", entry), self.admit("client", client), self.admit("site", site))


def queue_seconds(times: PilotTimes) -> tuple[float | None, float | None]:
    """A pilot's time in queue (submit to first execute) and in the CE's queue (027 grid submit, the CE
    accepting it, to first execute); None where the event log lacks an end. The ledger's histograms and
    the report's quantiles (outputs/entry_health.py) both take them from here."""
    if times.submitted is None or times.started is None:
        return None, None
    first = times.first_started if times.first_started is not None else times.started
    grid = max(0.0, first - times.grid_submitted) if times.grid_submitted is not None else None
    return max(0.0, first - times.submitted), grid


@dataclass
class Ledger:
    cpu: dict[Labels, float] = field(default_factory=dict)  # (entry, client, site, category, accuracy)
    gpu: dict[Labels, float] = field(default_factory=dict)
    pilots: dict[Labels, int] = field(default_factory=dict)  # (entry, client, site, outcome)
    user_jobs: dict[Labels, int] = field(default_factory=dict)  # (entry, client, site, category)
    overusing: dict[Labels, int] = field(default_factory=dict)  # (entry, client, site, resource)
    overuse_seconds: dict[Labels, float] = field(default_factory=dict)  # (entry, client, site, resource)
    lifetime: dict[Labels, Histogram] = field(default_factory=dict)  # (entry, client, site)
    validation: dict[Labels, Histogram] = field(default_factory=dict)
    queue: dict[Labels, Histogram] = field(default_factory=dict)  # submit -> first execute (event log)
    grid_queue: dict[Labels, Histogram] = field(default_factory=dict)  # 027 grid submit -> first execute
    # Holds, from the event log as it is read (pilots still queued too): (entry, client, site, class).
    holds: dict[Labels, int] = field(default_factory=dict)
    held_seconds: dict[Labels, float] = field(default_factory=dict)  # (entry, client, site)
    # Glideins held now, by their newest hold's class: replaced whole after each read of the event
    # logs (ingest/condor_event_log.py, from the open timelines the checkpoint keeps); not saved.
    held_now: dict[Labels, int] = field(default_factory=dict)
    # The CE of each entry, from the gridmanager's 025/026 events: entry -> [site, down since (None:
    # up), newest 025 time, newest 026 time]; ce_down and ce_down_since are what is served.
    ce: dict[str, list[Any]] = field(default_factory=dict)
    ce_down: dict[Labels, float] = field(default_factory=dict)  # (entry, site) -> 1/0
    ce_down_since: dict[Labels, float] = field(default_factory=dict)  # (entry, site) -> since, while down
    # The factory's own entry logs (ingest/factory_log.py): glideins submitted (entry, client, site),
    # condor_submit failures (entry, site), glideins it set out to remove (entry, site, reason).
    submitted: dict[Labels, int] = field(default_factory=dict)
    submit_failures: dict[Labels, int] = field(default_factory=dict)
    removed: dict[Labels, int] = field(default_factory=dict)
    submit_events: dict[Labels, int] = field(default_factory=dict)  # (entry, client, site): the event log's 000
    last_completed: dict[Labels, float] = field(default_factory=dict)
    # Entry status: the latest file per entry, and the integrals over time.
    entries: dict[str, tuple[EntryStatus, str]] = field(default_factory=dict)  # entry -> (status, site)
    bottleneck_seconds: dict[Labels, float] = field(default_factory=dict)
    demand_seconds: dict[Labels, float] = field(default_factory=dict)
    # The VO frontend's view (on the frontend host): group -> (its latest frontend_status.xml, its
    # client label), and the frontend-wide file's time. Replaced per file, not saved (re-read at start).
    frontend_groups: dict[str, tuple[FrontendGroupStatus, str]] = field(default_factory=dict)
    frontend_updated: float | None = None
    budget: LabelBudget = field(default_factory=LabelBudget)
    # (entry, client, site) -> its admitted labels, when none overflowed (derived: not saved)
    _pools: dict[Labels, Labels] = field(default_factory=dict, repr=False, compare=False)
    # Bumped by every add and entry update: /metrics re-renders when it moved (outputs/prometheus.py
    # Exposition), instead of building every family on every scrape. Not saved.
    version: int = field(default=0, repr=False, compare=False)
    # What moved since the renderer last took it (take_changes), so a render costs what a tick changed:
    # a served table's name -> the keys written or dropped, or None when it was replaced whole (read it
    # all again). Each mutator marks a table where it writes it (_touched). Not saved: a restored
    # ledger is a new object, rendered whole.
    _changed: dict[str, set[Any] | None] = field(default_factory=dict, repr=False, compare=False)
    _taken: int = field(default=-1, repr=False, compare=False)  # the version at the last take_changes

    def _touched(self, table: str) -> set[Any]:
        """The keys of ``table`` changed since the last take_changes: a mutator adds the ones it writes."""
        keys = self._changed.get(table)
        if keys is None:
            if table in self._changed:  # replaced whole since: read whole anyway
                return set()
            keys = self._changed[table] = set()
        return keys

    def _replaced(self, table: str, new: dict[Labels, Any]) -> None:
        """``table`` replaced by ``new`` (its rows' order may change): the renderer reads it whole."""
        setattr(self, table, new)
        self._changed[table] = None

    def take_changes(self) -> tuple[int, dict[str, set[Any] | None]]:
        """(the version at the previous call, -1 if none; what changed since), and starts recording anew.
        For /metrics (outputs/prometheus.py Exposition): one reader, which renders whole when the
        version is not that of its last render (someone else took the changes in between)."""
        taken, changed = self._taken, self._changed
        self._taken, self._changed = self.version, {}
        return taken, changed

    def add(self, a: PilotAccount, times: PilotTimes | None = None) -> None:
        """Count one pilot; ``times``: the event log's view of it, when it holds the pilot (its queue time)."""
        # Runs in the parent for every pilot of a backfill, which the pool's workers wait
        # for: enum values from a dict and the histograms (4x faster than plain).
        self.version += 1
        pool = self._pools.get((a.entry, a.client, a.site))
        if pool is None:
            pool = self._admit(a.entry, a.client, a.site)
        part = a.partition
        acc = _VALUE[part.accuracy]
        touched = self._touched
        if part.cpu:
            cpu, mark = self.cpu, touched("cpu")
            for cat, v in part.cpu.items():
                k = (*pool, _VALUE[cat], acc)
                cpu[k] = cpu.get(k, 0.0) + v
                mark.add(k)
        if part.gpu:
            gpu, mark = self.gpu, touched("gpu")
            for cat, v in part.gpu.items():
                k = (*pool, _VALUE[cat], acc)
                gpu[k] = gpu.get(k, 0.0) + v
                mark.add(k)
        ko = (*pool, _VALUE[a.outcome])
        self.pilots[ko] = self.pilots.get(ko, 0) + 1
        touched("pilots").add(ko)
        if part.jobs:
            user_jobs, mark = self.user_jobs, touched("user_jobs")
            for cat, n in part.jobs.items():
                kj = (*pool, _VALUE[cat])
                user_jobs[kj] = user_jobs.get(kj, 0) + n
                mark.add(kj)
        # At 0 from the first measured job on, as the entry counters: increase() sees the first hog.
        for res, o in a.overuse.items():
            kr = (*pool, _VALUE[res])
            self.overusing[kr] = self.overusing.get(kr, 0) + o.jobs
            touched("overusing").add(kr)
            self.overuse_seconds[kr] = self.overuse_seconds.get(kr, 0.0) + o.seconds
            touched("overuse_seconds").add(kr)
        # A histogram is made only for a new pool (setdefault would build one per pilot to throw away).
        h = self.lifetime.get(pool)
        if h is None:
            h = self.lifetime[pool] = Histogram.empty(catalogue.PILOT_LIFETIME.buckets)
        life = a.end - a.start
        if not life > 0.0:  # PilotAccount.lifetime: max(0.0, end - start)
            life = 0.0
        h.observe(life, a)
        touched("lifetime").add(pool)
        if a.validation_duration is not None:
            h = self.validation.get(pool)
            if h is None:
                h = self.validation[pool] = Histogram.empty(catalogue.PILOT_VALIDATION.buckets)
            h.observe(a.validation_duration, a)
            touched("validation").add(pool)
        if times is not None:
            queued, grid = queue_seconds(times)
            if queued is not None:
                h = self.queue.get(pool)
                if h is None:
                    h = self.queue[pool] = Histogram.empty(catalogue.PILOT_QUEUE_TIME.buckets)
                h.observe(queued, a)
                touched("queue").add(pool)
            if grid is not None:
                h = self.grid_queue.get(pool)
                if h is None:
                    h = self.grid_queue[pool] = Histogram.empty(catalogue.PILOT_GRID_QUEUE_TIME.buckets)
                h.observe(grid, a)
                touched("grid_queue").add(pool)
        last = self.last_completed.get(pool, 0.0)
        self.last_completed[pool] = a.end if a.end > last else last  # max(last, end)
        touched("last_completed").add(pool)

    def _admit(self, entry: str, client: str, site: str) -> Labels:
        """The pool's labels through the label budget; remembered once all three are admitted
        (admitting a known value again changes nothing, an OVERFLOW is counted each time)."""
        pool = self.budget.pool(entry, client, site)
        if catalogue.OVERFLOW not in pool:
            self._pools[(entry, client, site)] = pool
        return pool

    def add_hold(self, entry: str, client: str, site: str, cls: str) -> None:
        """One hold begun (a 012), of a glidein queued or ended."""
        self.version += 1
        k = (*self._admit(entry, client, site), cls)
        self.holds[k] = self.holds.get(k, 0) + 1
        self._touched("holds").add(k)
        self.held_seconds.setdefault(k[:3], 0.0)  # at 0 from the entry's first hold: increase() sees the first
        self._touched("held_seconds").add(k[:3])

    def add_held_seconds(self, entry: str, client: str, site: str, seconds: float) -> None:
        """A hold ended (released, removed, terminated) after ``seconds``."""
        self.version += 1
        pool = self._admit(entry, client, site)
        self.held_seconds[pool] = self.held_seconds.get(pool, 0.0) + seconds
        self._touched("held_seconds").add(pool)

    def set_held_now(self, held: dict[tuple[str, str, str, str], int]) -> None:
        """The glideins held now, (entry, client, site, class) -> count; replaces the last."""
        now: dict[Labels, int] = {}
        for (entry, client, site, cls), n in held.items():
            k = (*self._admit(entry, client, site), cls)
            now[k] = now.get(k, 0) + n
        if now != self.held_now:
            self.version += 1
            self._replaced("held_now", now)

    def grid_resource(self, entry: str, site: str, down: bool, t: float) -> None:
        """A 026 (``down``) or 025 of the entry's CE at ``t``. The logs of an entry's clients are read one
        after the other, so events come out of order: the newest of each kind decides."""
        if self.budget.admit("entry", entry) == catalogue.OVERFLOW:
            return
        site = self.budget.admit("site", site)
        st = self.ce.get(entry)
        if st is None:
            st = self.ce[entry] = [site, None, float("-inf"), float("-inf")]
        st[0] = site
        if down:
            if t > st[2] and (st[1] is None or t < st[1]):  # the first 026 after the newest 025
                st[1] = t
            st[3] = max(st[3], t)
        else:
            st[2] = max(st[2], t)
            if st[1] is not None and st[3] <= t:
                st[1] = None  # back up: no 026 after this 025
            elif st[1] is not None and st[1] <= t:
                st[1] = st[3]  # a 026 came after: down again since then (the earliest of those unknown)
        self.version += 1
        self._ce_served()

    def _ce_served(self) -> None:
        self._replaced("ce_down", {(e, st[0]): 0.0 if st[1] is None else 1.0 for e, st in self.ce.items()})
        self._replaced("ce_down_since", {(e, st[0]): st[1] for e, st in self.ce.items() if st[1] is not None})

    def _admit_entry(self, entry: str, site: str) -> Labels:
        return self.budget.admit("entry", entry), self.budget.admit("site", site)

    def add_submitted(self, entry: str, client: str, site: str, n: int) -> None:
        """``n`` glideins submitted for ``client`` (a 'Submitted N glideins to' line)."""
        self.version += 1
        k = self._admit(entry, client, site)
        self.submitted[k] = self.submitted.get(k, 0) + n
        self._touched("submitted").add(k)

    def add_submit_events(self, entry: str, client: str, site: str, n: int) -> None:
        """``n`` glideins the schedd accepted (000 events of the entry's event log for ``client``)."""
        self.version += 1
        k = self._admit(entry, client, site)
        self.submit_events[k] = self.submit_events.get(k, 0) + n
        self._touched("submit_events").add(k)

    def add_submit_failure(self, entry: str, site: str) -> None:
        """One condor_submit that failed at the entry."""
        self.version += 1
        k = self._admit_entry(entry, site)
        self.submit_failures[k] = self.submit_failures.get(k, 0) + 1
        self._touched("submit_failures").add(k)

    def add_removed(self, entry: str, site: str, reason: str, n: int) -> None:
        """``n`` glideins the factory set out to remove, and why (catalogue.RemovalReason)."""
        self.version += 1
        k = (*self._admit_entry(entry, site), reason)
        self.removed[k] = self.removed.get(k, 0) + n
        self._touched("removed").add(k)

    def update_entry(self, status: EntryStatus, site: str) -> None:
        """Take a new schedd_status.xml; integrate the previous one's gauges up to now."""
        self.version += 1  # also when refused: the label overflow it counts is served
        if self.budget.admit("entry", status.entry) == catalogue.OVERFLOW:
            return  # an entry's gauges cannot be summed into another's
        site = self.budget.admit("site", site)
        for client in status.frontends:
            self.budget.admit("client", client)
        status.frontends = {c: fs for c, fs in status.frontends.items() if c in self.budget.known["client"]}
        prev = self.entries.get(status.entry)
        busy, idle = self._touched("bottleneck_seconds"), self._touched("demand_seconds")
        if prev is not None and prev[0].updated is not None and status.updated is not None:
            dt = status.updated - prev[0].updated
            if dt <= 0:
                return  # the same (or an older) snapshot: nothing new
            for client, fs in prev[0].frontends.items():
                b, d = bottleneck(fs)
                k = (status.entry, client, prev[1])
                self.bottleneck_seconds[k] = self.bottleneck_seconds.get(k, 0.0) + b * dt
                self.demand_seconds[k] = self.demand_seconds.get(k, 0.0) + d * dt
                busy.add(k)
                idle.add(k)
        # Counters exist from an entry's first status on, at 0 (Prometheus's "avoid missing
        # metrics"): increase() and rate() then see their first second, and panels show 0.
        for client in status.frontends:
            k = (status.entry, client, site)
            self.bottleneck_seconds.setdefault(k, 0.0)
            self.demand_seconds.setdefault(k, 0.0)
            busy.add(k)
            idle.add(k)
        self.entries[status.entry] = (status, site)
        self._touched("entries").add(status.entry)

    def update_frontend_group(self, status: FrontendGroupStatus, client: str) -> None:
        """Take a group's new frontend_status.xml, labelled with the factory's name of its client."""
        self.version += 1
        client = self.budget.admit("client", client)
        # An overflowed entry's gauges cannot be summed into another's: dropped (and counted).
        status.factories = {k: m for k, m in status.factories.items() if self.budget.admit("entry", k[0]) == k[0]}
        self.frontend_groups[status.group] = (status, client)
        self._touched("frontend_groups").add(status.group)

    def drop_frontend_groups(self, groups: set[str]) -> None:
        """Forget groups the frontend no longer has (their dir is gone): their series end."""
        if gone := groups & set(self.frontend_groups):
            self.version += 1
            for g in gone:
                del self.frontend_groups[g]
            self._touched("frontend_groups").update(gone)

    def update_frontend(self, updated: float | None) -> None:
        """The frontend-wide frontend_status.xml's time."""
        self.version += 1
        self.frontend_updated = updated
        self._touched("frontend_updated").add(None)

    # --- checkpoint -------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        def rows(d: dict[Labels, Any]) -> list[list[Any]]:
            return [[*k, v] for k, v in d.items()]

        def hrows(d: dict[Labels, Histogram]) -> list[list[Any]]:
            return [[*k, h.counts, h.total] for k, h in d.items()]

        return {
            "cpu": rows(self.cpu),
            "gpu": rows(self.gpu),
            "pilots": rows(self.pilots),
            "user_jobs": rows(self.user_jobs),
            "overusing": rows(self.overusing),
            "overuse_seconds": rows(self.overuse_seconds),
            "lifetime": hrows(self.lifetime),
            "validation": hrows(self.validation),
            "queue": hrows(self.queue),
            "grid_queue": hrows(self.grid_queue),
            "holds": rows(self.holds),
            "held_seconds": rows(self.held_seconds),
            # -inf is not JSON: no event of that kind yet
            "ce": {
                e: [st[0], st[1], *(v if v != float("-inf") else None for v in st[2:])] for e, st in self.ce.items()
            },
            "submitted": rows(self.submitted),
            "submit_failures": rows(self.submit_failures),
            "removed": rows(self.removed),
            "submit_events": rows(self.submit_events),
            "last_completed": rows(self.last_completed),
            "bottleneck_seconds": rows(self.bottleneck_seconds),
            "demand_seconds": rows(self.demand_seconds),
            "label_overflow": self.budget.overflow,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Ledger:
        led = cls()

        def load(name: str, n: int) -> dict[Labels, Any]:
            return {tuple(r[:n]): r[n] for r in data.get(name, []) if len(r) == n + 1}

        def hload(name: str, bounds: tuple[float, ...]) -> dict[Labels, Histogram]:
            out: dict[Labels, Histogram] = {}
            for r in data.get(name, []):
                if len(r) == 5 and len(r[3]) == len(bounds) + 1:
                    out[tuple(r[:3])] = Histogram(bounds, list(r[3]), float(r[4]))
            return out  # a bucket layout change restarts the histogram rather than lie

        led.cpu, led.gpu = load("cpu", 5), load("gpu", 5)
        led.pilots, led.user_jobs = load("pilots", 4), load("user_jobs", 4)
        led.overusing, led.overuse_seconds = load("overusing", 4), load("overuse_seconds", 4)
        led.last_completed = load("last_completed", 3)
        led.bottleneck_seconds, led.demand_seconds = load("bottleneck_seconds", 3), load("demand_seconds", 3)
        led.lifetime = hload("lifetime", catalogue.PILOT_LIFETIME.buckets)
        led.validation = hload("validation", catalogue.PILOT_VALIDATION.buckets)
        led.queue = hload("queue", catalogue.PILOT_QUEUE_TIME.buckets)
        led.grid_queue = hload("grid_queue", catalogue.PILOT_GRID_QUEUE_TIME.buckets)
        led.holds, led.held_seconds = load("holds", 4), load("held_seconds", 3)
        led.submitted, led.submit_failures = load("submitted", 3), load("submit_failures", 2)
        led.removed, led.submit_events = load("removed", 3), load("submit_events", 3)
        for e, (site, since, up, down) in data.get("ce", {}).items():
            led.ce[str(e)] = [
                str(site),
                None if since is None else float(since),
                *(float("-inf") if v is None else float(v) for v in (up, down)),
            ]
        led._ce_served()
        # The values already in series keep their place under the budget.
        for k in (*led.pilots, *led.lifetime, *led.bottleneck_seconds, *led.holds, *led.submitted, *led.submit_events):
            led.budget.known.setdefault("entry", set()).add(k[0])
            led.budget.known.setdefault("client", set()).add(k[1])
            led.budget.known.setdefault("site", set()).add(k[2])
        for k in (*led.submit_failures, *led.removed):
            led.budget.known.setdefault("entry", set()).add(k[0])
            led.budget.known.setdefault("site", set()).add(k[1])
        led.budget.overflow = {str(k): int(v) for k, v in data.get("label_overflow", {}).items()}
        return led


# --- what the ledger serves ---------------------------------------------------------------------
# One table from each catalogue metric to the ledger's table it is read from: /metrics
# (outputs/prometheus.py), the history (outputs/history.py) and OTLP (outputs/otlp.py) all
# read these, so a metric added here reaches every output. ``from_accounts``: the table is
# filled by Ledger.add from pilot accounts alone, so a history replaying accounts has it (the
# queue time needs the event log's times, the entry tables the entry status).


@dataclass(frozen=True, slots=True)
class Served:
    metric: catalogue.MetricDef
    table: str  # the Ledger attribute it is read from, and its name in Ledger.take_changes
    from_accounts: bool = True

    def read(self, led: Ledger) -> dict[Labels, Any]:
        table: dict[Labels, Any] = getattr(led, self.table)
        return table


COUNTERS: tuple[Served, ...] = (
    Served(catalogue.CPU_SECONDS, "cpu"),
    Served(catalogue.GPU_SECONDS, "gpu"),
    Served(catalogue.PILOTS, "pilots"),
    Served(catalogue.USER_JOBS, "user_jobs"),
    Served(catalogue.USER_JOBS_OVERUSING, "overusing"),
    Served(catalogue.USER_JOB_OVERUSE_SECONDS, "overuse_seconds"),
    Served(catalogue.HOLDS, "holds", from_accounts=False),
    Served(catalogue.HELD_SECONDS, "held_seconds", from_accounts=False),
    Served(catalogue.GLIDEINS_SUBMITTED, "submitted", from_accounts=False),
    Served(catalogue.SUBMIT_FAILURES, "submit_failures", from_accounts=False),
    Served(catalogue.GLIDEINS_REMOVED, "removed", from_accounts=False),
    Served(catalogue.GLIDEIN_SUBMIT_EVENTS, "submit_events", from_accounts=False),
)
HISTOGRAMS: tuple[Served, ...] = (
    Served(catalogue.PILOT_LIFETIME, "lifetime"),
    Served(catalogue.PILOT_VALIDATION, "validation"),
    Served(catalogue.PILOT_QUEUE_TIME, "queue", from_accounts=False),
    Served(catalogue.PILOT_GRID_QUEUE_TIME, "grid_queue", from_accounts=False),
)
GAUGES: tuple[Served, ...] = (
    Served(catalogue.PILOT_LAST_COMPLETED, "last_completed"),
    Served(catalogue.HELD_GLIDEINS, "held_now", from_accounts=False),
    Served(catalogue.ENTRY_CE_DOWN, "ce_down", from_accounts=False),
    Served(catalogue.ENTRY_CE_DOWN_SINCE, "ce_down_since", from_accounts=False),
)
# The entry status's counters (the per-entry gauges are built from Ledger.entries itself).
ENTRY_COUNTERS: tuple[Served, ...] = (
    Served(catalogue.ENTRY_BOTTLENECK_SECONDS, "bottleneck_seconds", from_accounts=False),
    Served(catalogue.ENTRY_INSUFFICIENT_DEMAND_SECONDS, "demand_seconds", from_accounts=False),
)
