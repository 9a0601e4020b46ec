"""A week in a test (issue 34 item 4): the real daemon while a factory's week is replayed, in
compressed time, into a live tree that the factory's log retention keeps short.

One simulation of --per-day x --days pilots (submitted over --days, seed --seed) is written
to ``gen/``, the oracle. Its files are then replayed into ``live/`` in simulated-time order, one
simulated day every --day-seconds of real time: a pilot's .out and .err appear (hard links) when
its last event-log event happens; each condor_activity_* event (a block ending ``...``), each
completed_jobs_* line and each entry-log line is appended when its time comes, so the per-day
files start and end as GlideinWMS and HTCondor write them (condor_activity per submit day and
client, completed_jobs per day). Retention: every file whose last write is older than
--retention-days of simulated time is deleted, as the factory's cleanup does by mtime.

`gwms-obs export` runs on ``live/`` as users start it (inotify, its checkpoint, a full rescan every
--full-scan-seconds, lost_after_seconds as --lost-after-seconds). With ``--clock replay`` (the default)
the daemon's clock is the replay's: simulated time, running --day-seconds per day, so what the daemon
measures in the factory's time (settle_seconds, lost_after_seconds, the retention of the pilots it
remembers) is measured as on a factory whose files are written now; a pilot's files' mtime is
their simulated write time. Its own cadences counted on that clock (the checkpoint every 300 s of
ticks, the settle pass every 60 s, a long read's checkpoint every 60 s, the entry logs read every
30 s) are scaled back to real seconds; its full scans and ticks run on the real clock. With
``--clock wall`` the daemon keeps the wall clock, so the simulated times are months old and a finite
lost_after_seconds ends every wait for a .out at once (soak.md's run 2: its time cells differed).
Every second: its RSS (VmRSS) and CPU (utime + stime); at each new checkpoint: its size, the
size of each of its parts, and the time to write that state (json + fsync, the checkpoint's own
write(), in this process). At the end /metrics is compared with `gwms-obs report` on ``gen/``,
the whole week: every pilot counted once, none lost to the deletions.

    .venv/bin/python benchmarks/soak.py [--per-day 4000] [--days 7] [--retention-days 2] [--day-seconds 90]

``--tracemalloc DAY,DAY...`` traces the daemon's allocations (tracemalloc, 1 frame) and writes a
snapshot at each simulated day given and at the end; soak.md then lists the allocation sites that
grew most between the first and the last (slower: a diagnostic run, not the figures).

Writes benchmarks/results/soak.md (and soak.json beside it, the samples).
"""

from __future__ import annotations

import argparse
import bisect
import calendar
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gwms_obs.catalogue import Outcome
from gwms_obs.ingest import checkpoint
from gwms_obs.simulate.factory import simulate
from tests.support.servers import first_scan_done
from tests.test_live_numbers import Numbers, agree, gwms_obs, parse_csv, scrape
from tools.polling import http_get
from tools.polling import poll as wait_for
from tools.tracing_backends import free_port

RESULTS = Path(__file__).resolve().parent / "results"
TICK = os.sysconf("SC_CLK_TCK")
T0 = 1_790_000_000  # 2026-09-21T14:13:20Z, the simulation's first submission window
_EVENT = re.compile(rb"^\d{3} \((\d+)\.(\d+)\.\d+\) (\d{4}-\d\d-\d\d|\d\d/\d\d) (\d\d:\d\d:\d\d)", re.M)
_TERMINATED = re.compile(rb'terminated="(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)')
_ENTRY_LINE = re.compile(rb"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
# The daemon's clock under --clock replay, "wall0,sim0,rate": simulated time sim0 at wall time wall0,
# running rate times the wall clock. The replay reads the same clock, so both agree on "now".
CLOCK_ENV = "GWMS_OBS_SOAK_CLOCK"
# Under --tracemalloc: where the daemon dumps a snapshot when it gets SIGUSR1 (numbered in order).
SNAPSHOT_ENV = "GWMS_OBS_SOAK_SNAPSHOTS"
# Simulated seconds before the first submission at which the daemon's clock starts (its first scan).
LEAD = 3600


@dataclass(order=True)
class Item:
    t: int  # simulated time it is written
    seq: int  # file order among equal times
    rel: str = field(compare=False)  # path under the tree
    data: bytes | None = field(compare=False)  # bytes appended; None: hard-link gen/rel (a pilot's file)


def _epoch(day: bytes, hms: bytes) -> int:
    d = day.decode()
    if "/" in d:  # legacy MM/DD: the simulation's year
        d = f"{time.gmtime(T0).tm_year}-{d.replace('/', '-')}"
    return calendar.timegm(time.strptime(f"{d} {hms.decode()}", "%Y-%m-%d %H:%M:%S"))


def plan(gen: Path) -> tuple[list[Item], int]:
    """Every write the factory made, in simulated time order; and the number of pilot .out files."""
    items: list[Item] = []
    ends: dict[tuple[str, int, int], int] = {}  # (entry dir, cluster, proc) -> its last event
    seq = 0
    for log in sorted(gen.glob("client/*/*/entry_*/condor_activity_*.log")):
        data = log.read_bytes()
        rel = str(log.relative_to(gen))
        start = 0
        for m in _EVENT.finditer(data):
            if m.start() > start:
                items[-1].data = (items[-1].data or b"") + data[start : m.start()]
            stop = data.find(b"...\n", m.start())
            stop = len(data) if stop < 0 else stop + 4
            t = _epoch(m[3], m[4])
            items.append(Item(t, seq, rel, data[m.start() : stop]))
            key = (log.parent.name, int(m[1]), int(m[2]))
            ends[key] = max(ends.get(key, 0), t)
            start = stop
        seq += 1
    outs = 0
    for f in sorted(gen.glob("client/*/*/entry_*/job.*.*")):
        _, cluster, proc, _ = f.name.split(".")
        end = ends.get((f.parent.name, int(cluster), int(proc)))
        if end is None:
            raise SystemExit(f"soak: {f} has no event in its entry's event logs")
        items.append(Item(end, seq, str(f.relative_to(gen)), None))
        outs += f.suffix == ".out"
    seq += 1
    for log in sorted(gen.glob("server/entry_*/*.log")):
        rel = str(log.relative_to(gen))
        pat = _TERMINATED if log.name.startswith("completed_jobs_") else _ENTRY_LINE
        t = T0
        for line in log.read_bytes().splitlines(keepends=True):
            if at := pat.search(line):
                s = at[1].decode().replace("T", " ")
                t = calendar.timegm(time.strptime(s, "%Y-%m-%d %H:%M:%S"))
            items.append(Item(t, seq, rel, line))  # a line without a time goes with the one before
        seq += 1
    items.sort()
    return items, outs


class SimClock:
    """Simulated time: ``sim0`` at wall time ``wall0``, running ``rate`` times the wall clock."""

    def __init__(self, wall0: float, sim0: float, rate: float) -> None:
        self.wall0, self.sim0, self.rate = wall0, sim0, rate

    def __call__(self) -> float:
        return self.sim0 + (time.time() - self.wall0) * self.rate

    def env(self) -> str:
        return f"{self.wall0!r},{self.sim0!r},{self.rate!r}"


def daemon(argv: list[str]) -> int:
    """`gwms-obs export` on the replay's clock (CLOCK_ENV): the pipeline's clock is the simulated time,
    and its own cadences, counted on that clock, are scaled back to real seconds."""
    from gwms_obs import cli, pipeline
    from gwms_obs.ingest import factory_log, glidein_files

    wall0, sim0, rate = (float(x) for x in os.environ[CLOCK_ENV].split(","))
    clock = SimClock(wall0, sim0, rate)
    init = pipeline.Ingest.__init__

    def with_clock(self: pipeline.Ingest, cfg: Any, **kw: Any) -> None:
        kw.setdefault("clock", clock)
        init(self, cfg, **kw)

    pipeline.Ingest.__init__ = with_clock  # type: ignore[method-assign]
    # Cadences of the daemon's own work, counted on the pipeline's clock: real seconds again.
    pipeline.CHECKPOINT_SECONDS *= rate
    pipeline.SETTLE_SECONDS *= rate
    glidein_files.SAVE_SECONDS *= rate
    factory_log.TICK_SECONDS *= rate
    if snaps := os.environ.get(SNAPSHOT_ENV):
        tracemalloc.start(1)
        taken = [0]

        def dump(*_: object) -> None:
            taken[0] += 1
            tracemalloc.take_snapshot().dump(f"{snaps}.tmp")
            os.replace(f"{snaps}.tmp", f"{snaps}.{taken[0]}")  # whole when it appears

        signal.signal(signal.SIGUSR1, dump)
    return cli.main(argv)


def snapshot_diff(first: Path, last: Path, pilots: int, top: int = 15) -> dict[str, Any]:
    """The allocation sites that grew most between two snapshots, per pilot remembered in between."""
    skip = (tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen *>"))
    a = tracemalloc.Snapshot.load(str(first)).filter_traces(skip)
    b = tracemalloc.Snapshot.load(str(last)).filter_traces(skip)
    total = [sum(st.size for st in snap.statistics("filename")) for snap in (a, b)]
    rows = []
    for d in b.compare_to(a, "lineno")[:top]:
        fr = d.traceback[0]
        name = fr.filename.split("/site-packages/")[-1].split("/exporters/")[-1]
        rows.append({"site": f"{name}:{fr.lineno}", "kb": round(d.size_diff / 1024), "count": d.count_diff})
    return {"traced_kb": [round(t / 1024) for t in total], "pilots": pilots, "top": rows}


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def report(root: Path, lost_after: float) -> Numbers:
    """`gwms-obs report` on the whole week: cells from its CSV, pilots per entry from its JSON."""
    args = ("report", "--factory-dir", str(root), "--lost-after-seconds", f"{lost_after:g}", "--format")
    n = parse_csv(gwms_obs(*args, "csv"))
    for row in json.loads(gwms_obs(*args, "json"))["pilots"]:
        n.pilots[row["entry"]] = n.pilots.get(row["entry"], 0) + sum(row[o.value] for o in Outcome)
    return n


def journal_bytes(path: Path) -> int:
    """The checkpoint's journal beside it (the ticks' records since its last base), 0 if none."""
    try:
        return (path.parent / (path.name + checkpoint.JOURNAL_SUFFIX)).stat().st_size
    except OSError:
        return 0


def measure_checkpoint(path: Path, scratch: Path, factory_dir: Path) -> dict[str, object] | None:
    """The checkpoint as the daemon last wrote it, its journal applied as a restart would: the base's
    bytes, the journal's, bytes per part of the state, and a whole write() of that state timed here."""
    try:
        raw_size = path.stat().st_size
        state = checkpoint.load(str(path), str(factory_dir))
    except (OSError, checkpoint.CheckpointError):
        return None  # replaced while read: the next sample has it
    if state is None:
        return None
    tl = state.pop("timeline", {})
    state_parts = {**state, **{f"timeline.{k}": v for k, v in tl.items()}}
    parts = {k: len(json.dumps(v, separators=(",", ":"))) for k, v in state_parts.items()}
    counts = {k: len(state_parts.get(k, ())) for k in COUNTED}
    if "timeline.ended_by_log" in state_parts:  # per log: [entry, client, day, [cluster, proc, ...]]
        parts["timeline.ended"] = parts.pop("timeline.ended_by_log")
        counts["timeline.ended"] = sum(len(row[3]) // 2 for row in state_parts["timeline.ended_by_log"])
    state["timeline"] = tl
    t = time.perf_counter()
    checkpoint.write(str(scratch), state)
    return {
        "bytes": raw_size,
        "journal_bytes": journal_bytes(path),
        "write_s": round(time.perf_counter() - t, 4),
        "parts": parts,
        "counts": counts,
    }


def run(a: argparse.Namespace, work: Path) -> dict[str, object]:
    gen, live = work / "gen", work / "live"
    t = time.monotonic()
    summary = simulate(gen, a.per_day * a.days, seed=a.seed, start=T0, span_hours=24 * a.days)
    gen_s = time.monotonic() - t
    items, outs = plan(gen)
    times = [i.t for i in items]
    shutil.copytree(gen / "monitor", live / "monitor")
    for d in gen.glob("client/*/*/entry_*"):
        (live / d.relative_to(gen)).mkdir(parents=True)
    for d in gen.glob("server/entry_*"):
        (live / d.relative_to(gen)).mkdir(parents=True)
    cfg = work / "exporter.toml"
    cfg.write_text(
        f'discovery = "inotify"\nfull_scan_seconds = {a.full_scan_seconds:g}\n'
        f"lost_after_seconds = {a.lost_after_seconds:g}\n"
    )
    ckpt = work / "checkpoint.json"
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    args = ["export", "--factory-dir", str(live), "--config", str(cfg)]
    args += ["--listen", f"127.0.0.1:{port}", "--checkpoint", str(ckpt)]
    rate = 86400 / a.day_seconds
    env = dict(os.environ)
    snaps = work / "snapshot"
    if a.clock == "replay":  # the daemon's clock starts LEAD before the first submission
        clock = SimClock(time.time(), T0 - LEAD, rate)
        env[CLOCK_ENV] = clock.env()
        if a.tracemalloc is not None:
            env[SNAPSHOT_ENV] = str(snaps)
        cmd = [sys.executable, __file__, "--daemon", *args]
    else:
        cmd = [sys.executable, "-m", "gwms_obs.cli", *args]
    log = open(work / "exporter.log", "wb")  # noqa: SIM115 - closed with the daemon below
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    snap_days = sorted(a.tracemalloc or ())
    snap_pilots: list[int] = []  # the pilots remembered (seen) at each snapshot
    samples: list[dict[str, object]] = []
    ckpts: list[dict[str, object]] = []
    written: dict[str, int] = {}  # live file -> simulated time of its last write (its mtime, to the cleanup)
    deleted = {"files": 0, "outs": 0}
    try:
        wait_for("the first scan", lambda: first_scan_done(http_get(url)), 120, 0.25)
        start_sim, end_sim = T0, summary.snapshot
        if a.clock == "wall":  # the replay's own clock, from now; the daemon's is the wall clock
            clock = SimClock(time.time(), T0, rate)
        cpu0, r0 = cpu_seconds(p.pid), time.monotonic()
        i, arrived, last_ino, next_sample = 0, 0, 0, r0
        while True:
            now = clock()
            j = bisect.bisect_right(times, now)
            appends: dict[str, list[bytes]] = defaultdict(list)
            for it in items[i:j]:
                dst = live / it.rel
                if it.data is None:
                    if a.clock == "replay":  # written now, on the daemon's clock (set before it is
                        os.utime(gen / it.rel, (it.t, it.t))  # linked: no event in the watched tree)
                    os.link(gen / it.rel, dst)
                    arrived += it.rel.endswith(".out")
                else:
                    appends[it.rel].append(it.data)
                written[it.rel] = it.t
            for rel, chunks in appends.items():
                with open(live / rel, "ab") as f:  # a log's mtime is not read (only the pilots' files')
                    f.write(b"".join(chunks))
            i = j
            cutoff = now - a.retention_days * 86400
            for rel in [r for r, w in written.items() if w < cutoff]:
                (live / rel).unlink(missing_ok=True)
                del written[rel]
                deleted["files"] += 1
                deleted["outs"] += rel.endswith(".out")
            if time.monotonic() >= next_sample:
                next_sample += 1.0
                st = ckpt.stat() if ckpt.exists() else None
                sample: dict[str, object] = {
                    "real_s": round(time.monotonic() - r0, 1),
                    "sim_day": round((now - start_sim) / 86400, 3),
                    "rss_mb": round(rss_kb(p.pid) / 1024, 1),
                    "cpu_s": round(cpu_seconds(p.pid) - cpu0, 2),
                    "arrived": arrived,
                    "outs_on_disk": sum(1 for r in written if r.endswith(".out")),
                    "ckpt_bytes": (st.st_size + journal_bytes(ckpt)) if st else 0,  # base + journal
                }
                samples.append(sample)
                if st and st.st_ino != last_ino:
                    last_ino = st.st_ino
                    c = measure_checkpoint(ckpt, work / "scratch-checkpoint.json", live)
                    if c:
                        ckpts.append({"sim_day": sample["sim_day"], "outs_on_disk": sample["outs_on_disk"], **c})
                if snap_days and sample["sim_day"] >= snap_days[0] and SNAPSHOT_ENV in env:
                    snap_days.pop(0)
                    snap_pilots.append(snapshot(p.pid, snaps, len(snap_pilots) + 1, ckpt))
                if p.poll() is not None:
                    raise SystemExit(f"soak: the exporter exited with {p.returncode}")
            if i >= len(items) and now >= end_sim:
                break
            time.sleep(a.step)
        replay_s = time.monotonic() - r0
        cpu_replay = cpu_seconds(p.pid) - cpu0
        want = report(gen, a.lost_after_seconds)
        got: Numbers | None = None
        mismatch: list[str] = []

        def caught_up() -> Numbers | None:
            n = scrape(url)
            return n if not agree(n, want) else None

        try:
            got = wait_for("/metrics equal to the report on the whole week", caught_up, 180, 1.0)
        except TimeoutError:  # the disagreement is the result, recorded below
            mismatch = agree(scrape(url), want)
        final_rss = rss_kb(p.pid) / 1024
        if SNAPSHOT_ENV in env and snap_pilots:
            snap_pilots.append(snapshot(p.pid, snaps, len(snap_pilots) + 1, ckpt))
    finally:
        p.terminate()
        p.wait(60)
        log.close()
    return {
        "args": vars(a),
        "generated": summary.describe()[0],
        "gen_s": round(gen_s),
        "items": len(items),
        "pilot_outs": outs,
        "replay_s": round(replay_s, 1),
        "cpu_replay_s": round(cpu_replay, 2),
        "arrived": arrived,
        "deleted": deleted,
        "equal": got is not None,
        "pilots_counted": sum(want.pilots.values()),
        "mismatch": mismatch[:10],
        "final_rss_mb": round(final_rss, 1),
        "samples": samples,
        "checkpoints": ckpts,
        "load": [os.getloadavg()],
        "tracemalloc": (
            snapshot_diff(Path(f"{snaps}.1"), Path(f"{snaps}.{len(snap_pilots)}"), snap_pilots[-1] - snap_pilots[0])
            if len(snap_pilots) > 1
            else None
        ),
    }


def snapshot(pid: int, snaps: Path, n: int, ckpt: Path) -> int:
    """Have the daemon dump its allocations (snapshot n); the pilots its last checkpoint remembered."""
    os.kill(pid, signal.SIGUSR1)
    wait_for(f"tracemalloc snapshot {n}", lambda: Path(f"{snaps}.{n}").exists() or None, 300, 0.5)
    try:
        return len(json.loads(ckpt.read_bytes()).get("seen", {}))
    except (OSError, ValueError):
        return 0


FINDINGS = "<!-- findings: written by hand from the run above; kept when the tables are rewritten -->"
PARTS = ("ledger", "seen", "timeline.open", "timeline.ended", "waiting", "cursors", "pending", "factory_log")
# The parts kept per pilot: their entries counted, not only their bytes.
COUNTED = ("seen", "timeline.open", "timeline.ended", "waiting")


def render(res: dict[str, Any]) -> str:
    """soak.md from the run's results: the set-up, a row per half simulated day, each checkpoint."""
    a = {"lost_after_seconds": 1e9, "clock": "wall", **res["args"]}  # the first runs' defaults
    samples: list[dict[str, Any]] = res["samples"]
    cmd = "`.venv/bin/python benchmarks/soak.py --per-day {per_day} --days {days} --retention-days {retention_days:g}"
    cmd += " --day-seconds {day_seconds:g} --full-scan-seconds {full_scan_seconds:g} --seed {seed}"
    cmd += " --lost-after-seconds {lost_after_seconds:g} --clock {clock}`"
    rate = a["per_day"] * 86400 / a["day_seconds"] / 86400
    out = [
        "# Soak: a week of a factory in compressed time (issue 34 item 4)",
        "",
        "Command: " + cmd.format(**a),
        "",
        f"Factory: {res['generated']} (a {a['days']}-day simulation, written in {res['gen_s']} s), replayed into a",
        f"live tree at {a['per_day']:,} pilots a simulated day: 1/{100_000 // a['per_day']} of a 100,000-a-day factory",
        f"(the 2-core shared machine and a {a['day_seconds']:g} s simulated day give {rate:.0f} arrivals a real",
        f"second; the simulator wrote {a['per_day'] * a['days'] / max(1, res['gen_s']):.0f} pilots a second, and the"
        " point is flatness over retention",
        "cycles, not the rate). Each pilot's .out/.err appear when its last event-log event happens; event-log",
        "events, completed_jobs lines and entry-log lines are appended at their own times, so the per-day",
        "files (condor_activity per submit day and client, completed_jobs per day) begin and end as the",
        "factory writes them. Retention: "
        + f"{a['retention_days']:g} simulated days (a factory keeps 2-7): every file whose last",
        "write is older is deleted, as GlideinWMS's cleanup does by mtime, so the run covers",
        f"{a['days'] / a['retention_days']:.1f} retention periods. The entry process's own logs",
        "(`<entry>.info.log`, `.err.log`) are appended to but, written all week, never age out here.",
        "",
        "Daemon: `gwms-obs export` with its checkpoint, inotify discovery, a full rescan every",
        f"{a['full_scan_seconds']:g} s of real time (the first full scan writes the checkpoint whole; then ticks"
        " and full scans append what changed to its journal at most every 300 s, a whole base again once the"
        f" journal passes the base's size), lost_after_seconds {a['lost_after_seconds']:g}, "
        + (
            "on the replay's clock: the daemon's clock is the simulated time (settle, lost_after_seconds and"
            " the retention of what it remembers as on a factory writing now; its own cadences"
            " scaled back to real seconds), a pilot's files' mtime their simulated write time."
            if a["clock"] == "replay"
            else "on the wall clock (the simulated times are months old: a finite value ends every wait for a .out"
            " at once; 1e9 keeps every wait)."
        ),
        f"Replay {res['replay_s']:g} s of real time; {res['arrived']:,} pilots arrived; {res['deleted']['files']:,}",
        f"files deleted by retention ({res['deleted']['outs']:,} of them .out). Load average at the end:",
        " ".join(f"{x:.2f}" for x in res["load"][0]) + " (2 cores, shared).",
        "",
        "**/metrics at the end equals `gwms-obs report` on the whole week** (the oracle tree, every file"
        if res["equal"]
        else "**/metrics at the end does NOT equal `gwms-obs report` on the whole week**:"
        + " "
        + "; ".join(res["mismatch"]),
    ]
    if res["equal"]:
        out.append(
            f"kept): {res['pilots_counted']:,} pilots per entry and every accounting cell, none lost to the "
            "deletions, none counted twice."
        )
    out += [
        "",
        "## Over simulated time",
        "",
        "Each row: the half simulated day ending at *day*. RSS: the daemon's VmRSS (max in the half day).",
        "Checkpoint: the file's size at the row's end. CPU: the daemon's utime + stime in the half day,",
        "and per pilot arrived in it.",
        "",
        "| day | arrived | .out on disk | RSS MB | checkpoint KB (base + journal) | CPU s | CPU ms / pilot |",
        "|---|---|---|---|---|---|---|",
    ]
    prev: dict[str, Any] = {"arrived": 0, "cpu_s": 0.0}
    edge = 0.5
    rss = 0.0
    for s in samples:
        rss = max(rss, float(s["rss_mb"]))
        if s["sim_day"] >= edge or s is samples[-1]:
            n = s["arrived"] - prev["arrived"]
            cpu = s["cpu_s"] - prev["cpu_s"]
            per = f"{1000 * cpu / n:.1f}" if n else "-"
            row = (s["sim_day"], s["arrived"], s["outs_on_disk"], rss, s["ckpt_bytes"] / 1024, cpu, per)
            out.append("| {:.1f} | {:,} | {:,} | {:.1f} | {:,.0f} | {:.2f} | {} |".format(*row))
            prev, rss = s, 0.0
            while edge <= s["sim_day"]:
                edge += 0.5
    out += [
        "",
        "## Checkpoints",
        "",
        "Each base checkpoint the daemon wrote (sampled once a second; its ticks append to the journal between"
        " two bases): its size, the time `checkpoint.write()`",
        "takes for that state in the benchmark's process (JSON encoding, write, fsync; the daemon's own",
        "`state()` not included), and the size of its parts in KB.",
        "",
        "| day | .out on disk | KB | write ms | "
        + " | ".join(PARTS)
        + " | "
        + " | ".join(f"n {k}" for k in COUNTED)
        + " |",
        "|---|---|---|---|" + "---|" * (len(PARTS) + len(COUNTED)),
    ]
    for c in res["checkpoints"]:
        parts = " | ".join(f"{c['parts'].get(k, 0) / 1024:,.0f}" for k in PARTS)
        parts += " | " + " | ".join(f"{c.get('counts', {}).get(k, 0):,}" for k in COUNTED)
        head = f"| {c['sim_day']:.2f} | {c['outs_on_disk']:,} | {c['bytes'] / 1024:,.0f} | {1000 * c['write_s']:.0f}"
        out.append(f"{head} | {parts} |")
    if tm := res.get("tracemalloc"):
        out += [
            "",
            "## Allocations that grew (tracemalloc)",
            "",
            f"The daemon's traced memory went from {tm['traced_kb'][0]:,} to {tm['traced_kb'][1]:,} KB between the"
            f" first and the last snapshot, while the pilots it remembered (`seen`) grew by {tm['pilots']:,}."
            " The sites that grew most (1 frame):",
            "",
            "| site | KB | blocks | bytes / pilot |",
            "|---|---|---|---|",
        ]
        for r in tm["top"]:
            per = f"{1024 * r['kb'] / tm['pilots']:.0f}" if tm["pilots"] else "-"
            out.append(f"| {r['site']} | {r['kb']:,} | {r['count']:,} | {per} |")
    old = RESULTS / "soak.md"
    kept = old.read_text().split(FINDINGS, 1)[1] if old.exists() and FINDINGS in old.read_text() else "\n"
    return "\n".join(out) + "\n\n" + FINDINGS + kept


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--per-day", type=int, default=4000, help="pilots submitted per simulated day")
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--retention-days", type=float, default=2.0)
    ap.add_argument("--day-seconds", type=float, default=90.0, help="real seconds per simulated day")
    ap.add_argument("--full-scan-seconds", type=float, default=60.0)
    ap.add_argument("--step", type=float, default=0.2, help="real seconds between writes")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--lost-after-seconds", type=float, default=3600.0, help="the daemon's (and report's)")
    ap.add_argument("--work", type=Path, help="keep the trees here (default: a temporary dir, removed)")
    ap.add_argument("--render", action="store_true", help="only rewrite soak.md from soak.json")
    ap.add_argument(
        "--clock",
        choices=("replay", "wall"),
        default="replay",
        help="the daemon's clock: the replay's simulated time (default) or the wall clock",
    )
    ap.add_argument(
        "--tracemalloc",
        type=lambda v: [float(x) for x in v.split(",")],
        help="simulated days at which the daemon's allocations are snapshotted (and at the end)",
    )
    if sys.argv[1:2] == ["--daemon"]:  # the daemon itself, on the replay's clock (run())
        sys.exit(daemon(sys.argv[2:]))
    a = ap.parse_args()
    if a.render:
        (RESULTS / "soak.md").write_text(render(json.loads((RESULTS / "soak.json").read_text())))
        return
    work = a.work or Path(tempfile.mkdtemp(prefix="soak-"))
    try:
        res = run(a, work)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)
    res["args"] = {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()}
    (RESULTS / "soak.json").write_text(json.dumps(res, indent=1) + "\n")
    (RESULTS / "soak.md").write_text(render(res))
    print(json.dumps({k: v for k, v in res.items() if k not in ("samples", "checkpoints")}, indent=1))


if __name__ == "__main__":
    main()
