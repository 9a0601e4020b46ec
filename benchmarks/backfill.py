"""Backfill benchmark: a one-shot full scan of a factory, serially and with a pool of workers.

    python benchmarks/backfill.py [--pilots 20000] [--seed 7] [--workers 2] [--runs 3] [--eventlog-python] [--record]

Builds (once, cached under benchmarks/work/) a simulated factory of --pilots
pilots, then times a full scan (``IngestConfig.one_shot``, as ``report`` reads
a tree: every stage, every pilot's .out and .err) with ``workers=1`` and with
``workers=--workers``, --runs times each, interleaved (serial, pool, serial,
pool, ...) so a change in the machine's load hits both alike; each run in a
fresh process, after one untimed scan that warms the page cache. Reported:
best and median wall time of each, the speed-up (serial / pool), the time in
the pilots' files stage alone (what the pool spreads; the other stages stay
serial), and the load average at the start and the end. Every run's ledger
must be the same (a digest is compared), or the benchmark fails.

--eventlog-python adds a third serial run to each round with the event logs read
by the pure-Python reader (the compiled one off for that stage only): the
before/after of the compiled event-log reader, in the same rounds.

The aim (issue 14): >= 1.8x on 2 cores. --record writes benchmarks/results/backfill.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import resource
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from bench import child, record, simulated_factory

HERE = Path(__file__).resolve().parent
WORK = HERE / "work"
AIM = 1.8


def _child(path: str, workers: int, eventlog_python: bool = False) -> None:
    """Runs in a subprocess: one full scan, printed as JSON."""
    from gwms_obs.ingest.glidein_files import GlideinFilesStage
    from gwms_obs.pipeline import Ingest, IngestConfig
    from gwms_obs.sources import condor_event_log

    if eventlog_python:  # the event logs' pure-Python reader, every other reader compiled
        vars(condor_event_log)["native"] = SimpleNamespace(core=None)

    ing = Ingest(IngestConfig.one_shot(path, None, 3600.0, workers))
    stage = next(s for s in ing.stages if isinstance(s, GlideinFilesStage))
    spent = [0.0]
    pilots = stage._pilots

    def timed(*a: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return pilots(*a, **kw)
        finally:
            spent[0] += time.perf_counter() - t

    stage._pilots = timed  # type: ignore[method-assign]
    # Where the wall time goes: the listing and every stage's read and settle, in this process.
    steps: dict[str, float] = {}

    def step(name: str, fn: Any) -> Any:
        def run(*a: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                steps[name] = steps.get(name, 0.0) + time.perf_counter() - t

        return run

    ing.books.list_clients = step("listing", ing.books.list_clients)  # type: ignore[method-assign]
    for s in ing.stages:
        for m in ("read", "settle"):
            setattr(s, m, step(f"{type(s).__name__.removesuffix('Stage')}.{m}", getattr(s, m)))
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    res = ing.scan()
    dt = time.perf_counter() - t0
    me, workers_cpu = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    ledger = json.dumps(ing.ledger.to_json(), sort_keys=True).encode()
    print(
        json.dumps(
            {
                "workers": workers,
                "seconds": dt,
                "pilot_files_seconds": spent[0],
                "cpu_seconds": me.ru_utime + me.ru_stime,  # this process: all of a serial scan; the merge
                "workers_cpu_seconds": workers_cpu.ru_utime + workers_cpu.ru_stime,
                # the scan's own: without the interpreter's start and the imports
                "scan_cpu_seconds": me.ru_utime + me.ru_stime - cpu0.ru_utime - cpu0.ru_stime,
                "steps": {k: v for k, v in steps.items() if v >= 0.0005},
                "pilots": res.pilots,
                "from_out": res.by_source.get("glidein_out", 0),
                "failed": res.failed,
                "ledger": hashlib.sha256(ledger).hexdigest()[:16],
                "errors": sum(ing.errors.counts.values()),
            }
        )
    )


def _crossing_child(path: str) -> None:
    """Runs in a subprocess: what one pilot's result costs to cross the pipe, alone, printed as JSON.

    The first pilots of the factory are read as a worker reads them (chunks of
    ``MAX_CHUNK``); then their results are pickled (the worker's side) and
    unpickled (the parent's side, objects rebuilt), best of several passes. A
    lower bound of the pool's cost: in the scan, the parent unpickles among
    everything else it holds, and its garbage collector runs over that too.
    """
    import pickle

    from gwms_obs.ingest import pool
    from gwms_obs.ingest.books import ScanResult
    from gwms_obs.ingest.glidein_files import MAX_CHUNK, _task
    from gwms_obs.ingest.stage import Scan
    from gwms_obs.pipeline import Ingest, IngestConfig

    ing = Ingest(IngestConfig.one_shot(path, None, 3600.0, 1))
    b = ing.books
    scan = Scan(b.clock(), None, ScanResult())
    found = ing.descript.discover(scan)  # the entries' descript.xml: what a worker's context carries
    if found is not None:
        ing.descript.read(scan, found)
    stage = ing.pilot_files
    pilots = list(b.list_clients().present.values())[: 4 * MAX_CHUNK]
    ctx = stage._context(b.clock(), b.defaults)
    chunks = [
        pool.read_chunk(ctx, [_task(p, os.stat(p.out)) for p in pilots[i : i + MAX_CHUNK]])
        for i in range(0, len(pilots), MAX_CHUNK)
    ]
    blobs = [pickle.dumps(c, pickle.HIGHEST_PROTOCOL) for c in chunks]
    dumps, loads = [], []
    for _ in range(7):
        t = time.perf_counter()
        for c in chunks:
            pickle.dumps(c, pickle.HIGHEST_PROTOCOL)
        dumps.append(time.perf_counter() - t)
        t = time.perf_counter()
        for blob in blobs:
            pickle.loads(blob)
        loads.append(time.perf_counter() - t)
    n = len(pilots)
    us = {"dumps_us": min(dumps) / n * 1e6, "loads_us": min(loads) / n * 1e6}
    print(json.dumps({"pilots": n, **us, "bytes": sum(map(len, blobs)) / n}))


def run(path: Path, workers: int, eventlog_python: bool = False) -> dict[str, Any]:
    return child(__file__, [str(path), str(workers), "py" if eventlog_python else ""])


def where_the_time_goes(runs: dict[int, list[dict[str, Any]]], workers: int) -> list[str]:
    """The steps of a scan, serial and pooled (median wall s), and the pooled scan's CPU bound."""
    med = statistics.median
    names = [n for n in runs[1][0]["steps"] if any(n in r["steps"] for rs in runs.values() for r in rs)]
    rows = [
        f"| {n} | {med(r['steps'].get(n, 0.0) for r in runs[1]):.2f} "
        f"| {med(r['steps'].get(n, 0.0) for r in runs[workers]):.2f} |"
        for n in names
    ]
    cpu = med(r["scan_cpu_seconds"] + r["workers_cpu_seconds"] for r in runs[workers])
    serial_cpu = med(r["scan_cpu_seconds"] for r in runs[1])
    wall = med(r["seconds"] for r in runs[workers])
    return [
        "Where the wall time goes (median s over the runs; the pilots' files are read in "
        "`GlideinFiles.read`, or in `GlideinFiles.settle` for users no completed_jobs line names; "
        "every other step runs in the main process alone):",
        "",
        f"| step | workers 1 | workers {workers} |",
        "|---|---|---|",
        *rows,
        "",
        f"CPU of the scan (median): serial {serial_cpu:.2f} s; with {workers} workers {cpu:.2f} s in all "
        f"processes ({cpu - serial_cpu:+.2f} s: the pool's cost). On {workers} cores that is at least "
        f"{cpu / workers:.2f} s of wall time; {wall:.2f} s measured, so about "
        f"{max(0.0, workers * wall - cpu):.2f} core-seconds were idle.",
    ]


def the_aims_budget(runs: dict[int, list[dict[str, Any]]], workers: int, crossing: dict[str, Any]) -> list[str]:
    """What the serial steps leave of the aim, and what the pool may cost per pilot to reach it."""
    med = statistics.median
    serial = runs[1]
    wall = med(r["seconds"] for r in serial)
    # Steps of the main process alone (the listing, the logs) against the pool's stage.
    alone = med(sum(v for k, v in r["steps"].items() if not k.startswith("GlideinFiles.")) for r in serial)
    stage = med(sum(v for k, v in r["steps"].items() if k.startswith("GlideinFiles.")) for r in serial)
    bound = wall / (alone + stage / workers)
    pilots = serial[0]["from_out"]
    budget = workers * (wall / AIM - alone) - stage  # CPU s the pool may add at most
    cross = crossing["dumps_us"] + crossing["loads_us"]
    return [
        "What the aim leaves to the pool (serial medians): the steps the main process runs alone "
        f"took {alone:.2f} s, the pilots' files stage {stage:.2f} s, of a {wall:.2f} s scan. "
        f"With the stage spread over {workers} cores at no cost at all, the scan would be "
        f"{bound:.2f}x faster; for {AIM}x the pool may add at most {budget:.2f} CPU s in all, "
        f"{budget / pilots * 1e6:.1f} µs a pilot read. Sending one pilot's result through the pipe "
        f"costs {cross:.1f} µs alone ({crossing['dumps_us']:.1f} µs pickling in the worker, "
        f"{crossing['loads_us']:.1f} µs unpickling in the parent, {crossing['bytes']:.0f} bytes; "
        f"best of 7 passes over {crossing['pilots']} pilots, in a process doing nothing else).",
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pilots", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3, help="runs of each (at least 3)")
    ap.add_argument("--eventlog-python", action="store_true", help="also serial with the Python event-log reader")
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/backfill.md")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child and a.child[1] == "crossing":
        _crossing_child(a.child[0])
        return 0
    if a.child:
        _child(a.child[0], int(a.child[1]), a.child[2] == "py")
        return 0
    if a.runs < 3 or a.workers < 2:
        ap.error("--runs must be >= 3 and --workers >= 2")
    WORK.mkdir(exist_ok=True)
    fac = simulated_factory(a.pilots, a.seed)
    run(fac, 1)  # warm the page cache (not timed)

    load = os.getloadavg()
    runs: dict[int, list[dict[str, Any]]] = {1: [], a.workers: []}
    before: list[dict[str, Any]] = []  # serial, event logs read in Python
    for i in range(a.runs):
        for w, done in runs.items():
            r = run(fac, w)
            done.append(r)
            print(f"run {i + 1}, workers {w}: {r['seconds']:.2f} s (pilots' files {r['pilot_files_seconds']:.2f} s)")
        if a.eventlog_python:
            r = run(fac, 1, eventlog_python=True)
            before.append(r)
            print(f"run {i + 1}, workers 1, event logs in Python: {r['seconds']:.2f} s")
    load_end = os.getloadavg()
    everything = [*before, *(r for rs in runs.values() for r in rs)]
    digests = {(r["ledger"], r["pilots"], r["errors"]) for r in everything}
    if len(digests) != 1 or any(r["failed"] for r in everything):
        print(f"the runs disagree: {digests}", file=sys.stderr)
        return 1

    def stat(w: int, key: str) -> tuple[float, float]:
        xs = [r[key] for r in runs[w]]
        return min(xs), statistics.median(xs)

    def cpu(w: int, key: str = "cpu_seconds") -> str:
        return f"{statistics.median(r[key] for r in runs[w]):.1f}"  # median over the runs

    def cells(rs: list[dict[str, Any]]) -> str:
        med = statistics.median
        secs, files = [r["seconds"] for r in rs], [r["pilot_files_seconds"] for r in rs]
        cpu_med = med(r["cpu_seconds"] for r in rs)
        return f"{min(secs):.2f} | {med(secs):.2f} | {min(files):.2f} | {med(files):.2f} | {cpu_med:.1f}"

    before_cells = cells(before) if before else ""
    s_best, s_med = stat(1, "seconds")
    p_best, p_med = stat(a.workers, "seconds")
    sf_best, sf_med = stat(1, "pilot_files_seconds")
    pf_best, pf_med = stat(a.workers, "pilot_files_seconds")
    ratio, ratio_med = s_best / p_best, s_med / p_med
    met = "met" if ratio >= AIM and ratio_med >= AIM else "NOT met"
    first = runs[1][0]
    cmd = f"python benchmarks/backfill.py --pilots {a.pilots} --seed {a.seed} --workers {a.workers} --runs {a.runs}"
    if a.eventlog_python:
        cmd += " --eventlog-python"
    lines = [
        f"# Backfill benchmark — {platform.node()} ({os.cpu_count()} cores), Python {platform.python_version()}",
        "",
        f"Simulated factory: {a.pilots} pilots, seed {a.seed} ({first['pilots']:,} counted, "
        f"{first['from_out']:,} from their .out/.err). One-shot full scan (as `report`), "
        f"{a.runs} runs each, interleaved, each in a fresh process after one warm-up scan. "
        f"Command: `{cmd}`.",
        "",
        "| workers | full scan best s | median s | pilots' files stage best s | median s "
        "| CPU s, main process | CPU s, workers |",
        "|---|---|---|---|---|---|---|",
        f"| 1 | {s_best:.2f} | {s_med:.2f} | {sf_best:.2f} | {sf_med:.2f} | {cpu(1)} | — |",
        f"| {a.workers} | {p_best:.2f} | {p_med:.2f} | {pf_best:.2f} | {pf_med:.2f} | {cpu(a.workers)} "
        f"| {cpu(a.workers, 'workers_cpu_seconds')} |",
        *([f"| 1, event logs read in Python (before the compiled reader) | {before_cells} | — |"] if before else []),
        "",
        f"Speed-up of the full scan: **{ratio:.2f}x** best, {ratio_med:.2f}x median; "
        f"of the pilots' files stage (what the pool reads): {sf_best / pf_best:.2f}x best, "
        f"{sf_med / pf_med:.2f}x median. Aim: >= {AIM}x on {a.workers} cores: **{met}**.",
        "",
        f"Every run's ledger is the same (sha256 {first['ledger']}), {first['errors']} parse errors in each.",
        "",
        f"Load average (1, 5, 15 min) at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"at the end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f} "
        f"(a load near the core count slows the pool most: it needs every core).",
    ]
    crossing = child(__file__, [str(fac), "crossing", ""])
    lines += ["", *where_the_time_goes(runs, a.workers), "", *the_aims_budget(runs, a.workers, crossing)]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.record:
        record(HERE / "results" / "backfill.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
