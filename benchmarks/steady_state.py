"""Steady state on a large factory (issue 34): the daemon's CPU and the time from a pilot's files
closing to /metrics, event-driven discovery (inotify) paired against scanning (as before), in one run.

A simulated factory of --base pilots is replicated --copies times as more entries (the pilots'
.out/.err hard-linked, the logs and monitor files copied): as many files to list and stat as that
many pilots, without simulating each. Pilots are held back (files, completed_jobs line and event-log
records) to arrive during the windows. The tree is backfilled once (`gwms-obs export --once --workers 2`);
each window then starts `gwms-obs export` as users do, from a copy of that checkpoint, waits for its
first scan, and writes --rate arrivals a second (the .out and .err written, then the line appended, as
the factory does): for --latency-seconds polling /metrics 4 times a second (the time from a pilot's
files closing to /metrics counting it), then for --seconds scraping it every 15 s as Prometheus does,
the daemon's CPU (utime + stime of /proc/PID/stat) taken over that phase alone. The arrivals are
removed and the logs cut back after each window. Modes alternate (scan, inotify, ...) --rounds times.

    .venv/bin/python benchmarks/steady_state.py [--base 5000] [--copies 80] [--seconds 300] [--rounds 2]

Writes the head of benchmarks/results/steady-state.md (the sections after it are kept).
``window --work DIR --mode scan|inotify`` runs one window on a prepared DIR and prints its figures
(a whole process to time); ``breakdown --work DIR`` splits a watching daemon's CPU, in one process,
between its ticks, the /metrics renders, a checkpoint write and the full scan; ``scan --work DIR``
times a watching daemon's full scans (its first, then --scans hourly ones with nothing new).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gwms_obs import catalogue
from gwms_obs.simulate.factory import simulate
from metrics_render import PROMETHEUS_ACCEPT
from tools.polling import poll as wait_for
from tools.tracing_backends import free_port

RESULTS = Path(__file__).resolve().parent / "results" / "steady-state.md"
TICK = os.sysconf("SC_CLK_TCK")
SCRAPE_SECONDS = 15.0  # Prometheus' scrape interval here (its own default is 60 s)


@dataclass
class Arrival:
    out: str
    out_bytes: bytes
    err_bytes: bytes
    log: str | None
    line: bytes


def prepare(work: Path, base: int, copies: int, pool: int, seed: int) -> dict[str, int]:
    root = work / "factory"
    simulate(root, base, seed=seed)
    held = hold_back(root, pool)
    (work / "pool.json").write_text(
        json.dumps([[a.out, a.out_bytes.hex(), a.err_bytes.hex(), a.log, a.line.hex()] for a in held])
    )
    for i in range(1, copies):
        for d in sorted(root.glob("client/*/*/entry_*")) + sorted(root.glob("server/entry_*")):
            if "_copy" in d.name:
                continue
            dst = d.with_name(f"{d.name}_copy{i}")
            shutil.copytree(d, dst, copy_function=_link_pilot_files)
        for d in sorted((root / "monitor").glob("entry_*")):
            if "_copy" not in d.name:
                shutil.copytree(d, d.with_name(f"{d.name}_copy{i}"))
    pilots = sum(1 for _ in root.glob("client/*/*/entry_*/job.*.out"))
    files = sum(len(f) for _, _, f in os.walk(root))
    t0 = time.monotonic()
    cmd = [*gwms(), "export", "--once", "--workers", "2", "--factory-dir", str(root)]
    cmd += ["--checkpoint", str(work / "checkpoint.json")]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    return {"pilots": pilots, "files": files, "arrivals": len(held), "backfill_s": round(time.monotonic() - t0)}


def _link_pilot_files(src: str, dst: str) -> None:
    """The pilots' files hard-linked (read, never written again); logs copied (appended to)."""
    if re.fullmatch(r"job\.\d+\.\d+\.(out|err)", os.path.basename(src)):
        os.link(src, dst)
    else:
        shutil.copy2(src, dst)


def hold_back(root: Path, n: int) -> list[Arrival]:
    """Take ``n`` pilots out of the tree, to arrive later: their files, completed_jobs lines and event-log
    records. Without the records, the backfill (lost_after_seconds as configured) counts as lost only
    the pilots that are (the simulated ones ended months ago), as a factory's daemon has an hour after
    they end; with them, the arrivals would be counted lost before their files came."""
    outs = sorted(root.glob("client/*/*/entry_*/job.*.out"))
    held = []
    ids: dict[Path, list[bytes]] = {}
    for out in outs[:: max(1, len(outs) // n)][:n]:
        err = out.with_suffix(".err")
        if not err.exists():
            continue
        a = Arrival(str(out), out.read_bytes(), err.read_bytes(), None, b"")
        out.unlink()
        err.unlink()
        cluster, proc = out.name.split(".")[1:3]
        mine = re.compile(rb"id=\"(?:b')?" + cluster.encode() + rb"\.0*" + proc.encode() + rb"'?\"")
        for log in sorted((root / "server" / out.parent.name).glob("completed_jobs_*.log")):
            lines = log.read_bytes().splitlines(keepends=True)
            keep = [x for x in lines if not mine.search(x)]
            if len(keep) < len(lines):
                a.log, a.line = str(log), b"".join(x for x in lines if mine.search(x))
                log.write_bytes(b"".join(keep))
        ids.setdefault(out.parent, []).append(rb"0*" + cluster.encode() + rb"\.0*" + proc.encode())
        held.append(a)
    for d, pilots in ids.items():  # an event record: "NNN (cluster.proc.subproc) date ..." up to "...\n"
        theirs = re.compile(rb"\d{3} \((?:" + b"|".join(pilots) + rb")\.\d+\)")
        for log in d.glob("condor_activity_*.log"):
            records = log.read_bytes().split(b"...\n")
            keep = [r for r in records if not theirs.match(r)]
            if len(keep) < len(records):
                log.write_bytes(b"...\n".join(keep))
    return held


def gwms() -> list[str]:
    return [sys.executable, "-m", "gwms_obs.cli"]


def cpu_seconds(pid: int) -> float:
    """The CPU of process ``pid`` and of every process under it: the daemon's /metrics is served by a
    child of its own (outputs/serve.py), whose CPU is the exporter's. Per process utime + stime, and
    cutime + cstime for its children that ended (a restarted child's CPU is not lost)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:  # ended meanwhile: its parent's cutime + cstime has it once reaped
        return 0.0
    total = sum(int(f) for f in fields[11:15]) / TICK  # utime, stime, cutime, cstime
    for task in tasks:
        with contextlib.suppress(FileNotFoundError):
            total += sum(cpu_seconds(int(kid)) for kid in (task / "children").read_text().split())
    return total


def pilots_on(body: bytes) -> int | None:
    """The pilots counted in a /metrics body (None before the first scan ends)."""
    if not body or b"\ngwms_obs_scan_duration_seconds " not in body:
        return None
    name = catalogue.PILOTS.name.encode()
    return sum(
        int(float(line.rsplit(b" ", 1)[1]))
        for line in body.splitlines()
        if line.startswith(name + b"{") or line.startswith(name + b"_total{")
    )


def scrape(url: str) -> bytes:
    """/metrics as Prometheus asks for it (OpenMetrics, gzip), decompressed."""
    req = urllib.request.Request(url, headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=30) as r:  # our daemon, on 127.0.0.1
        body: bytes = r.read()
        return gzip.decompress(body) if r.headers.get("Content-Encoding") == "gzip" else body


def arrive(a: Arrival) -> None:
    """A pilot ends, as the factory writes it: its .out and .err whole, then its completed_jobs line."""
    Path(a.out).write_bytes(a.out_bytes)
    Path(a.out).with_suffix(".err").write_bytes(a.err_bytes)
    if a.log:
        with open(a.log, "ab") as f:
            f.write(a.line)


def window(
    work: Path, mode: str, seconds: float, rate: float, interval: float, latency_seconds: float = 30.0
) -> dict[str, object]:
    """One daemon, two phases. Latency: ``latency_seconds`` of arrivals, /metrics polled 4 times a second
    (the time from an arrival's .err closed to /metrics counting it). Then CPU: ``seconds`` of arrivals,
    /metrics scraped every SCRAPE_SECONDS as Prometheus does, the daemon's CPU over that phase alone."""
    root = work / "factory"
    pool = [
        Arrival(o, bytes.fromhex(ob), bytes.fromhex(eb), lg, bytes.fromhex(ln))
        for o, ob, eb, lg, ln in json.loads((work / "pool.json").read_text())
    ]
    n_lat = min(len(pool), int(latency_seconds * rate))
    n_cpu = min(len(pool) - n_lat, int(seconds * rate))
    sizes = {a.log: os.path.getsize(a.log) for a in pool if a.log}
    tmp = Path(tempfile.mkdtemp(prefix="steady-", dir=work))
    shutil.copy(work / "checkpoint.json", tmp / "checkpoint.json")
    cfg = tmp / "exporter.toml"
    cfg.write_text(f'discovery = "{mode}"\n')
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    cmd = [*gwms(), "export", "--factory-dir", str(root), "--listen", f"127.0.0.1:{port}", "--config", str(cfg)]
    cmd += ["--checkpoint", str(tmp / "checkpoint.json"), "--interval", f"{interval:g}"]
    with open(tmp / "exporter.log", "wb") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    closed: list[float] = []
    seen: list[float] = []
    written = 0
    try:
        t_start = time.monotonic()
        # Every poll as Prometheus asks (OpenMetrics, gzip): a plain-text poll keeps the daemon rendering
        # and handing its serving process the plain text too for WANTED_SECONDS (10 minutes), through
        # the CPU phase (~0.5 % of a core at this size: a human's curl costs that, Prometheus does not).
        start = wait_for("the first scan", lambda: pilots_on(scrape(url)), 900, 0.25)
        first_scan = time.monotonic() - t_start
        # Latency: arrivals, /metrics polled 4 times a second until it counts them all.
        t0 = nxt = time.monotonic()
        while len(seen) < n_lat:
            now = time.monotonic()
            if len(closed) < n_lat and now >= nxt:
                arrive(pool[len(closed)])
                closed.append(time.monotonic())
                nxt += 1.0 / rate
            got = (pilots_on(scrape(url)) or start) - start
            t = time.monotonic()
            while len(seen) < min(got, len(closed)):
                seen.append(t)
            if t - t0 > latency_seconds + interval + 60:
                break  # some never came: reported as missing
            time.sleep(max(0.0, min(0.25, nxt - time.monotonic())) if len(closed) < n_lat else 0.25)
        written = len(closed)
        # CPU: arrivals as before, /metrics scraped every SCRAPE_SECONDS, as Prometheus does.
        base = start + written
        cpu0, t1 = cpu_seconds(p.pid), time.monotonic()
        nxt, next_scrape, scrapes = t1, t1, 0
        while (now := time.monotonic()) < t1 + seconds:
            if now >= next_scrape:
                scrape(url)
                scrapes += 1
                next_scrape += SCRAPE_SECONDS
            if written - n_lat < n_cpu and now >= nxt:
                arrive(pool[written])
                written += 1
                nxt += 1.0 / rate
            time.sleep(max(0.0, min(nxt, next_scrape, t1 + seconds) - time.monotonic()))
        cpu, wall, wall1 = cpu_seconds(p.pid) - cpu0, time.monotonic() - t1, time.time()
        from gwms_obs.ingest.checkpoint import JOURNAL_SUFFIX

        # a checkpoint written in the phase: a whole one, or (a watching daemon's) a journal record
        files = (tmp / "checkpoint.json", tmp / f"checkpoint.json{JOURNAL_SUFFIX}")
        saved = any(f.exists() and f.stat().st_mtime >= wall1 - wall for f in files)
        # ... and every one of them counted (polled now that the CPU is taken)
        limit = time.monotonic() + interval + 90
        cpu_counted = 0
        while time.monotonic() < limit:
            cpu_counted = (pilots_on(scrape(url)) or base) - base
            if cpu_counted >= written - n_lat:
                break
            time.sleep(1.0)
    finally:
        p.terminate()
        p.wait(60)
        for a in pool[:written]:  # the tree as prepared, for the next window
            for f in (Path(a.out), Path(a.out).with_suffix(".err")):
                f.unlink(missing_ok=True)
        for path, size in sizes.items():
            os.truncate(path, size)
        shutil.rmtree(tmp)
    lat = sorted(s - c for s, c in zip(seen, closed, strict=False))
    return {
        "mode": mode,
        "first_scan_s": round(first_scan, 1),
        "arrivals": len(closed),
        "counted": len(seen),
        "p50_s": round(statistics.median(lat), 2) if lat else None,
        "p99_s": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 2) if lat else None,
        "max_s": round(lat[-1], 2) if lat else None,
        "cpu_arrivals": written - n_lat,
        "cpu_counted": cpu_counted,
        "scrapes": scrapes,
        "cpu_s": round(cpu, 2),
        "wall_s": round(wall, 1),
        "core_pct": round(100 * cpu / wall, 2),
        "checkpoint_written": saved,
    }


def breakdown(work: Path, seconds: float, rate: float) -> dict[str, float]:
    """In one process: where a watching daemon's CPU goes, the ticks (discovery and the arriving
    pilots' accounting) against the /metrics renders, the renderer in its thread as the daemon runs it,
    the heap frozen after the full scan as the daemon does; then a checkpoint journal record and a base, alone."""
    from gwms_obs.daemon import Heap
    from gwms_obs.ingest import checkpoint
    from gwms_obs.outputs.prometheus import Exposition
    from gwms_obs.pipeline import Ingest, IngestConfig

    root = work / "factory"
    pool = [
        Arrival(o, bytes.fromhex(ob), bytes.fromhex(eb), lg, bytes.fromhex(ln))
        for o, ob, eb, lg, ln in json.loads((work / "pool.json").read_text())
    ][: int(seconds * rate)]
    sizes = {a.log: os.path.getsize(a.log) for a in pool if a.log}
    tmp = Path(tempfile.mkdtemp(prefix="breakdown-", dir=work))
    shutil.copy(work / "checkpoint.json", tmp / "checkpoint.json")
    ing = Ingest(IngestConfig(factory_dir=str(root), checkpoint=str(tmp / "checkpoint.json")))
    ing.watch()
    c = time.process_time()
    ing.scan()  # the full scan a watching daemon makes at start and every full_scan_seconds
    full_scan_cpu = time.process_time() - c
    heap = Heap()
    c = time.process_time()
    heap.after_full_scan()
    freeze_cpu = time.process_time() - c
    expo = Exposition(ing, None, None)
    expo.start()
    expo.refresh()
    renders0, render_cpu0, ticks, tick_cpu, i = expo.renders, expo.render_cpu, 0, 0.0, 0
    idle = time.thread_time()
    for _ in range(20):
        ing.scan()
    idle_tick = (time.thread_time() - idle) / 20
    try:
        end = time.monotonic() + seconds
        cpu0 = time.process_time()
        while time.monotonic() < end:
            for a in pool[i : i + int(rate)]:
                Path(a.out).write_bytes(a.out_bytes)
                Path(a.out).with_suffix(".err").write_bytes(a.err_bytes)
                if a.log:
                    with open(a.log, "ab") as f:
                        f.write(a.line)
            i += int(rate)
            c = time.thread_time()
            ing.scan()
            tick_cpu += time.thread_time() - c
            ticks += 1
            time.sleep(1.0)
        window_cpu = time.process_time() - cpu0
        # The checkpoint a watching daemon writes every CHECKPOINT_SECONDS: a journal record of what
        # the window changed (the window's arrivals counted, its timeline rows); then a whole one, a
        # base (the daemon's start, a full scan, a journal grown past the base's size).
        journal = Path(f"{tmp / 'checkpoint.json'}{checkpoint.JOURNAL_SUFFIX}")
        c = time.process_time()
        ing.save_checkpoint(journal=True)
        checkpoint_cpu = time.process_time() - c
        record_mb = journal.stat().st_size / 1e6  # the first record since the last base: this one
        c = time.process_time()
        ing.save_checkpoint()
        base_cpu = time.process_time() - c
        base_mb = (tmp / "checkpoint.json").stat().st_size / 1e6
    finally:
        expo.stop()
        heap.close()
        for a in pool:
            for f in (Path(a.out), Path(a.out).with_suffix(".err")):
                f.unlink(missing_ok=True)
        for path, size in sizes.items():
            os.truncate(path, size)
        shutil.rmtree(tmp)
    return {
        "full_scan_cpu_s": round(full_scan_cpu, 2),
        "collect_and_freeze_cpu_s": round(freeze_cpu, 2),
        "seconds": seconds,
        "window_cpu_s": round(window_cpu, 2),
        "ticks": ticks,
        "arrivals": min(i, len(pool)),
        "tick_cpu_s": round(tick_cpu, 2),
        "ms_a_tick": round(1000 * tick_cpu / max(ticks, 1), 1),
        "idle_tick_ms": round(1000 * idle_tick, 2),
        "renders": expo.renders - renders0,
        "render_cpu_s": round(expo.render_cpu - render_cpu0, 3),
        "ms_a_render": round(1000 * (expo.render_cpu - render_cpu0) / max(expo.renders - renders0, 1), 1),
        "checkpoint_cpu_s": round(checkpoint_cpu, 3),
        "checkpoint_record_mb": round(record_mb, 2),
        "checkpoint_base_cpu_s": round(base_cpu, 3),
        "checkpoint_mb": round(base_mb, 1),
    }


def full_scans(work: Path, scans: int) -> dict[str, Any]:
    """In one process: a watching daemon's full scans of the prepared tree, started from a copy of
    its checkpoint, the heap frozen after the first as the daemon does. The first is the daemon's
    start; the others are its hourly ones, with nothing new (each one's CPU: time.process_time)."""
    from gwms_obs.daemon import Heap
    from gwms_obs.pipeline import Ingest, IngestConfig

    tmp = Path(tempfile.mkdtemp(prefix="full-scans-"))  # not in DIR: a prepared tree is shared, read-only
    shutil.copy(work / "checkpoint.json", tmp / "checkpoint.json")
    # full_scan_seconds 0: every scan is a full one, as the hourly one is
    cfg = IngestConfig(factory_dir=str(work / "factory"), checkpoint=str(tmp / "checkpoint.json"), full_scan_seconds=0)
    ing = Ingest(cfg)
    heap = Heap()
    try:
        assert ing.watch()
        cpu: list[float] = []
        for i in range(scans + 1):
            c = time.process_time()
            ing.scan()
            cpu.append(time.process_time() - c)
            assert ing.last_scan_full
            if i == 0:
                heap.after_full_scan()
    finally:
        ing.close()
        heap.close()
        shutil.rmtree(tmp)
    hourly = cpu[1:]
    return {
        "pilots": len(ing.seen),
        "first_scan_cpu_s": round(cpu[0], 2),
        "hourly_cpu_s": [round(c, 3) for c in hourly],
        "hourly_min_s": round(min(hourly), 3),
        "hourly_median_s": round(statistics.median(hourly), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", default="all", choices=("all", "window", "breakdown", "scan"))
    ap.add_argument("--scans", type=int, default=5, help="scan: the full scans after the first")
    ap.add_argument("--work", type=Path)
    ap.add_argument("--mode", choices=("scan", "inotify"), default="inotify")
    ap.add_argument("--base", type=int, default=5000)
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=300, help="the CPU phase (scraped every 15 s)")
    ap.add_argument("--latency-seconds", type=float, default=30, help="the latency phase (polled 4 times a second)")
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--interval", type=float, default=60.0, help="the daemon's interval (scan mode's period)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    if a.what == "breakdown":
        assert a.work is not None
        print(json.dumps(breakdown(a.work, a.seconds, a.rate)))
        return
    if a.what == "scan":
        assert a.work is not None
        print(json.dumps(full_scans(a.work, a.scans)))
        return
    if a.what == "window":
        assert a.work is not None
        print(json.dumps(window(a.work, a.mode, a.seconds, a.rate, a.interval, a.latency_seconds)))
        return
    work = a.work or Path(tempfile.mkdtemp(prefix="steady-state-"))
    load0 = os.getloadavg()
    done = work / "prepared.json"  # --work DIR of an earlier run: its tree and checkpoint again
    if done.exists():
        size = json.loads(done.read_text())
    else:
        size = prepare(work, a.base, a.copies, int((a.seconds + a.latency_seconds) * a.rate), a.seed)
        done.write_text(json.dumps(size))
    print("prepared", size, flush=True)
    runs = []
    for r in range(a.rounds):
        for mode in ("scan", "inotify"):
            res = window(work, mode, a.seconds, a.rate, a.interval, a.latency_seconds)
            print(r, res, flush=True)
            runs.append(res)
    write(a, size, runs, load0, os.getloadavg())


def write(
    a: argparse.Namespace,
    size: dict[str, int],
    runs: list[dict[str, object]],
    load0: tuple[float, ...],
    load1: tuple[float, ...],
) -> None:
    """The results' head (what this command measures); the sections after it, written by hand, are kept."""

    def med(mode: str, k: str) -> float:
        vals = [float(r[k]) for r in runs if r["mode"] == mode and r[k] is not None]  # type: ignore[arg-type]
        return statistics.median(vals) if vals else float("nan")

    rows = "\n".join(
        f"| {r['mode']} | {r['first_scan_s']} | {r['arrivals']} | {r['counted']} | {r['p50_s']} | {r['p99_s']} | "
        f"{r['max_s']} | {r['cpu_arrivals']} | {r['cpu_counted']} | {r['scrapes']} | "
        f"{'yes' if r['checkpoint_written'] else 'no'} | {r['cpu_s']} | {r['wall_s']} | {r['core_pct']} |"
        for r in runs
    )
    head = ["mode", "first scan s", "arrivals", "counted", "p50 s", "p99 s", "max s"]
    head += ["CPU-phase arrivals", "counted", "scrapes", "checkpoint", "CPU s", "wall s", "% of a core"]
    table_head = "| " + " | ".join(head) + " |\n" + "|---" * len(head) + "|"
    text = f"""# Steady state: event-driven discovery against scanning (issue 34)

Command: `.venv/bin/python benchmarks/steady_state.py --base {a.base} --copies {a.copies} --seconds {a.seconds:g}
--latency-seconds {a.latency_seconds:g} --rate {a.rate:g} --interval {a.interval:g} --rounds {a.rounds} --seed {a.seed}`
({time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})

Factory on disk: {size["pilots"]:,} pilots with a .out ({size["files"]:,} files), a simulation of {a.base:,}
pilots replicated {a.copies} times as more entries (.out/.err hard-linked). Backfilled once with
`gwms-obs export --once --workers 2` ({size["backfill_s"]} s wall); each window starts
`gwms-obs export` from a copy of that checkpoint (settle_seconds 30, the default) and waits for its
first scan (first scan: from the start to /metrics serving it). scan: `discovery = "scan"`, a full scan
every interval ({a.interval:g} s), as before issue 34; inotify: the default (`tick_seconds` 1,
`full_scan_seconds` 3600). Arrivals: {a.rate:g} a second, the .out and .err written whole, then the
completed_jobs line appended. Each window has two phases:

* latency: {a.latency_seconds:g} s of arrivals, /metrics polled 4 times a second, the time from an
  arrival's .err closed to /metrics counting it (p50, p99, max);
* CPU: {a.seconds:g} s of arrivals, /metrics scraped every {SCRAPE_SECONDS:g} s as Prometheus asks
  (OpenMetrics, gzip); the daemon's utime + stime over that phase alone ("checkpoint": the daemon
  wrote its checkpoint during it, as a watching daemon does every 5 minutes); then /metrics polled
  until it counts that phase's arrivals ("counted").

{table_head}
{rows}

Medians: scan {med("scan", "core_pct"):.2f} % of a core, p99 {med("scan", "p99_s"):.1f} s; inotify
{med("inotify", "core_pct"):.2f} % of a core, p99 {med("inotify", "p99_s"):.1f} s.

Load average (1, 5, 15 min) at the start: {" ".join(f"{x:.2f}" for x in load0)}; at the end:
{" ".join(f"{x:.2f}" for x in load1)} (2 cores, shared with other engineers' builds and tests).
"""
    old = RESULTS.read_text() if RESULTS.exists() else ""
    kept = old[old.index("\n## ") :] if "\n## " in old else ""
    RESULTS.write_text(text + kept)
    print(text)


if __name__ == "__main__":
    main()
