"""Per-span cost of pilot/gwms-trace.sh, next to spawning one process per span, in one run.

Each case runs N spans (begin with one attribute, end with an exit code; each
span appended to the spool) in one bash process and times the loop with
EPOCHREALTIME; an empty loop of the same shape is subtracted. Cases:

* bash5          - the library's bash >= 5 path (EPOCHREALTIME, SRANDOM; no fork)
* bash4 uptime   - the bash-4 fallback forced on this bash (GWMS_TRACE_COMPAT=4, and SRANDOM
                   unset before sourcing, so that the library defines its functions as on a
                   bash 4, which has no SRANDOM): splitmix64 ids, /proc/uptime clock; no fork per span
* bash4 date     - the fallback where /proc/uptime is unreadable: `date +%s%N` per timestamp
* baseline       - no library: one /bin/true spawned per span (what a per-span
                   CLI such as otel-cli or pfeil costs at least)

Writes benchmarks/results/trace-shell.md, with the machine's load average at the start
and end of the run (the machines are shared: a high load inflates every figure).
Usage: python benchmarks/trace_shell.py [-n SPANS] [-r REPS]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "pilot" / "gwms-trace.sh"
OUT = ROOT / "benchmarks" / "results" / "trace-shell.md"

LOOP = r"""
PRELUDE
source "$LIB"
gwms_trace_init "$SPOOL"
gwms_trace_phase setup
n=$N
times >"$TIMES.0"
t0=$EPOCHREALTIME
for ((i = 0; i < n; i++)); do :; done
t1=$EPOCHREALTIME
times >"$TIMES.1"
for ((i = 0; i < n; i++)); do
  BODY
done
t2=$EPOCHREALTIME
times >"$TIMES.2"
echo "${t0/./} ${t1/./} ${t2/./}"
"""
SPAN = 'gwms_trace_begin "main/s$i.sh" gwms.script=x; gwms_trace_end 0'
BASH4 = "unset SRANDOM"  # what bash 4 lacks (EPOCHREALTIME times the loop, and the library reads neither then)
CASES: dict[str, tuple[dict[str, str], str, str]] = {  # environment, prelude, loop body
    "bash5 (no fork)": ({}, "", SPAN),
    "bash4 fallback, /proc/uptime clock (no fork)": ({"GWMS_TRACE_COMPAT": "4"}, BASH4, SPAN),
    "bash4 fallback, date clock (2 forks)": ({"GWMS_TRACE_COMPAT": "4", "GWMS_TRACE_CLOCK": "date"}, BASH4, SPAN),
    "baseline: one process per span (/bin/true)": ({}, "", "/bin/true"),
}


def _cpu_s(path: Path) -> float:
    """User + system seconds of the shell and its children, from the `times` builtin's output."""
    total = 0.0
    for m, sec in re.findall(r"(\d+)m([\d.,]+)s", path.read_text()):
        total += int(m) * 60 + float(sec.replace(",", "."))
    return total


def run_case(env: dict[str, str], prelude: str, body: str, n: int, work: Path) -> tuple[float, float]:
    """Microseconds per span, wall and CPU (the shell's and its children's), empty loop subtracted."""
    spool = work / "spool.jsonl"
    tf = work / "times"
    e = {"PATH": "/usr/bin:/bin", "LIB": str(LIB), "SPOOL": str(spool), "N": str(n), "TIMES": str(tf), **env}
    r = subprocess.run(
        ["/bin/bash", "-c", LOOP.replace("PRELUDE", prelude).replace("BODY", body)],
        env=e,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    t0, t1, t2 = map(int, r.stdout.split())
    if "gwms_trace" in body:
        lines = spool.read_bytes().count(b"\n")
        assert lines >= n, (lines, n)  # every span reached the spool
    c0, c1, c2 = (_cpu_s(Path(f"{tf}.{k}")) for k in range(3))
    return ((t2 - t1) - (t1 - t0)) / n, ((c2 - c1) - (c1 - c0)) * 1e6 / n


AIM_US = 100  # per span, bash 5 path


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(n: int = 2000, reps: int = 5) -> str:
    load_start = _load()
    bash_version = subprocess.run(["/bin/bash", "--version"], capture_output=True, text=True, check=True).stdout
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())  # fmt: skip
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in CASES}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(reps):  # interleaved, so drift hits every case alike
            for name, (env, prelude, body) in CASES.items():
                results[name].append(run_case(env, prelude, body, n, Path(d)))
    load_end = _load()
    wall = {k: [w for w, _ in v] for k, v in results.items()}
    cpu_us = {k: [c for _, c in v] for k, v in results.items()}
    base = statistics.median(wall["baseline: one process per span (/bin/true)"])
    lines = [
        "# gwms-trace.sh: cost per span",
        "",
        "Written by `benchmarks/trace_shell.py` (one run, all cases interleaved). A span is",
        "`gwms_trace_begin NAME key=value` + `gwms_trace_end 0`, i.e. two timestamps, one id,",
        "one attribute, one exit code, and one OTLP/JSON line appended to the spool file.",
        f"{n} spans per case, {reps} repetitions, median (min-max); empty loop subtracted.",
        "Wall time is the figure the aim is on; CPU time (user + system of the shell and its",
        "children, from `times`) is less inflated when other work shares the machine.",
        "",
        f"- machine: {cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        f"- bash: {bash_version.splitlines()[0]}",
        f"- load average (1, 5, 15 min): {load_start} at the start, {load_end} at the end",
        "- the bash-4 cases are the fallback forced on this bash 5.2 (GWMS_TRACE_COMPAT=4, SRANDOM",
        "  unset before sourcing, so the library defines its functions as on bash 4); no bash 4",
        "  binary was available to run them on a real EL7/EL8 shell.",
        "",
        "| case | µs per span (wall) | vs. baseline | µs per span (CPU) |",
        "|---|---:|---:|---:|",
    ]
    for name, v in wall.items():
        med, c = statistics.median(v), cpu_us[name]
        lines.append(
            f"| {name} | {med:.0f} ({min(v):.0f}-{max(v):.0f}) | {med / base:.2f}x"
            f" | {statistics.median(c):.0f} ({min(c):.0f}-{max(c):.0f}) |"
        )
    bash5 = statistics.median(wall["bash5 (no fork)"])
    lo = min(wall["bash5 (no fork)"])
    lines += [
        "",
        f"Aim: ≤ {AIM_US} µs per span on bash 5 - {'met' if bash5 <= AIM_US else 'NOT met'}"
        f" (median {bash5:.0f} µs, min {lo:.0f} µs).",
        "",
    ]
    text = "\n".join(lines)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    return text


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--spans", type=int, default=2000, help="spans per case and repetition (2000)")
    ap.add_argument("-r", "--reps", type=int, default=5, help="repetitions, all cases interleaved (5)")
    ap.add_argument("spans_pos", nargs="?", type=int, help=argparse.SUPPRESS)  # the older `trace_shell.py N`
    args = ap.parse_args(sys.argv[1:])
    print(main(args.spans_pos or args.spans, args.reps))
