"""Ingest benchmark: completed_jobs lines/s, full pilots/s, peak memory, vs a bare read.

    python benchmarks/ingest.py [--pilots 20000] [--seed 7] [--lines 2000000] [--readers both|native|python] [--record]

Builds (once, cached under benchmarks/work/) a simulated factory of --pilots
pilots with the project's simulator, then measures, each in a fresh
subprocess so peak RSS is its own:

* completed_jobs, two ways, each against a bare ``for line in file`` over
  the same bytes (--lines lines: the simulated lines, repeated):

  - the exporter's path (the completed_jobs stage's ``read``: follower, ``scan_buffer``,
    the pilot keys, the "already counted" lookup) on lines whose pilots were
    all counted from their .out — what a running exporter does with nearly
    every line;
  - full conversion of every line to a ``CompletedJob`` (``tests/support/readers.completed_jobs_file``: what
    ``report`` and a pilot whose .out is gone need);
* pilots: one full exporter scan (every .out + .err read, accounted, added to
  the ledger), against a bare read of the same files' bytes;
* memory flatness: the completed_jobs reader's peak RSS at 1/4, 1/2 and all
  of the lines (the history grows; memory must not).

--record writes the figures to benchmarks/results/ingest-<host>.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path
from types import SimpleNamespace

from bench import child, record, simulated_factory

HERE = Path(__file__).resolve().parent
WORK = HERE / "work"
sys.path.insert(0, str(HERE.parent))  # tests.support: the whole-file reader over the product's read loop


def _child(kind: str, path: str, extra: str) -> None:
    """Runs in a subprocess: one measurement, printed as JSON."""
    from gwms_obs.parse_errors import ParseErrors

    t0 = time.perf_counter()
    n = 0
    nbytes = 0
    if kind == "cj_exporter":
        from gwms_obs.catalogue import Source
        from gwms_obs.ingest.books import ScanResult
        from gwms_obs.ingest.stage import Scan
        from gwms_obs.pipeline import Ingest, IngestConfig
        from tests.support.readers import completed_jobs_file

        # The factory layout the exporter expects, around the same file.
        tree = Path(extra)
        log = tree / "server" / "entry_bench" / "completed_jobs_20260101.log"
        if not log.exists():
            log.parent.mkdir(parents=True, exist_ok=True)
            # A hard link, not a symlink: the readers refuse a symlink out of the factory tree.
            os.link(path, log)
        ing = Ingest(IngestConfig(factory_dir=str(tree), settle_seconds=0.0))
        # Every pilot already counted from its .out (not timed).
        errors = ParseErrors()
        ing.books.counted.seen = {f"bench/{r.cluster}.{r.proc}": 0.0 for r in completed_jobs_file(path, errors)}
        stage = next(s for s in ing.stages if Source.COMPLETED_JOBS in s.sources)
        t0 = time.perf_counter()
        res = ScanResult()
        scan = Scan(time.time(), None, res)
        stage.read(scan, stage.discover(scan) or [])
        assert res.pilots == 0, "every line's pilot was counted: nothing may be converted"
        n = ing.health.records["completed_jobs"]
        with open(path, "rb") as f:
            assert n == sum(1 for _ in f) and n > 0, f"the exporter path read {n} lines, not the file's"
        nbytes = os.path.getsize(path)
    elif kind == "cj_parse":
        from tests.support.readers import completed_jobs_file

        errors = ParseErrors()
        for _ in completed_jobs_file(path, errors):
            n += 1
        nbytes = os.path.getsize(path)
    elif kind == "cj_bare":
        with open(path, "rb") as f:
            for _ in f:
                n += 1
        nbytes = os.path.getsize(path)
    elif kind == "pilots_scan":
        from gwms_obs.pipeline import Ingest, IngestConfig
        from gwms_obs.sources import condor_event_log

        if extra == "eventlog-python":  # every reader compiled but the event logs'
            vars(condor_event_log)["native"] = SimpleNamespace(core=None)

        ing = Ingest(IngestConfig(factory_dir=path, settle_seconds=0.0))
        res = ing.scan()
        n = res.by_source.get("glidein_out", 0)
        nbytes = sum(ing.health.bytes_read.values())
    elif kind == "pilots_bare":
        for root, _dirs, files in os.walk(os.path.join(path, "client")):
            for name in files:
                if name.endswith((".out", ".err")):
                    with open(os.path.join(root, name), "rb") as f:
                        nbytes += len(f.read())
                    n += name.endswith(".out")
    dt = time.perf_counter() - t0
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"kind": kind, "n": n, "bytes": nbytes, "seconds": dt, "peak_rss_mb": rss_kb / 1024}))


def run(kind: str, path: Path, extra: str = "", readers: str = "native") -> dict[str, float]:
    """One measurement in a fresh process; ``readers="python"`` turns the compiled fast path off."""
    return child(__file__, [kind, str(path), extra], {"GWMS_OBS_NATIVE": "0"} if readers == "python" else None)


def completed_file(fac: Path, lines: int) -> Path:
    """All simulated completed_jobs lines, repeated up to ``lines``."""
    dst = WORK / f"completed-{fac.name}-{lines}.log"
    if dst.exists():
        return dst
    src = b"".join(p.read_bytes() for p in sorted((fac / "server").glob("entry_*/completed_jobs_*.log")))
    if not src:
        raise SystemExit("the simulated factory has no completed_jobs lines")
    src_lines = src.splitlines(keepends=True)
    with open(dst, "wb") as f:
        written = 0
        while written < lines:
            chunk = src_lines[: lines - written]
            f.writelines(chunk)
            written += len(chunk)
    return dst


def best(kind: str, path: Path, repeat: int, extra: str = "", readers: str = "native") -> dict[str, float]:
    runs = [run(kind, path, extra, readers) for _ in range(repeat)]
    return min(runs, key=lambda r: r["seconds"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pilots", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="runs per measurement; the best is kept")
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/ingest-<host>.md")
    ap.add_argument(
        "--readers",
        choices=("both", "native", "python"),
        default="both",
        help="the compiled readers, the pure-Python ones (GWMS_OBS_NATIVE=0), or both side by side",
    )
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        _child(*a.child)
        return 0
    WORK.mkdir(exist_ok=True)
    fac = simulated_factory(a.pilots, a.seed)
    cj = completed_file(fac, a.lines)

    load = os.getloadavg()
    from gwms_obs import native

    modes = ["native", "python"] if a.readers == "both" else [a.readers]
    if "native" in modes and native.core is None:
        raise SystemExit(f"no compiled readers here ({native.describe()}): make native, or --readers python")
    rows = []
    bare = best("cj_bare", cj, a.repeat)
    bare_p = best("pilots_bare", fac, a.repeat)
    # Interleaved: each row in each mode before the next row, so load drifts hit both alike.
    for m in modes:
        tree = str(WORK / f"cjtree-{a.lines}")
        rows.append(
            (
                f"completed_jobs lines, exporter path (pilots already counted) [{m}]",
                best("cj_exporter", cj, a.repeat, tree, m),
                bare,
            )
        )
    for m in modes:
        rows.append(
            (f"completed_jobs lines, full conversion to records [{m}]", best("cj_parse", cj, a.repeat, "", m), bare)
        )
    for m in modes:
        # one full scan of the factory per run; the page cache is warm from the bare read
        rows.append((f"full pilots (.out+.err), whole scan [{m}]", best("pilots_scan", fac, a.repeat, "", m), bare_p))
        if m == "native":  # the compiled event-log reader's before/after, in the same run
            label = "full pilots (.out+.err), whole scan [native, event logs in Python: before parse_eventlog]"
            rows.append((label, best("pilots_scan", fac, a.repeat, "eventlog-python", m), bare_p))

    flat = []
    for frac in (4, 2, 1):
        part = completed_file(fac, a.lines // frac)
        flat.append((a.lines // frac, run("cj_parse", part)["peak_rss_mb"]))

    lines = [
        f"# Ingest benchmark — {platform.node()} ({os.cpu_count()} cores), Python {platform.python_version()}",
        "",
        f"Readers: [native] = {native.describe()}; [python] = the pure-Python readers (GWMS_OBS_NATIVE=0).",
        "",
        f"Simulated factory: {a.pilots} pilots, seed {a.seed}; completed_jobs: {a.lines} lines. "
        f"Best of {a.repeat}, each in a fresh process, one core. "
        f"Command: `python benchmarks/ingest.py --pilots {a.pilots} --seed {a.seed} --lines {a.lines} "
        f"--repeat {a.repeat} --readers {a.readers}`.",
        "",
        "| what | records | MB | exporter s | records/s | bare read s | bare records/s | exporter/bare | peak RSS MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r, b in rows:
        lines.append(
            f"| {name} | {r['n']:,} | {r['bytes'] / 1e6:,.0f} | {r['seconds']:.2f} | {r['n'] / r['seconds']:,.0f} | "
            f"{b['seconds']:.2f} | {b['n'] / b['seconds']:,.0f} | {r['seconds'] / b['seconds']:.1f}x | "
            f"{r['peak_rss_mb']:.0f} |"
        )
    load_end = os.getloadavg()
    lines += [
        "",
        f"Load average (1, 5, 15 min) at the start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"at the end: {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f} "
        "(each child runs on one core; a load near the core count slows it).",
    ]
    lines += ["", "completed_jobs reader peak RSS by history size (must stay flat):", ""]
    lines += [f"- {n:,} lines: {mb:.0f} MB" for n, mb in flat]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.record:
        record(HERE / "results" / f"ingest-{platform.node() or 'host'}.md", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
