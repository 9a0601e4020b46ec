"""CI's own time: a clean clone's `make test`, as `.ci/run` runs it, cold or warm, step by step.

    python benchmarks/ci.py --cold [--record]    # an empty CACHE_DIR: every download and build
    python benchmarks/ci.py --warm [--record]    # the cache a previous run left (~/.cache/gwms-obs/v1)

Clones HEAD beside this checkout (so ../shared is there, as in CI), then runs
`.ci/run`'s command, `make test`, with make's SHELL set to
benchmarks/ci-shell.sh, which logs each recipe line's start and end, and
pytest writing JUnit XML. Prints the setup steps (when each started and
ended, from the run's start), the time per test file and the slowest 15
tests; --record writes them into benchmarks/results/ci.md, replacing that
mode's section.

Cold means a fresh CACHE_DIR (Go modules and builds, pip's cache, the cargo
target dir, the debootstrap rootfs and the offline images) and a fresh venv;
the Debian packages stay installed (they cannot be removed without breaking
the machine's other work), so the apt step is measured apart, on a machine
that had none of them.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET  # our own pytest's JUnit file, not input from outside
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "ci.md"

# A recipe line -> the step it belongs to (first match wins).
STEPS: list[tuple[str, str | None]] = [
    (r"^make .*-O ", None),  # make test's own make -j of the steps below, counted in them
    (r"tools/prereqs\.sh", "apt: Debian packages (tools/prereqs.sh)"),
    (
        r"-m venv|pip install -q --upgrade pip|pip install -q -e|import gwms_obs, prometheus_client",
        "venv: pip install .[dev]",
    ),
    (r"maturin build|cargo", "native: cargo build (maturin, zig)"),
    (r"pip install -q --no-deps --force-reinstall|native\.describe", "native: install the wheel"),
    (r"ruff ", "lint (ruff)"),
    (r"/mypy", "typecheck (mypy)"),
    (r"collector/cmd/builder", "ocb (go install)"),
    (r"--config=otel-collector", "otelcol-gwms (ocb build)"),
    (r"jaegertracing", "Jaeger (go build)"),
    (r"thanos-io", "Thanos (go build)"),
    (r"docker/compose", "compose v2 (go build)"),
    (r"vegeta", "vegeta (go install)"),
    (r"dashboard-linter", "dashboard-linter (refused by the proxy)"),
    (r"pytest ", "tests (pytest, 2 workers)"),
]


@dataclass
class Step:
    name: str
    start: float
    end: float
    busy: float = 0.0
    failed: bool = False
    lines: list[str] = field(default_factory=list)


def classify(recipe: str) -> str | None:
    for pattern, name in STEPS:
        if re.search(pattern, recipe):
            return name
    return None


def read_steps(times: Path, t0: float) -> list[Step]:
    steps: dict[str, Step] = {}
    for line in times.read_text().splitlines():
        parts = line.split(" ", 3)
        if len(parts) < 4:
            continue
        start, end, rc, recipe = float(parts[0]) - t0, float(parts[1]) - t0, int(parts[2]), parts[3]
        name = classify(recipe)
        if name is None:
            continue
        s = steps.setdefault(name, Step(name, start, end))
        s.start, s.end = min(s.start, start), max(s.end, end)
        s.busy += end - start
        s.failed |= rc != 0 and "dashboard-linter" not in name  # the linter's refusal is reported, not fatal
    return sorted(steps.values(), key=lambda s: s.start)


def read_junit(path: Path) -> tuple[dict[str, float], list[tuple[float, str]], dict[str, int], list[str]]:
    per_file: dict[str, float] = defaultdict(float)
    failed: list[str] = []
    tests: list[tuple[float, str]] = []
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    root = ET.parse(path).getroot()
    for suite in root.iter("testsuite"):
        for k in counts:
            counts[k] += int(suite.get(k, "0"))
    for case in root.iter("testcase"):
        t = float(case.get("time", "0"))
        module = case.get("classname", "").split(".")
        file = "/".join(module[: next((i for i, m in enumerate(module) if m.startswith("test_")), len(module) - 1) + 1])
        per_file[file + ".py"] += t
        tests.append((t, f"{file}.py::{case.get('name')}"))
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(f"{file}.py::{case.get('name')}")
    tests.sort(reverse=True)
    return dict(per_file), tests, counts, failed


def fmt(seconds: float) -> str:
    return f"{int(seconds // 60)}:{seconds % 60:04.1f}"


def render(mode: str, head: str, steps: list[Step], wall: float, rc: int, junit: Path, load: tuple[str, str]) -> str:
    out = [f"## {mode}", ""]
    out.append(
        f"{time.strftime('%Y-%m-%d', time.gmtime())}, commit {head}, {platform.node() or 'this machine'}: "
        f"{os.cpu_count()} cores; load average {load[0]} at the start, {load[1]} at the end. "
        f"`make test` exited {rc} after **{fmt(wall)}** (min:s)."
    )
    out += ["", "| step | started | ended | wall | busy (sum of its lines) |", "| --- | --- | --- | --- | --- |"]
    for s in steps:
        flag = " (failed)" if s.failed else ""
        out.append(f"| {s.name}{flag} | {fmt(s.start)} | {fmt(s.end)} | {fmt(s.end - s.start)} | {fmt(s.busy)} |")
    if junit.is_file():
        per_file, tests, counts, failed = read_junit(junit)
        passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
        out += [
            "",
            f"Tests: {passed} passed, {counts['failures']} failed, {counts['errors']} errors, "
            f"{counts['skipped']} skipped (allowed: tests/conftest.py). Time per test file "
            "(setup, call and teardown; the two workers run side by side, so these add up to about twice the wall):",
            "",
            "| test file | time |",
            "| --- | --- |",
        ]
        out += [f"| {f} | {fmt(t)} |" for f, t in sorted(per_file.items(), key=lambda kv: -kv[1]) if t >= 5]
        out.append(
            f"| the other {sum(1 for t in per_file.values() if t < 5)} files (under 5 s each) | "
            f"{fmt(sum(t for t in per_file.values() if t < 5))} |"
        )
        if failed:
            out += ["", "Failed:", "", *(f"- `{name}`" for name in failed)]
        out += ["", "The slowest 15 tests:", "", "| test | time |", "| --- | --- |"]
        out += [f"| `{name}` | {fmt(t)} |" for t, name in tests[:15]]
    return "\n".join(out) + "\n"


def record(mode: str, section: str) -> None:
    text = RESULTS.read_text() if RESULTS.exists() else "# CI's time: a cold and a warm `make test`\n\n"
    pattern = re.compile(rf"^## {re.escape(mode)}\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(lambda _: section + "\n", text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(text)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--cold", action="store_true", help="an empty CACHE_DIR and venv")
    g.add_argument("--warm", action="store_true", help="the existing CACHE_DIR")
    p.add_argument("--record", action="store_true", help=f"write the result into {RESULTS.relative_to(ROOT)}")
    p.add_argument("--keep", action="store_true", help="keep the clone (and the cold cache) afterwards")
    args = p.parse_args()
    mode = "cold" if args.cold else "warm"

    # The clone sits beside this checkout, as CI's does, so ../shared/reference is found; readable
    # by all (mkdtemp makes 0700), as tests/test_prereqs.py runs tools/prereqs.sh as nobody.
    repo = Path(tempfile.mkdtemp(prefix=f"ci-bench-{mode}-", dir=ROOT.parent))
    work = Path(tempfile.mkdtemp(prefix=f"ci-bench-{mode}-"))
    cache = work / "cache" if args.cold else None
    for d in (repo, work):
        d.chmod(0o755)
    try:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], check=True, cwd=repo, capture_output=True, text=True
        ).stdout.strip()
        times, junit, log = work / "times.txt", work / "junit.xml", work / "make-test.log"
        env = {k: v for k, v in os.environ.items() if k != "GWMS_OBS_ALLOW_SKIP"}  # as .ci/run
        env |= {"CI": "true", "GWMS_CI_TIMES": str(times), "PYTEST_ADDOPTS": f"--junitxml={junit}"}
        make = ["make", "test", f"SHELL={HERE / 'ci-shell.sh'}", *([f"CACHE_DIR={cache}"] if cache else [])]
        load0 = Path("/proc/loadavg").read_text().split()[0]
        t0 = time.time()
        with open(log, "wb") as out:
            rc = subprocess.run(
                make, check=False, cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            ).returncode
        wall = time.time() - t0
        load1 = Path("/proc/loadavg").read_text().split()[0]
        section = render(mode, head, read_steps(times, t0), wall, rc, junit, (load0, load1))
        print(section)
        print(f"make test's output: {log}" if args.keep else f"make test's output (tail):\n{log.read_text()[-3000:]}")
        if args.record:
            record(mode, section)
        return rc
    finally:
        if not args.keep:
            shutil.rmtree(repo, ignore_errors=True)
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
