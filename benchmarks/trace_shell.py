"""Per-span cost of pilot/gwms-trace.sh, next to spawning one process per span, in one run.

Each case runs N spans (begin with one attribute, end with an exit code; each
span appended to the spool) in one bash process and times the loop with
EPOCHREALTIME; an empty loop of the same shape is subtracted. Cases:

* bash5          - the library's bash >= 5 path (EPOCHREALTIME, SRANDOM; no fork)
* bash4 uptime   - the bash-4 fallback forced on this bash (GWMS_TRACE_COMPAT=4):
                   splitmix64 ids, /proc/uptime clock; no fork per span
* bash4 date     - the fallback where /proc/uptime is unreadable: `date +%s%N` per timestamp
* baseline       - no library: one /bin/true spawned per span (what a per-span
                   CLI such as otel-cli or pfeil costs at least)

Writes benchmarks/results/trace-shell.md. Usage: python benchmarks/trace_shell.py [N]
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIB = ROOT / "pilot" / "gwms-trace.sh"
OUT = ROOT / "benchmarks" / "results" / "trace-shell.md"

LOOP = r"""
source "$LIB"
gwms_trace_init "$SPOOL"
gwms_trace_phase setup
n=$N
t0=$EPOCHREALTIME
for ((i = 0; i < n; i++)); do :; done
t1=$EPOCHREALTIME
for ((i = 0; i < n; i++)); do
  BODY
done
t2=$EPOCHREALTIME
echo "${t0/./} ${t1/./} ${t2/./}"
"""
CASES: dict[str, tuple[dict[str, str], str]] = {
    "bash5 (no fork)": ({}, 'gwms_trace_begin "main/s$i.sh" gwms.script=x; gwms_trace_end 0'),
    "bash4 fallback, /proc/uptime clock (no fork)": (
        {"GWMS_TRACE_COMPAT": "4"},
        'gwms_trace_begin "main/s$i.sh" gwms.script=x; gwms_trace_end 0',
    ),
    "bash4 fallback, date clock (2 forks)": (
        {"GWMS_TRACE_COMPAT": "4", "GWMS_TRACE_CLOCK": "date"},
        'gwms_trace_begin "main/s$i.sh" gwms.script=x; gwms_trace_end 0',
    ),
    "baseline: one process per span (/bin/true)": ({}, "/bin/true"),
}


def run_case(env: dict[str, str], body: str, n: int, work: Path) -> float:
    """Microseconds per span, empty loop subtracted."""
    spool = work / "spool.jsonl"
    e = {"PATH": "/usr/bin:/bin", "LIB": str(LIB), "SPOOL": str(spool), "N": str(n), **env}
    r = subprocess.run(
        ["/bin/bash", "-c", LOOP.replace("BODY", body)], env=e, capture_output=True, text=True, check=True, timeout=600
    )
    t0, t1, t2 = map(int, r.stdout.split())
    if "gwms_trace" in body:
        lines = spool.read_bytes().count(b"\n")
        assert lines >= n, (lines, n)  # every span reached the spool
    return ((t2 - t1) - (t1 - t0)) / n


def main(n: int = 2000, reps: int = 5) -> str:
    bash_version = subprocess.run(["/bin/bash", "--version"], capture_output=True, text=True, check=True).stdout
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())  # fmt: skip
    results: dict[str, list[float]] = {k: [] for k in CASES}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(reps):  # interleaved, so drift hits every case alike
            for name, (env, body) in CASES.items():
                results[name].append(run_case(env, body, n, Path(d)))
    base = statistics.median(results["baseline: one process per span (/bin/true)"])
    lines = [
        "# gwms-trace.sh: cost per span",
        "",
        "Written by `benchmarks/trace_shell.py` (one run, all cases interleaved). A span is",
        "`gwms_trace_begin NAME key=value` + `gwms_trace_end 0`, i.e. two timestamps, one id,",
        "one attribute, one exit code, and one OTLP/JSON line appended to the spool file.",
        f"{n} spans per case, {reps} repetitions, median (min-max); empty loop subtracted.",
        "",
        f"- machine: {cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}",
        f"- bash: {bash_version.splitlines()[0]}",
        "- the bash-4 cases are the fallback forced on this bash 5.2 (GWMS_TRACE_COMPAT=4);",
        "  no bash 4 binary was available to run them on a real EL7/EL8 shell.",
        "",
        "| case | µs per span | vs. baseline |",
        "|---|---:|---:|",
    ]
    for name, v in results.items():
        med = statistics.median(v)
        lines.append(f"| {name} | {med:.0f} ({min(v):.0f}-{max(v):.0f}) | {med / base:.2f}x |")
    bash5 = statistics.median(results["bash5 (no fork)"])
    lines += [
        "",
        f"Aim: under 1 ms per span on bash 5 - {'met' if bash5 < 1000 else 'NOT met'} ({bash5:.0f} µs).",
        "",
    ]
    text = "\n".join(lines)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    return text


if __name__ == "__main__":
    print(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
