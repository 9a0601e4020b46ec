"""import-rrd's volume and promtool's backfill time for a year of GlideinWMS RRDs (issue 35).

    /usr/bin/python3 tools/glideinwms_rrd_fixtures.py --glideinwms /tmp/glideinwms --out /tmp/year --updates 105120
    python benchmarks/import_rrd.py --monitor /tmp/year [--entries 1 10] [--code OLD/exporters] [--record]

--monitor is a factory monitor dir of one entry written by GlideinWMS's own
writers (a year: 105,120 cycles, about 3 minutes). For each --entries N, a
monitor dir of N entries is made of links to that entry's files (the same
RRDs under N entry names), then timed: ``gwms-obs import-rrd`` (one file),
and ``promtool tsdb create-blocks-from openmetrics`` of its output with the
default 2-hour blocks (stopped after --timeout) and with
``--max-block-duration=4374h``. Reported: samples, bytes of OpenMetrics,
seconds (wall and CPU of the child), blocks and their bytes, and the load
average. --code runs another version of the package (``git archive`` of an
older commit, its ``exporters`` dir) for a before/after in the same rounds, at
the smallest N only (the table names it "--code": say which commit beside it).
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import record

HERE = Path(__file__).resolve().parent
RESULT = HERE / "results" / "import-rrd.md"
BIG_BLOCKS = "4374h"  # the largest of promtool's block ranges (2h x 3^k) under a year


def entries_tree(src: Path, n: int, work: Path) -> Path:
    """``src``'s one entry under ``n`` names, its files hard-linked (symlinked across file systems)."""
    (one,) = sorted(src.glob("entry_*"))
    tree = work / f"monitor-{n}"
    for i in range(n):
        dst = tree / f"{one.name}_{i:03d}"
        for f in one.rglob("*.rrd"):
            d = dst / f.relative_to(one)
            d.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(f, d)
            except OSError:
                d.symlink_to(f)
    return tree


def timed(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[float, float, bool]:
    """Wall seconds, the child's CPU seconds, and whether it finished within ``timeout``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        subprocess.run(cmd, check=True, capture_output=True, timeout=timeout, env=env)
        done = True
    except subprocess.TimeoutExpired:
        done = False
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done


def blocks(data: Path) -> tuple[int, int]:
    dirs = [d for d in data.iterdir() if d.is_dir() and (d / "meta.json").exists()] if data.exists() else []
    return len(dirs), sum(f.stat().st_size for d in dirs for f in d.rglob("*") if f.is_file())


def last_update(monitor: Path) -> int:
    out = subprocess.run(
        ["rrdtool", "last", str(next(monitor.rglob("Status_Attributes.rrd")))],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return int(out.strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--monitor", type=Path, required=True, help="a monitor dir of one entry's year of RRDs")
    ap.add_argument("--entries", type=int, nargs="+", default=[1, 10])
    ap.add_argument("--code", type=Path, help="PYTHONPATH of another gwms_obs to time beside this one")
    ap.add_argument("--timeout", type=float, default=400.0, help="seconds before a promtool run is stopped")
    ap.add_argument("--record", action="store_true")
    a = ap.parse_args()
    cutover = last_update(a.monitor) + 1
    versions = {"this tree": None, **({"--code": str(a.code.resolve())} if a.code else {})}
    rows = []
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="import-rrd-bench-") as tmp:
        work = Path(tmp)
        for n in a.entries:
            tree = entries_tree(a.monitor, n, work)
            for version, path in versions.items():
                if path and n != min(a.entries):
                    continue  # the other version at the smallest N only: filled, 10 entries are 5 GB of text
                env = {**os.environ, **({"PYTHONPATH": path} if path else {})}
                om = work / f"{n}.om"
                cmd = [sys.executable, "-m", "gwms_obs.cli", "import-rrd", str(tree), "--cutover", str(cutover)]
                wall, cpu, _ = timed([*cmd, "-o", str(om)], 3600, env)
                samples = sum(1 for line in om.open() if not line.startswith("#"))
                row = {"entries": n, "version": version, "samples": samples, "bytes": om.stat().st_size}
                row.update(import_s=wall, import_cpu=cpu)
                for label, extra in (("2h", []), (BIG_BLOCKS, [f"--max-block-duration={BIG_BLOCKS}"])):
                    data = work / f"data-{n}-{label}"
                    pcmd = ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", *extra, str(om), str(data)]
                    wall, cpu, done = timed(pcmd, a.timeout)
                    nb, size = blocks(data)
                    row[label] = (wall, cpu, done, nb, size)
                    shutil.rmtree(data, ignore_errors=True)
                om.unlink()
                rows.append(row)
                print(row, flush=True)
            shutil.rmtree(tree)
    load1 = os.getloadavg()

    def promtool(r: tuple[float, float, bool, int, int]) -> str:
        wall, cpu, done, nb, size = r
        if not done:
            return f"not done in {wall:.0f} s ({cpu:.0f} s CPU; {nb} blocks so far)"
        return f"{wall:.1f} s ({cpu:.1f} s CPU), {nb} blocks, {size / 2**20:.1f} MiB"

    lines = [
        "# import-rrd: a year of GlideinWMS RRDs into Prometheus blocks",
        "",
        f"`{' '.join(['python', 'benchmarks/import_rrd.py', *sys.argv[1:]])}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, load average {load0[0]:.1f} at the start and "
        f"{load1[0]:.1f} at the end (a shared machine: wall times move with the load, CPU times less).",
        f"Input: one entry and one client, {a.monitor}'s RRDs written by GlideinWMS's own writers "
        "(tools/glideinwms_rrd_fixtures.py, 105,120 cycles: a year at 5 minutes; GlideinWMS's archives 5 min x 740, "
        "1 h x 740, 12 h x 740), linked under N entry names. promtool is Debian's.",
        "",
        f"| entries | code | samples | OpenMetrics | import-rrd | promtool, 2 h blocks | promtool, {BIG_BLOCKS} |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['entries']} | {r['version']} | {r['samples']:,} | {r['bytes'] / 2**20:.1f} MiB | "
            f"{r['import_s']:.1f} s ({r['import_cpu']:.1f} s CPU) | {promtool(r['2h'])} | {promtool(r[BIG_BLOCKS])} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if a.record:
        record(RESULT, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
