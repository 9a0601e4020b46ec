"""Synthetic GlideinWMS factory log tree: the load generator and test oracle.

``simulate()`` writes, for a seeded population of pilots, exactly the files a
factory holds (paths and shapes from shared/reference/glideinwms-formats.md):

* ``client/user_<u>/glidein_gfactory_instance/entry_<e>/job.C.P.out|.err``
* ``.../entry_<e>/condor_activity_<submit YYYYMMDD>_<client_int_name>.log``
* ``server/entry_<e>/completed_jobs_<YYYYMMDD>.log``
* ``monitor/entry_<e>/{schedd_status.xml,descript.xml}`` and ``monitor/descript.xml``
* ``frontend/<frontend>/monitor/``: each frontend's own view (``group_<g>/frontend_status.xml``...),
  read by an exporter on the frontend's host (its ``frontend_monitor_dir``)
* with ``anomalies=True``, ``anomalies.json``: the labels of the anomalies (``anomalies``)

Everything is UTC and a pure function of ``seed`` and the arguments. The tree
is a snapshot taken at ``summary.snapshot``: pilots still queued or running
then have only their first event-log events and no .out/.err.

The scenario (``scenario``) is planned pilot by pilot (``plan``), the
factory's own statistics are derived (``factory_stats``) and each file is
rendered by the writer of its format (``write/``); this module only walks the
pilots in order and puts the bytes in place.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import anomalies as labelling
from . import usage
from .factory_stats import StarterStats, completed_stats, starter_stats
from .formats import iso_local, time_ordered
from .plan import FrontendReport, Planner, SimPilot
from .scenario import (
    ANOMALY_ENTRIES,
    CLIENTS,
    DEFAULT_ENTRIES,
    DEFAULT_START,
    GLIDEIN_NAME,
    OPERATOR_ENTRIES,
    EntrySpec,
)
from .write import (
    completed_jobs,
    condor_event_log,
    descript,
    factory_log,
    frontend_status,
    glidein_err,
    glidein_out,
    schedd_status,
)

# What callers of simulate() need besides it: the entry presets to pass as
# ``entries``, the factory's glidein name (in every client path) and the type
# of the ground truth the summary keeps.
__all__ = ["DEFAULT_ENTRIES", "GLIDEIN_NAME", "SimPilot", "SimulationSummary", "simulate"]


@dataclass(slots=True)
class SimulationSummary:
    """What ``simulate`` wrote: counts per entry and kind, and the ground truth when kept."""

    out: Path
    seed: int
    start: int
    snapshot: int  # the moment the tree represents
    pilots: int
    by_entry: dict[str, Counter[str]]  # kind counts plus out_files, completed_lines, jobs
    by_kind: Counter[str]
    files: int
    bytes: int
    ground_truth: list[SimPilot] | None = None
    anomalies: dict[str, int] | None = None  # labels per kind in anomalies.json (not counted in files/bytes)

    def describe(self) -> list[str]:
        """Human summary lines (the CLI prints them)."""
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items()))
        lines = [
            f"{self.pilots} pilots ({kinds}); {self.files} files, {self.bytes / 1e6:.1f} MB",
            f"snapshot at {iso_local(self.snapshot)} (seed {self.seed})",
        ]
        for entry, c in self.by_entry.items():
            lines.append(f"{entry}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
        if self.anomalies is not None:
            kinds = ", ".join(f"{k} {v}" for k, v in self.anomalies.items())
            lines.append(f"labelled anomalies in {labelling.FILE}: {kinds or 'none'}")
        return lines


class EntryDirs:
    """The directories of one entry's files (created up front, as the factory has them)."""

    def __init__(self, base: Path, spec: EntrySpec) -> None:
        self.clients: dict[str, Path] = {}  # client key -> its job.*.out/.err and event logs
        for key in spec.clients:
            c = CLIENTS[key]
            d = base / "client" / f"user_{c.username}" / f"glidein_{GLIDEIN_NAME}" / f"entry_{spec.name}"
            d.mkdir(parents=True, exist_ok=True)
            self.clients[key] = d
        self.server = base / "server" / f"entry_{spec.name}"  # completed_jobs
        self.server.mkdir(parents=True, exist_ok=True)
        self.monitor = base / "monitor" / f"entry_{spec.name}"  # schedd_status.xml, descript.xml
        self.monitor.mkdir(parents=True, exist_ok=True)


class _Tree:
    """Writes the files, counting them and their bytes for the summary."""

    def __init__(self) -> None:
        self.files = 0
        self.bytes = 0

    def write(self, path: Path, data: bytes) -> None:
        path.write_bytes(data)
        self.files += 1
        self.bytes += len(data)


def simulate(
    out: Path,
    pilots: int,
    seed: int,
    *,
    start: float | None = None,
    end: float | None = None,
    entries: Sequence[EntrySpec] = DEFAULT_ENTRIES,
    progress: Callable[[int], None] | None = None,
    span_hours: float = 48.0,
    ground_truth: bool = False,
    anomalies: bool = False,
) -> SimulationSummary:
    """Write a factory log tree for ``pilots`` glideins submitted over ``span_hours``.

    ``progress`` receives increments (pilots done since the last call), so
    ``tqdm.update`` fits. ``ground_truth=True`` keeps every ``SimPilot`` (with
    its jobs) in the summary; leave it off for big benchmark runs.

    ``anomalies=True`` adds ``scenario.ANOMALY_ENTRIES`` to ``entries`` (unless
    some of them already carry a slow script, a hog share or a drift, as
    ``fleet(n, anomalies=True)`` does) and writes ``<out>/anomalies.json``, the
    labels of every anomalous entry, black holes included (``anomalies``).
    It adds ``scenario.OPERATOR_ENTRIES`` with them (a CE refusing the factory,
    one down for an hour, one with a long queue).
    Leaking pilots are not simulated: nothing the factory gets back shows them.

    ``end``, instead of ``start``, sets the snapshot's time (submissions then
    begin ``span_hours`` + 3 h before it): ``end=time.time()`` writes a
    factory whose files end now, as a stack started now shows it, no entry's
    status already stale. The tree is then a function of ``end`` too.
    """
    if start is not None and end is not None:
        raise ValueError("simulate: give start or end, not both")
    if anomalies and not any(e.slow_script or e.hog or e.drift or e.troubled for e in entries):
        entries = (*entries, *ANOMALY_ENTRIES, *OPERATOR_ENTRIES)
    span = int(span_hours * 3600)
    if start is None:
        start = DEFAULT_START if end is None else int(end) - span - Planner.TAIL
    t0 = int(start)
    planner = Planner(seed, t0, span, entries)
    base = Path(out)
    base.mkdir(parents=True, exist_ok=True)
    tree = _Tree()
    all_pilots = planner.skeleton(pilots)
    by_entry_pilots: dict[str, list[SimPilot]] = defaultdict(list)
    for p in all_pilots:
        by_entry_pilots[p.entry].append(p)
    by_entry: dict[str, Counter[str]] = {}
    by_kind: Counter[str] = Counter()
    now = planner.snapshot
    done_since = 0
    kept: list[SimPilot] = []
    views: dict[str, tuple[dict[str, Counter[str]], list[FrontendReport]]] = {}  # entry -> what frontends see
    labels = labelling.Labels(entries, seed, t0, t0 + planner.span, now) if anomalies else None
    for spec in entries:
        dirs = EntryDirs(base, spec)
        counts: Counter[str] = Counter()
        event_logs: dict[Path, list[tuple[int, int, str]]] = defaultdict(list)
        completed: dict[str, list[tuple[int, int, str]]] = defaultdict(list)  # day file -> lines
        queues: dict[str, Counter[str]] = defaultdict(Counter)  # client_log_name -> queue counts
        client_keys = {CLIENTS[k].log_name: k for k in spec.clients}
        for seq, p in enumerate(by_entry_pilots[spec.name]):
            # The draws of one pilot, in this order: fate, grid job id, node, completed_jobs time.
            planner.plan(p, spec)
            usage.fill(p, spec, seed)  # its own hash-seeded stream: no draw of the planner's
            client_key = client_keys[p.client]
            client = CLIENTS[client_key]
            assert p.ended is not None
            events = condor_event_log.events(p, spec, planner.grid_job_id())
            if p.ended > now:  # still queued or running at the snapshot
                p.kind = "in_queue"
                schedd_status.count_queued(queues[p.client], p, now)
            log = dirs.clients[client_key] / condor_event_log.file_name(p, client)
            for t, text in events:
                if t <= now:  # the snapshot has not seen the rest yet
                    event_logs[log].append((t, seq, text))
            if p.kind not in ("lost", "in_queue"):
                node = planner.worker_node(p, spec, client)
                # A shadow sent jobs only if validation passed and condor ran: then there is a Stats block.
                stats = StarterStats() if node.shadow is None else starter_stats(p, node.shadow)
                stem = f"job.{p.cluster}.{p.proc}"
                out_dir = dirs.clients[client_key]
                tree.write(out_dir / f"{stem}.out", glidein_out.render(p, spec, client, node, stats))
                tree.write(out_dir / f"{stem}.err", glidein_err.render(p, spec, client, node, stats, seed))
                p.has_out = True
                counts["out_files"] += 1
                factory_view = completed_stats(p, stats.parsed)
                if factory_view is not None:
                    logged_at = planner.completed_logged_at(p, now)
                    line = completed_jobs.line(p, spec, logged_at, factory_view)
                    completed[completed_jobs.file_name(logged_at)].append((logged_at, seq, line))
                    p.completed_line = True
                    counts["completed_lines"] += 1
            if labels is not None:
                labels.pilot(p, spec)
            counts[p.kind] += 1
            counts["pilots"] += 1
            counts["jobs"] += len(p.jobs)
            if p.blackhole and p.kind == "ran_jobs":
                counts["blackhole"] += 1
            by_kind[p.kind] += 1
            if ground_truth:
                kept.append(p)
            else:
                p.jobs = []
            done_since += 1
            if progress is not None and done_since >= 1000:
                progress(done_since)
                done_since = 0
        for path, records in event_logs.items():
            tree.write(path, time_ordered(records))
        for name, records in completed.items():
            tree.write(dirs.server / name, time_ordered(records))
        info_log, err_log = factory_log.render(spec, by_entry_pilots[spec.name], now)
        for name, data in zip(factory_log.file_names(spec), (info_log, err_log), strict=True):
            tree.write(dirs.server / name, data)
        tree.write(dirs.monitor / descript.FILE, descript.entry_descript(spec, now))
        reports = planner.frontend_reports(spec)
        tree.write(dirs.monitor / schedd_status.FILE, schedd_status.render(spec, now, queues, reports))
        views[spec.name] = (queues, reports)
        by_entry[spec.name] = counts
    (base / "monitor").mkdir(parents=True, exist_ok=True)
    for rel, data in frontend_status.simulated(now, entries, views).items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        tree.write(base / rel, data)
    tree.write(base / "monitor" / descript.FILE, descript.factory_descript(entries, now))
    if labels is not None:
        (base / labelling.FILE).write_bytes(labels.render())
    if progress is not None and done_since:
        progress(done_since)
    return SimulationSummary(
        base,
        seed,
        t0,
        now,
        len(all_pilots),
        by_entry,
        by_kind,
        tree.files,
        tree.bytes,
        kept if ground_truth else None,
        None if labels is None else labels.count(),
    )
