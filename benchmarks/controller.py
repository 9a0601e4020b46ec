"""Controller benchmark: decisions/s and latency of ``GET /v1/decide`` under an open-loop load.

    make bench-controller        # or: python benchmarks/controller.py [--rate 5000] [--duration 30] [--repeat 5]
                                 #     [--workers 1 2] [--database sqlite postgres] [--find-max] [--profile] [--record]

The real server, started as users start it (tests/support/controller.py:
a controller.toml with a token per role, ``gwms-obs controller migrate``, then
``gwms-obs controller serve --workers N``, granian, on 127.0.0.1), on SQLite
or on a throwaway PostgreSQL (tools/postgres.py). Decisions read only the
in-memory policy; the database variant shows that holds.

The policy is a fleet's, made through the real API (``POST /v1/rules`` with
the operator's token): ~50 sites with 2-4 entries each, a cap per site and on
some entries, site overrides site-wide and per entry, VO rules for five
frontends (frontend-wide and per site, some expiring), operator rules on entry
patterns, and operator rules on pilot-id patterns (debugging one batch of
pilots) — ~280 rules. The askers are --pilots distinct pilots (default
1,000: each its own pilot id, factory, entry, site, frontend and security
class drawn from the fleet), each a distinct URL; vegeta sends them
round-robin.

The load is vegeta (tools/vegeta.py), open-loop at a constant --rate with up
to 1,000 connections (``-max-connections=1000``, 1,000 workers from the first
second, more if all are busy): every run a warm-up, then --repeat runs of
--duration seconds. Each run's latencies are valid only when vegeta sent at
the requested rate; a run where it did not is flagged ("fell behind:
latencies understate"). Each run also records: CPU seconds of the server's
processes (granian's parent and workers, /proc/PID/stat), of vegeta
(getrusage of the reaped attack and its report), of PostgreSQL, and of the
whole machine (/proc/stat), so what other users' processes took of the two
cores is in the table; the peak of established connections to the server
(/proc/net/tcp, sampled); the load average before and after.

--find-max steps the rate up (--max-rates), on the first --database only,
and reports the highest rate at which the run met the aim: vegeta kept the
rate, every answer 200, p99 <= 20 ms (a failing step is run once more, then
the search stops).

--floor adds granian with an ASGI app that answers every request the same
bytes: what the server costs before any of the controller's code.

--profile runs the decide path in this process under cProfile (the same
ASGI application, no HTTP): microseconds per decision and where they go.

--record writes benchmarks/results/controller.md (a hand-written "## Analysis"
there is kept) and controller.json (every run's raw figures).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import importlib.metadata
import io
import json
import os
import platform
import pstats
import random
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import WORK, record

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from tests.support.controller import RunningController, controller_server  # noqa: E402
from tools.vegeta import Report, Target, attack, find_vegeta  # noqa: E402

AIM_RATE = 5000  # decisions/s
AIM_P99_MS = 20.0
CONNECTIONS = 1000
RATE_TOLERANCE = 0.99  # achieved/requested below this: vegeta fell behind
CLK_TCK = os.sysconf("SC_CLK_TCK")

FRONTENDS = ("frontend-cms", "frontend-atlas", "frontend-osg", "frontend-fermilab", "frontend-icecube")
SECURITY_CLASSES = ("pilot", "production", "analysis")
FACTORIES = ("gfactory-1", "gfactory-2")
COUNTRIES = ("US", "DE", "IT", "FR", "UK", "ES", "CH", "BR", "IN", "KR")
# the factory's default and the controller's ceiling (controller.toml's [default] and [ceiling])
DEFAULT: dict[str, Any] = {"verbosity": "phases", "sample": 1.0}
CEILING: dict[str, Any] = {"verbosity": "commands", "sample": 1.0, "record_commands": False}


# --- the fleet, its rules and its pilots --------------------------------------------------------
@dataclass(frozen=True)
class Fleet:
    sites: list[str]
    entries: dict[str, list[str]]  # by site


def make_fleet(n_sites: int, rnd: random.Random) -> Fleet:
    sites = [f"T{1 if i % 10 == 0 else 2}_{COUNTRIES[i % len(COUNTRIES)]}_Site{i:02d}" for i in range(n_sites)]
    entries = {s: [f"GLIDEIN_{s}_ce{k}" for k in range(1, rnd.randint(2, 4) + 1)] for s in sites}
    return Fleet(sites, entries)


def make_rules(fleet: Fleet, rnd: random.Random) -> list[dict[str, Any]]:
    """The rules' JSON bodies, as an operator would POST them (an operator may make every kind)."""
    verbosities = ("off", "phases", "scripts", "commands")
    rules: list[dict[str, Any]] = []

    def add(kind: str, selector: dict[str, str], verbosity: str, sample: float = 1.0, hours: float | None = None,
            record_commands: bool = False) -> None:  # fmt: skip
        body: dict[str, Any] = {
            "kind": kind,
            "selector": selector,
            "effect": {"verbosity": verbosity, "sample": sample, "record_commands": record_commands},
            "reason": f"benchmark: {kind} rule {len(rules) + 1}",
        }
        if hours is not None:
            body["hours"] = hours
        rules.append(body)

    for site in fleet.sites:
        # the site's cap, and on a fifth of the sites a tighter one on one entry
        add("cap", {"site": site}, rnd.choice(("scripts", "commands")), rnd.choice((0.25, 0.5, 1.0)))
        if rnd.random() < 0.2:
            add("cap", {"site": site, "entry": rnd.choice(fleet.entries[site])}, "phases", 0.5)
        # the site admin's overrides: site-wide at most sites, and on about half the entries
        if rnd.random() < 0.6:
            add("site", {"site": site}, rnd.choice(verbosities[1:]), rnd.choice((0.1, 0.5, 1.0)), hours=24 * 7)
        for entry in fleet.entries[site]:
            if rnd.random() < 0.5:
                add("site", {"site": site, "entry": entry}, rnd.choice(verbosities), 1.0, hours=24)
    for frontend in FRONTENDS:
        # each VO: frontend-wide, and for a dozen sites (some expiring within the day)
        add("vo", {"frontend": frontend}, "scripts", 0.2)
        for site in rnd.sample(fleet.sites, 12):
            add("vo", {"frontend": frontend, "site": site}, rnd.choice(verbosities), 0.5,
                hours=rnd.choice((None, 6, 48)))  # fmt: skip
    # the operators: entry patterns across sites, and a few exact entries
    for country in COUNTRIES[:8]:
        add("operator", {"entry": f"GLIDEIN_T2_{country}_Site1*"}, "scripts", 0.1)
    for site in rnd.sample(fleet.sites, 4):
        add("operator", {"site": site, "entry": fleet.entries[site][0], "security_class": "production"}, "commands",
            1.0, record_commands=True)  # fmt: skip
    # debugging batches of pilots: pilot-id patterns, for two hours
    for i in range(10):
        factory = FACTORIES[i % len(FACTORIES)]
        add("operator", {"factory": factory, "pilot": f"{factory}/{rnd.randint(10, 99)}*"}, "commands", 1.0, hours=2)
    return rules


def make_askers(fleet: Fleet, n: int, rnd: random.Random) -> list[dict[str, str]]:
    """``n`` distinct pilots: each its own id, its attributes drawn from the fleet."""
    askers: list[dict[str, str]] = []
    ids: set[str] = set()
    while len(askers) < n:
        site = rnd.choice(fleet.sites)
        factory = rnd.choice(FACTORIES)
        pilot = f"{factory}/{rnd.randint(100000, 999999)}.{rnd.randint(0, 3)}"
        if pilot in ids:
            continue
        ids.add(pilot)
        askers.append({
            "factory": factory,
            "entry": rnd.choice(fleet.entries[site]),
            "site": site,
            "frontend": rnd.choice(FRONTENDS),
            "security_class": rnd.choice(SECURITY_CLASSES),
            "pilot": pilot,
        })  # fmt: skip
    return askers


def decide_url(base: str, asker: dict[str, str]) -> str:
    return f"{base}/v1/decide?{urllib.parse.urlencode(asker)}"


def populate(c: RunningController, rules: list[dict[str, Any]]) -> None:
    with httpx.Client(timeout=30) as h:
        for body in rules:
            r = h.post(f"{c.url}/v1/rules", json=body, headers=c.bearer("operator"))
            if r.status_code != 201:
                raise RuntimeError(f"POST /v1/rules {body}: {r.status_code} {r.text[:500]}")
        got = h.get(f"{c.url}/v1/rules", headers=c.bearer("operator")).json()["rules"]
    if len(got) != len(rules):
        raise RuntimeError(f"{len(rules)} rules created, the controller lists {len(got)}")


def decision_mix(c: RunningController, askers: list[dict[str, str]]) -> dict[str, Any]:
    """What the askers are answered (each once): which kind of rule decided, how many were capped."""
    kinds: Counter[str] = Counter()
    verbosity: Counter[str] = Counter()
    capped = distinct = 0
    bodies = set()
    with httpx.Client(timeout=30) as h:
        for a in askers:
            r = h.get(decide_url(c.url, a), headers=c.bearer("pilot"))
            if r.status_code != 200:
                raise RuntimeError(f"GET /v1/decide: {r.status_code} {r.text[:300]}")
            d = r.json()
            kinds[d["kind"]] += 1
            verbosity[d["verbosity"]] += 1
            capped += bool(d["capped_by"])
            bodies.add(r.content)
    distinct = len(bodies)
    return {"kind": dict(kinds), "verbosity": dict(verbosity), "capped": capped, "distinct_answers": distinct}


# --- measuring around a run -----------------------------------------------------------------------
def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a process, or None when it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of ``root`` and every live descendant."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            s = _stat(int(d))
            if s is not None:
                parents[int(d)], cpu[int(d)] = s
    total, stack = 0.0, [root]
    while stack:
        p = stack.pop()
        total += cpu.get(p, 0.0)
        stack.extend(c for c, pp in parents.items() if pp == p)
    return total


def machine_busy() -> float:
    """CPU seconds the whole machine has spent busy (all but idle and iowait) since boot."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:]]
    return (sum(values) - values[3] - values[4]) / CLK_TCK


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def established(port: int) -> int:
    """Established TCP connections whose local port is ``port`` (the server's side of each)."""
    n = 0
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(name) as f:
            next(f)
            for line in f:
                parts = line.split(None, 4)
                if parts[3] == "01" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                    n += 1
    return n


@contextlib.contextmanager
def peak_connections(port: int, every: float = 0.5) -> Iterator[list[int]]:
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(every):
            peak[0] = max(peak[0], established(port))

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        yield peak
    finally:
        stop.set()
        t.join()


@dataclass
class Run:
    variant: str
    rate: int
    duration: float
    report: Report
    server_cpu: float
    vegeta_cpu: float
    postgres_cpu: float
    machine_cpu: float
    wall: float
    peak_connections: int
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rate_kept(self) -> bool:
        return self.report.rate >= RATE_TOLERANCE * self.rate

    @property
    def others_cpu(self) -> float:
        """CPU seconds the machine spent on processes other than ours (and this script)."""
        return max(0.0, self.machine_cpu - self.server_cpu - self.vegeta_cpu - self.postgres_cpu)

    @property
    def met(self) -> bool:
        return (
            self.rate_kept
            and self.report.success >= 1.0
            and self.report.latency_ms["99th"] <= AIM_P99_MS
            and self.report.throughput >= min(AIM_RATE, self.rate) * RATE_TOLERANCE
        )

    def per_request_us(self, cpu: float) -> float:
        return cpu / max(1, self.report.requests) * 1e6

    def as_dict(self) -> dict[str, Any]:
        r = self.report
        return {
            "variant": self.variant,
            "requested_rate": self.rate,
            "duration_s": self.duration,
            "achieved_rate": r.rate,
            "throughput": r.throughput,
            "requests": r.requests,
            "success": r.success,
            "status_codes": r.status_codes,
            "latency_ms": r.latency_ms,
            "errors": r.errors[:20],
            "rate_kept": self.rate_kept,
            "met_aim": self.met,
            "cpu_s": {
                "server": self.server_cpu,
                "vegeta": self.vegeta_cpu,
                "postgres": self.postgres_cpu,
                "machine": self.machine_cpu,
                "others": self.others_cpu,
                "wall": self.wall,
            },
            "server_cpu_us_per_request": self.per_request_us(self.server_cpu),
            "vegeta_cpu_us_per_request": self.per_request_us(self.vegeta_cpu),
            "peak_established_connections": self.peak_connections,
            "load_before": self.load_before,
            "load_after": self.load_after,
            **self.extra,
        }


@dataclass(frozen=True)
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log: Path


def one_run(
    variant: str, c: Server | RunningController, targets: list[Target], rate: int, duration: float, workdir: Path,
    postgres_pid: int | None,
) -> Run:  # fmt: skip
    port = int(c.url.rsplit(":", 1)[1])
    load_before = os.getloadavg()
    s0, v0, m0 = tree_cpu(c.process.pid), children_cpu(), machine_busy()
    p0 = tree_cpu(postgres_pid) if postgres_pid else 0.0
    t0 = time.monotonic()
    with peak_connections(port) as peak:
        rep = attack(targets, rate=rate, duration=duration, workdir=workdir, workers=CONNECTIONS,
                     max_connections=CONNECTIONS)  # fmt: skip
    wall = time.monotonic() - t0
    s1, v1, m1 = tree_cpu(c.process.pid), children_cpu(), machine_busy()
    p1 = tree_cpu(postgres_pid) if postgres_pid else 0.0
    (workdir / "results.bin").unlink(missing_ok=True)
    if c.process.poll() is not None:
        raise RuntimeError(f"the controller exited ({c.process.returncode}):\n{c.log.read_text()[-3000:]}")
    return Run(variant, rate, duration, rep, s1 - s0, v1 - v0, p1 - p0, m1 - m0, wall, peak[0], load_before,
               os.getloadavg())  # fmt: skip


def show(run: Run) -> str:
    r, lat = run.report, run.report.latency_ms
    flag = "" if run.rate_kept else "  FELL BEHIND: latencies understate"
    return (
        f"  {run.variant:<16} {run.rate:>6}/s sent {r.rate:8.1f}/s ok {r.throughput:8.1f}/s success {r.success:.4f} "
        f"p50 {lat['50th']:6.2f} p90 {lat['90th']:6.2f} p99 {lat['99th']:7.2f} max {lat['max']:8.1f} ms | "
        f"cpu/req server {run.per_request_us(run.server_cpu):4.0f} us vegeta {run.per_request_us(run.vegeta_cpu):4.0f} "
        f"us others {run.others_cpu / run.wall * 100:3.0f}% | conns {run.peak_connections} | "
        f"load {run.load_before[0]:.2f}->{run.load_after[0]:.2f}{flag}"
    )


def fresh(work: Path) -> Path:
    """An empty work directory (a database left from an earlier run would hold its rules)."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    return work


def wait_quiet(threshold: float, max_wait: float) -> tuple[float, float]:
    """Wait (bounded) until the 1-minute load average is at most ``threshold``; (seconds waited, load)."""
    t0 = time.monotonic()
    while True:
        load = os.getloadavg()[0]
        waited = time.monotonic() - t0
        if load <= threshold or waited >= max_wait:
            return waited, load
        print(f"  load {load:.2f} > {threshold:g}: waiting ({waited:.0f}/{max_wait:.0f} s)", flush=True)
        time.sleep(min(15.0, max_wait - waited))


# --- the variants -----------------------------------------------------------------------------------
@contextlib.contextmanager
def database(kind: str, workdir: Path) -> Iterator[tuple[str | None, int | None, str]]:
    """(SQLAlchemy URL or None for the fixture's SQLite, PostgreSQL's pid, a version string)."""
    if kind == "sqlite":
        import sqlite3

        yield None, None, f"SQLite {sqlite3.sqlite_version}"
        return
    from tools.postgres import postgres_server

    with postgres_server(workdir) as pg:
        import psycopg

        with psycopg.connect(pg.dsn.replace("postgresql+psycopg://", "postgresql://")) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        yield pg.dsn, pg.pid, f"PostgreSQL {row[0] if row else '?'}"


def run_variant(a: argparse.Namespace, workers: int, db: str, out: dict[str, Any]) -> None:
    variant = f"{db}, {workers} worker{'s' if workers > 1 else ''}"
    work = fresh(WORK / f"controller-{db}-w{workers}")
    waited, load = wait_quiet(a.quiet_load, a.max_wait)
    print(f"{variant}: load {load:.2f} (waited {waited:.0f} s)", flush=True)
    rnd = random.Random(a.seed)
    fleet = make_fleet(a.sites, rnd)
    rules = make_rules(fleet, rnd)
    askers = make_askers(fleet, a.pilots, rnd)
    with database(db, work) as (dsn, pg_pid, db_version), \
         controller_server(work, dsn, workers=workers, default=DEFAULT, ceiling=CEILING) as c:  # fmt: skip
        populate(c, rules)
        time.sleep(1.5)  # every worker re-reads the rules within refresh_seconds (1 s)
        mix = decision_mix(c, askers)
        targets = [Target(decide_url(c.url, x), headers={"Authorization": [f"Bearer {c.tokens['pilot']}"]})
                   for x in askers]  # fmt: skip
        info: dict[str, Any] = {
            "variant": variant, "workers": workers, "database": db_version, "rules": len(rules),
            "sites": len(fleet.sites), "entries": sum(len(e) for e in fleet.entries.values()), "pilots": len(askers),
            "decision_mix": mix, "load_at_start": load, "waited_for_quiet_s": waited, "runs": [], "find_max": [],
        }  # fmt: skip
        out["variants"].append(info)
        print(f"  {len(rules)} rules; answers to the {len(askers)} pilots: {mix}", flush=True)
        attack_dir = work / "attack"
        if a.warmup > 0:
            warm = one_run(variant, c, targets, a.rate, a.warmup, attack_dir, pg_pid)
            print(show(warm).replace(variant, "warm-up", 1), flush=True)
        if not a.find_max_only:
            for _ in range(a.repeat):
                run = one_run(variant, c, targets, a.rate, a.duration, attack_dir, pg_pid)
                print(show(run), flush=True)
                info["runs"].append(run.as_dict())
                time.sleep(a.pause)
        if (a.find_max or a.find_max_only) and db == a.database[0]:
            for rate in a.max_rates:
                tries = []
                for _ in range(2):  # a failing step once more: the machine is shared
                    run = one_run(variant, c, targets, rate, a.step_duration, attack_dir, pg_pid)
                    print(show(run).replace("  ", "  max ", 1), flush=True)
                    tries.append(run.as_dict())
                    time.sleep(a.pause)
                    if run.met:
                        break
                info["find_max"].append({"rate": rate, "met": tries[-1]["met_aim"], "tries": tries})
                if not tries[-1]["met_aim"]:
                    break


# --- the floor: granian serving a constant answer ---------------------------------------------------
BASELINE_APP = """
BODY = %r


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send({"type": "http.response.start", "status": 200, "headers": [
        (b"content-type", b"application/json"), (b"cache-control", b"no-store"),
        (b"content-length", str(len(BODY)).encode())]})
    await send({"type": "http.response.body", "body": BODY})
"""


def run_baseline(a: argparse.Namespace, workers: int, out: dict[str, Any]) -> None:
    """granian, as serve starts it, with an ASGI app that answers every request the same bytes: the floor."""
    from tests.support.servers import process
    from tools.tracing_backends import free_port

    variant = f"floor, {workers} worker{'s' if workers > 1 else ''}"
    work = fresh(WORK / f"controller-floor-w{workers}")
    body = b'{"verbosity":"phases","sample":1.0,"record_commands":false,"sample_threshold":72057594037927936,' \
           b'"rule":null,"kind":"default","capped_by":[]}'  # fmt: skip
    (work / "floor_app.py").write_text(BASELINE_APP % body)
    waited, load = wait_quiet(a.quiet_load, a.max_wait)
    print(f"{variant}: load {load:.2f} (waited {waited:.0f} s)", flush=True)
    rnd = random.Random(a.seed)
    askers = make_askers(make_fleet(a.sites, rnd), a.pilots, rnd)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1", "--port", str(port),
           "--workers", str(workers), "--backlog", "4096", "--no-ws", "--log-level", "warning",
           "--working-dir", str(work), "floor_app:app"]  # fmt: skip
    info: dict[str, Any] = {
        "variant": variant, "workers": workers, "database": "none: a constant answer", "load_at_start": load,
        "waited_for_quiet_s": waited, "runs": [], "find_max": [],
    }  # fmt: skip
    out["variants"].append(info)
    with process(cmd, work / "granian.log", f"{url}/healthz", 30) as p:
        server = Server(url, p, work / "granian.log")
        targets = [Target(decide_url(url, x), headers={"Authorization": ["Bearer x"]}) for x in askers]
        if a.warmup > 0:
            warm = one_run(variant, server, targets, a.rate, a.warmup, work / "attack", None)
            print(show(warm).replace(variant, "warm-up", 1), flush=True)
        for _ in range(a.repeat):
            run = one_run(variant, server, targets, a.rate, a.duration, work / "attack", None)
            print(show(run), flush=True)
            info["runs"].append(run.as_dict())
            time.sleep(a.pause)


# --- in-process profile of the decide path ------------------------------------------------------
def profile(a: argparse.Namespace, out: dict[str, Any]) -> None:
    """The decide path through the very ASGI application (no HTTP): µs per decision, and cProfile's top."""
    from gwms_obs.controller.cli import build_app

    work = fresh(WORK / "controller-profile")
    rnd = random.Random(a.seed)
    fleet = make_fleet(a.sites, rnd)
    rules = make_rules(fleet, rnd)
    askers = make_askers(fleet, a.pilots, rnd)
    with controller_server(work, default=DEFAULT, ceiling=CEILING) as c:  # the server makes the schema and the rules
        populate(c, rules)
        config_path, token = c.config_path, c.tokens["pilot"]
    app = build_app(str(config_path))
    scopes = [
        {
            "type": "http", "method": "GET", "path": "/v1/decide", "query_string": urllib.parse.urlencode(x).encode(),
            "headers": [(b"host", b"127.0.0.1"), (b"user-agent", b"Go-http-client/1.1"),
                        (b"authorization", f"Bearer {token}".encode()), (b"accept-encoding", b"gzip")],
        }
        for x in askers
    ]  # fmt: skip

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    statuses: Counter[int] = Counter()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses[message["status"]] += 1

    async def loop(n: int) -> None:
        for i in range(n):
            await app(scopes[i % len(scopes)], receive, send)

    n = a.profile_requests
    asyncio.run(loop(2000))  # warm
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        asyncio.run(loop(n))
        times.append((time.perf_counter() - t0) / n * 1e6)
    prof = cProfile.Profile()
    prof.enable()
    asyncio.run(loop(n))
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
    text = s.getvalue()
    text = text[text.find("   ncalls") :]
    print(f"in process: {min(times):.1f} us per decision (min of 5 x {n}), median {statistics.median(times):.1f}")
    print(text)
    if set(statuses) != {200}:
        raise RuntimeError(f"the in-process decide path answered {dict(statuses)}")
    out["profile"] = {"us_per_decision": times, "requests": n, "top_tottime": text}


# --- the write-up -------------------------------------------------------------------------------------
def machine(a: argparse.Namespace) -> dict[str, Any]:
    model = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break

    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)
        return r.stdout.strip()

    vegeta = find_vegeta()
    v = subprocess.run([str(vegeta), "-version"], capture_output=True, text=True, check=False).stdout
    version = next((ln.split(":", 1)[1].strip() for ln in v.splitlines() if ln.startswith("Version")), v.strip())
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", "exporters")
    return {
        "host": platform.node(),
        "nproc": len(os.sched_getaffinity(0)),
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "granian": importlib.metadata.version("granian"),
        "vegeta": version,
        "commit": git("rev-parse", "--short", "HEAD"),
        "exporters_modified": bool(dirty),
        "load_at_start": os.getloadavg(),
    }


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def markdown(out: dict[str, Any], command: str) -> str:
    m = out["machine"]
    ld = m["load_at_start"]
    lines = [
        f"# Controller benchmark — {m['host']} ({m['nproc']} cores), Python {m['python']}, granian {m['granian']}",
        "",
        f"`GET /v1/decide` of the real server (`gwms-obs controller serve`) on 127.0.0.1, under vegeta "
        f"{m['vegeta']} open-loop (constant rate, up to {CONNECTIONS:,} connections, {CONNECTIONS:,} workers from "
        "the start). Generator and server share the machine's cores. "
        f"Aim (issue 11): ≥ {AIM_RATE:,} decisions/s with p99 ≤ {AIM_P99_MS:g} ms.",
        "",
        f"Machine: {m['cpu_model']}, {m['nproc']} cores, kernel {m['kernel']}; commit {m['commit']}"
        f"{' (exporters/ modified in the work tree)' if m['exporters_modified'] else ''}; "
        f"load average at the start {ld[0]:.2f} {ld[1]:.2f} {ld[2]:.2f}.",
        "",
        f"Command: `{command}`.",
        "",
    ]
    policy = [v for v in out["variants"] if "rules" in v]
    if policy:
        v0 = policy[0]
        lines += [
            f"Policy: {v0['rules']} rules made through `POST /v1/rules` over {v0['sites']} sites and "
            f"{v0['entries']} entries (caps, site overrides, VO rules of 5 frontends, operator entry-pattern and "
            f"pilot-pattern rules). Askers: {v0['pilots']:,} distinct pilots, one URL each, round-robin. "
            f"What they are answered: decided by {v0['decision_mix']['kind']}, "
            f"{v0['decision_mix']['capped']} capped, {v0['decision_mix']['distinct_answers']} distinct answers.",
            "",
        ]
    if any(v["variant"].startswith("floor") for v in out["variants"]):
        lines += [
            "floor: granian started as `serve` starts it, with an ASGI app that answers every request the same "
            "bytes (no token, no query, no decision): what the server costs before any of the controller's code.",
            "",
        ]
    runs_any = [v for v in out["variants"] if v["runs"]]
    if runs_any:
        lines += [
            "## Summary",
            "",
            f"Each variant: {len(runs_any[0]['runs'])} runs of {runs_any[0]['runs'][0]['duration_s']:g} s at "
            f"{runs_any[0]['runs'][0]['requested_rate']:,}/s after a warm-up; min / median across the runs. "
            "decisions/s is vegeta's throughput (answers 200 per second). CPU per request: the server's processes' "
            "user+system time over the run divided by the requests; vegeta's the same (its attack and report). "
            "others: what the rest of the machine took, as a share of one core.",
            "",
            "| variant | decisions/s min / med | p50 ms | p90 ms | p99 ms min / med | max ms med | success | "
            "rate kept | server CPU µs/req | vegeta CPU µs/req | peak conns | others % of a core | load before | "
            "aim met |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for v in runs_any:
            rs = v["runs"]

            def col(f: Any, rs: list[dict[str, Any]] = rs) -> list[float]:
                return [float(f(r)) for r in rs]

            thr = col(lambda r: r["throughput"])
            p99 = col(lambda r: r["latency_ms"]["99th"])
            others = col(lambda r: r["cpu_s"]["others"] / r["cpu_s"]["wall"] * 100)
            loads = col(lambda r: r["load_before"][0])
            kept = sum(r["rate_kept"] for r in rs)
            met = sum(r["met_aim"] for r in rs)
            p50, p90 = med(col(lambda r: r["latency_ms"]["50th"])), med(col(lambda r: r["latency_ms"]["90th"]))
            lines.append(
                f"| {v['variant']} ({v['database']}) | {min(thr):,.0f} / {med(thr):,.0f} | {p50:.2f} | {p90:.2f} "
                f"| {min(p99):.2f} / {med(p99):.2f} | {med(col(lambda r: r['latency_ms']['max'])):.1f} | "
                f"{min(col(lambda r: r['success'])):.4f} | {kept}/{len(rs)} | "
                f"{med(col(lambda r: r['server_cpu_us_per_request'])):.0f} | "
                f"{med(col(lambda r: r['vegeta_cpu_us_per_request'])):.0f} | "
                f"{max(col(lambda r: r['peak_established_connections'])):.0f} | {med(others):.0f} | "
                f"{min(loads):.2f}–{max(loads):.2f} | {met}/{len(rs)} |"
            )
        lines += [
            "",
            "A run whose achieved rate is below 99% of the requested one is marked: the generator or the server "
            'fell behind, and its latencies understate (open loop broken). "aim met": rate kept, every answer '
            f"200, p99 ≤ {AIM_P99_MS:g} ms.",
            "",
            "## Every run",
            "",
            "| variant | requested /s | achieved /s | decisions/s | success | p50 ms | p90 ms | p99 ms | max ms | "
            "server CPU s | vegeta CPU s | postgres CPU s | others CPU s | wall s | conns | load before → after | |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for v in runs_any:
            for r in v["runs"]:
                lines.append(row(v["variant"], r))
    fm = [v for v in out["variants"] if v["find_max"]]
    if fm:
        lines += [
            "",
            "## Highest rate meeting the aim (--find-max)",
            "",
            f"Rate stepped up, {fm[0]['find_max'][0]['tries'][0]['duration_s']:g} s a step (a failing step run once "
            "more); a step passes when vegeta kept the rate, every answer was 200 and p99 ≤ "
            f"{AIM_P99_MS:g} ms.",
            "",
            "| variant | highest passing rate /s | first failing step |",
            "|---|---|---|",
        ]
        for v in fm:
            ok = [s["rate"] for s in v["find_max"] if s["met"]]
            bad = [s for s in v["find_max"] if not s["met"]]
            why = "—"
            if bad:
                t = bad[0]["tries"][-1]
                why = (f"{bad[0]['rate']:,}/s: achieved {t['achieved_rate']:,.0f}/s, success {t['success']:.4f}, "
                       f"p99 {t['latency_ms']['99th']:.1f} ms")  # fmt: skip
            best = f"{max(ok):,}" if ok else f"none: the lowest step ({v['find_max'][0]['rate']:,}/s) failed"
            lines.append(f"| {v['variant']} | {best} | {why} |")
        lines += ["", "| variant | step | " + "| ".join(["requested /s", "achieved /s", "decisions/s", "success",
                  "p50 ms", "p90 ms", "p99 ms", "max ms", "server CPU s", "vegeta CPU s", "postgres CPU s",
                  "others CPU s", "wall s", "conns", "load before → after", ""]) + "|"]  # fmt: skip
        lines.append("|---" * 18 + "|")
        for v in fm:
            for s in v["find_max"]:
                for i, t in enumerate(s["tries"]):
                    lines.append(row(f"{v['variant']} | {s['rate']:,}{' (again)' if i else ''}", t))
    if "profile" in out:
        p = out["profile"]
        lines += [
            "",
            "## The decide path in process (--profile)",
            "",
            f"The server's ASGI application called directly (no HTTP, no granian), {p['requests']:,} requests over "
            f"the same pilots: **{min(p['us_per_decision']):.1f} µs** a decision (min of 5; median "
            f"{med(p['us_per_decision']):.1f}). cProfile's top by own time (its overhead inflates the figures):",
            "",
            "```",
            p["top_tottime"].rstrip(),
            "```",
        ]
    end = out.get("load_at_end")
    if end:
        lines += ["", f"Load average at the end: {end[0]:.2f} {end[1]:.2f} {end[2]:.2f}."]
    return "\n".join(lines) + "\n"


def row(label: str, r: dict[str, Any]) -> str:
    lat, cpu = r["latency_ms"], r["cpu_s"]
    flag = "" if r["rate_kept"] else "**fell behind: latencies understate**"
    if r["rate_kept"] and not r["met_aim"]:
        flag = "aim not met"
    return (
        f"| {label} | {r['requested_rate']:,} | {r['achieved_rate']:,.1f} | {r['throughput']:,.1f} | "
        f"{r['success']:.4f} | {lat['50th']:.2f} | {lat['90th']:.2f} | {lat['99th']:.2f} | {lat['max']:.1f} | "
        f"{cpu['server']:.1f} | {cpu['vegeta']:.1f} | {cpu['postgres']:.1f} | {cpu['others']:.1f} | "
        f"{cpu['wall']:.1f} | {r['peak_established_connections']} | "
        f"{r['load_before'][0]:.2f} → {r['load_after'][0]:.2f} | {flag} |"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=AIM_RATE, help="requests/s (default %(default)s)")
    ap.add_argument("--duration", type=float, default=30.0, help="seconds a run (default %(default)s)")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds of warm-up, not counted (default %(default)s)")
    ap.add_argument("--repeat", type=int, default=5, help="runs per variant (default %(default)s)")
    ap.add_argument("--pause", type=float, default=3.0, help="seconds between runs (default %(default)s)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="server workers, each a variant")
    ap.add_argument("--database", nargs="*", choices=("sqlite", "postgres"), default=["sqlite"])
    ap.add_argument("--pilots", type=int, default=1000, help="distinct askers (default %(default)s)")
    ap.add_argument("--sites", type=int, default=50, help="sites in the fleet (default %(default)s)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--find-max", action="store_true", help="after the runs, step the rate up to the highest passing")
    ap.add_argument("--find-max-only", action="store_true", help="only the --find-max steps")
    ap.add_argument("--max-rates", type=int, nargs="+", default=[2000, 3000, 4000, 5000, 6000, 7000, 8000, 10000])
    ap.add_argument("--step-duration", type=float, default=15.0, help="seconds a --find-max step")
    ap.add_argument("--floor", action="store_true", help="also granian with a constant-answer ASGI app (the floor)")
    ap.add_argument("--profile", action="store_true", help="the decide path in process under cProfile")
    ap.add_argument("--profile-requests", type=int, default=20000)
    ap.add_argument("--quiet-load", type=float, default=1.0, help="wait for this 1-min load before a variant")
    ap.add_argument("--max-wait", type=float, default=120.0, help="at most this many seconds of waiting")
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/controller.md and .json")
    a = ap.parse_args()
    command = "python benchmarks/controller.py " + " ".join(sys.argv[1:])
    out: dict[str, Any] = {"machine": machine(a), "command": command, "variants": []}
    print(json.dumps(out["machine"]), flush=True)
    if a.profile:
        profile(a, out)
    if a.rate > 0 and (a.repeat > 0 or a.find_max or a.find_max_only):
        for db in a.database:
            for w in a.workers:
                run_variant(a, w, db, out)
        if a.floor:
            for w in a.workers:
                run_baseline(a, w, out)
    out["load_at_end"] = os.getloadavg()
    text = markdown(out, command)
    print(text)
    if a.record:
        record(HERE / "results" / "controller.md", text)
        (HERE / "results" / "controller.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
