"""Pilot traces from the factory's files (issue 31): what they cost and whether delivery holds.

    python benchmarks/pilot_traces.py cpu [--pilots 2000 --runs 9]
    python benchmarks/pilot_traces.py scan [--pilots 2000 --rounds 30]
    python benchmarks/pilot_traces.py send [--pilots 5000 --paced-spans 12000]
    python benchmarks/pilot_traces.py sustained [--minutes 15 --outage 5 --per-day 100000]

Real processes on 127.0.0.1: `gwms-obs export` as users start it, our collector
and Jaeger (the roles' configs, rendered as the tests do; Jaeger on badger, the
storage compose and Ansible deploy). Each prints a Markdown section; the
recorded ones are in benchmarks/results/pilot-traces.md.

cpu        The exporter's CPU (user + sys of the whole process, from the kernel's
           accounting of each finished child) for `export --once` on a simulated
           factory of --pilots and of 50 pilots, with pilot_traces off, on, and on
           with the Python encoder (the compiled one, native/src/trace.rs and
           pilot_trace.rs, left out; the readers stay compiled), in turn and back
           (off on py, py on off, ...), --runs rounds. Per
           pilot = (big - small) / (pilots counted in big - in small), so start-up
           cancels out; the share is also given round by round (a round's added CPU
           over its own accounting: the machine's speed wanders between rounds);
           the aim is traces' added CPU at most 20 % of the pilot's
           accounting (the scan with traces off). Then the big factory again, each
           encoder in turn, with each step of a trace timed in the scan's thread.
           The traces go to a port nothing listens on (--traces-drain-seconds 0):
           this is what building and queueing costs the scan; sending is `send`'s.
scan       The same aim with less noise: one scan of a simulated factory of
           --pilots (Ingest.scan, as the daemon builds it: its outlets, its span
           outbox never started) in this process, traces off and on in turn
           (off on, on off, ...), --rounds rounds; the CPU of each scan (the
           process's: the forwarder is not running). No start-up to cancel, no
           forwarder retrying a dead endpoint; each round's share is its added CPU
           over its own accounting.
send       The outbox a scan of --pilots leaves (export --once with no collector),
           posted by SpoolForwarder to the real collector into Jaeger: unpaced
           (spans_per_second=0) and, its oldest --paced-spans, at the forwarder's
           default pace; spans/s to the collector and until Jaeger has counted
           every span, the forwarder's CPU per span; then Jaeger's badger directory before and after, on disk
           (allocated blocks, after Jaeger stopped), scaled to 100,000 pilots.
sustained  A factory finishing --per-day pilots a day: a simulated factory's event
           logs and status files in place from the start (no completed_jobs: its
           lines would count pilots early), each pilot's .err/.out moved in at
           that rate, the daemon scanning every 60 s (its default) into
           the collector; the collector stopped for --outage minutes in the middle.
           At the end: every counted pilot has one trace in Jaeger, spans the
           exporter sent = spans the collectors accepted = spans they sent =
           spans Jaeger accepted, and every drop counter (the exporter's outbox,
           the collectors' refused/send-failed/enqueue-failed) is 0; the outbox's
           peak bytes against its bound.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from gwms_obs import catalogue  # noqa: E402
from gwms_obs.ingest import checkpoint as C  # noqa: E402
from gwms_obs.outputs import pilot_traces as P  # noqa: E402
from gwms_obs.parse_errors import ParseErrors  # noqa: E402
from gwms_obs.simulate.factory import simulate  # noqa: E402
from gwms_obs.tracing import jaeger as J  # noqa: E402
from gwms_obs.tracing import outbox as O  # noqa: E402
from tools import tracing_backends as TB  # noqa: E402
from tools.polling import http_get, poll  # noqa: E402

GWMS_OBS = [sys.executable, "-m", "gwms_obs.cli"]
SMALL = 50


def _machine() -> str:
    load = os.getloadavg()
    return (
        f"{platform.node() or 'vm'} ({os.cpu_count()} CPUs, {platform.platform()}), "
        f"load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} at start, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def _counted(checkpoint: Path, factory: Path) -> int:
    """Pilots the checkpoint counts, its journal applied as a restart would: a watching daemon's
    ticks append to the journal, so the base alone says what was counted at its last whole write."""
    state = C.load(str(checkpoint), str(factory))
    return len(state["seen"]) if state is not None else 0


# Run as `python -c _TIMED OUT_JSON ARGS...`: `gwms-obs ARGS` with the CPU time (thread_time, the
# scan's thread) of each step of a pilot's trace summed and written to OUT_JSON at exit. Only
# pilot_traces' and the outbox's own functions are wrapped, a few hundred ns a call.
_TIMED = """
import atexit, json, os, runpy, sys, time
from gwms_obs.outputs import pilot_traces as P
from gwms_obs.tracing import outbox as O
if os.environ.get("GWMS_BENCH_PYTHON_ENCODER") == "1":
    P._NATIVE = None
spent = {}
def timed(owner, attr, name):
    f = getattr(owner, attr)
    def g(*a, **k):
        t = time.thread_time()
        try:
            return f(*a, **k)
        finally:
            spent[name] = spent.get(name, 0.0) + time.thread_time() - t
    setattr(owner, attr, g)
timed(P, "encode", "build")
timed(P.PilotTraces, "__call__", "sink")
timed(P.PilotTraces, "_live", "ledger")
timed(P.PilotTraces, "flush", "flush")
timed(O.SpoolForwarder, "enqueue", "outbox")
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(spent)))
sys.argv = ["gwms-obs", *sys.argv[2:]]
runpy.run_module("gwms_obs.cli", run_name="__main__")
"""
# Run as `python -c _PY_ENCODER ARGS...`: `gwms-obs ARGS` with the pilot traces written by the Python
# encoder (the compiled readers still on), to compare the compiled encoder with in the same rounds.
_PY_ENCODER = """
import runpy, sys
from gwms_obs.outputs import pilot_traces as P
P._NATIVE = None
sys.argv = ["gwms-obs", *sys.argv[1:]]
runpy.run_module("gwms_obs.cli", run_name="__main__")
"""


def _export_once(
    factory: Path,
    work: Path,
    traces: bool,
    endpoint: str,
    outbox: Path | None = None,
    timed: Path | None = None,
    python_encoder: bool = False,
) -> tuple[float, int]:
    """CPU seconds (user + sys) of one `export --once` from no checkpoint, and the pilots it counted
    (``timed``: run under _TIMED, which writes there where a trace's CPU went; ``python_encoder``:
    under _PY_ENCODER)."""
    ck = work / "ck" / "checkpoint.json"
    shutil.rmtree(ck.parent, ignore_errors=True)
    ck.parent.mkdir(parents=True)
    cfg = work / f"traces-{'on' if traces else 'off'}.toml"
    cfg.write_text(f"pilot_traces = {'true' if traces else 'false'}\n")
    token = work / "token"
    token.write_text("bench-token-0123456789\n")
    cmd = [
        *GWMS_OBS, "export", "--once", "--config", str(cfg), "--factory-dir", str(factory),
        "--checkpoint", str(ck), "--settle-seconds", "0", "--lost-after-seconds", "0",
        "--traces-endpoint", endpoint, "--traces-token-file", str(token), "--traces-drain-seconds", "0",
    ]  # fmt: skip
    if outbox is not None:
        cmd += ["--traces-outbox", str(outbox)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if timed is not None:
        cmd = [sys.executable, "-c", _TIMED, str(timed), *cmd[len(GWMS_OBS) :]]
        env["GWMS_BENCH_PYTHON_ENCODER"] = "1" if python_encoder else "0"
    elif python_encoder:
        cmd = [sys.executable, "-c", _PY_ENCODER, *cmd[len(GWMS_OBS) :]]
    with open(work / "export.log", "ab") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"export exited {p.returncode}; see {work / 'export.log'}")
    return ru.ru_utime + ru.ru_stime, _counted(ck, factory)


def cpu(a: argparse.Namespace, work: Path) -> str:
    big, small = work / "big", work / "small"
    simulate(big, a.pilots, seed=1)
    simulate(small, SMALL, seed=1)
    dead = f"http://127.0.0.1:{TB.free_port()}/v1/traces"  # nothing listens: building and queueing only
    # modes: traces off, on (the compiled encoder where installed), on with the Python encoder
    modes = ("off", "on", "python")
    runs: dict[tuple[str, str], list[float]] = {(f, m): [] for f in ("big", "small") for m in modes}
    counted: dict[str, int] = {}
    for r in range(a.runs):
        # the modes in turn, back and forth (off on py, py on off, ...): a machine slowing down
        # over a round weighs on each mode alike
        for mode in modes if r % 2 == 0 else modes[::-1]:
            for name, factory in (("big", big), ("small", small)):
                s, n = _export_once(factory, work, mode != "off", dead, python_encoder=mode == "python")
                runs[(name, mode)].append(s)
                counted[name] = n
    # Where a trace's CPU goes: the big factory again, traces on, each step timed in the process,
    # with either encoder in turn.
    steps: dict[str, list[dict[str, float]]] = {"on": [], "python": []}
    for i in range(a.runs):
        for mode, steps_of in steps.items():
            _export_once(big, work, True, dead, timed=work / f"timed-{i}.json", python_encoder=mode == "python")
            steps_of.append(json.loads((work / f"timed-{i}.json").read_text()))
    med = {k: statistics.median(v) for k, v in runs.items()}
    pilots = counted["big"] - counted["small"]

    def per_pilot_of(mode: str) -> float:
        return (med[("big", mode)] - med[("small", mode)]) / pilots

    off, on, py = per_pilot_of("off"), per_pilot_of("on"), per_pilot_of("python")

    # The same, pair by pair (the runs of one round were taken back to back).
    def added_pairs(mode: str) -> str:
        def big_less_small(m: str, i: int) -> float:
            return runs[("big", m)][i] - runs[("small", m)][i]

        xs = sorted((big_less_small(mode, i) - big_less_small("off", i)) / pilots for i in range(a.runs))
        return ", ".join(f"{x * 1e6:.0f}" for x in xs)

    # The share round by round: a round's added CPU over its own accounting. This VM's speed wanders
    # by ±20 % between runs (the host's other guests); within a round both move together.
    def shares(mode: str) -> list[float]:
        def big_less_small(m: str, i: int) -> float:
            return runs[("big", m)][i] - runs[("small", m)][i]

        return sorted(
            (big_less_small(mode, i) - big_less_small("off", i)) / big_less_small("off", i) * 100 for i in range(a.runs)
        )

    encoder = "compiled encoder" if P._NATIVE is not None else "Python encoder: no compiled module here"
    rows = [
        f"`python benchmarks/pilot_traces.py cpu --pilots {a.pilots} --runs {a.runs}` on {_machine()}.",
        "",
        f"| `export --once`, CPU s (median of runs: min-max) | traces off | traces on ({encoder}) "
        "| traces on, Python encoder |",
        "|---|---|---|---|",
    ]
    for name in ("big", "small"):
        cells = [f"{med[(name, m)]:.2f} ({min(runs[(name, m)]):.2f}-{max(runs[(name, m)]):.2f})" for m in modes]
        rows.append(f"| {counted[name]} pilots counted | {' | '.join(cells)} |")
    rows += [
        "",
        f"- the pilot's accounting (scan with traces off), per pilot: **{off * 1e6:.0f} us**",
        f"- added by its trace (on - off), per pilot: **{(on - off) * 1e6:.0f} us** = "
        f"**{(on - off) / off * 100:.0f} %** of its accounting (aim: at most 20 %); with the Python encoder "
        f"{(py - off) * 1e6:.0f} us = {(py - off) / off * 100:.0f} %",
        f"- the added CPU round by round: {added_pairs('on')} us (Python encoder: {added_pairs('python')} us)",
        f"- the share round by round (each round's added CPU over its own accounting): "
        f"{', '.join(f'{x:.0f}' for x in shares('on'))} %, median **{statistics.median(shares('on')):.1f} %** "
        f"(Python encoder: median {statistics.median(shares('python')):.1f} %)",
        "",
        f"Where it goes: the {counted['big']}-pilot factory again, traces on, {a.runs} runs of each encoder in "
        "turn with each step's CPU (the scan thread's) summed in the process; us per pilot counted, median (min-max):",
        "",
        f"| step | {encoder} | Python encoder |",
        "|---|---|---|",
    ]

    def per_pilot(key: str) -> str:
        cells = []
        for runs_of in steps.values():
            xs = [x.get(key, 0.0) / counted["big"] * 1e6 for x in runs_of]
            cells.append(f"{statistics.median(xs):.0f} ({min(xs):.0f}-{max(xs):.0f})")
        return " | ".join(cells)

    rows += [
        f"| the trace sink, all of it (`PilotTraces.__call__`) | {per_pilot('sink')} |",
        f"| - building the spans, OTLP/JSON text (`encode`) | {per_pilot('build')} |",
        f"| - the live-trace ledger look-up (`_live`) | {per_pilot('ledger')} |",
        f"| - writing the requests into the outbox (`flush`) | {per_pilot('flush')} |",
        f"| -- of which the outbox's own (`SpoolForwarder.enqueue`: a file each 200 pilots) | {per_pilot('outbox')} |",
    ]
    return "\n".join(rows)


def scan(a: argparse.Namespace, work: Path) -> str:
    """The scan alone, in this process: traces off and on in turn, --rounds rounds (see the docstring)."""
    import gc
    import logging

    from gwms_obs.config import from_dict
    from gwms_obs.daemon import Delivery, export_outlets, pilot_traces, span_forwarder
    from gwms_obs.ingest.config import IngestConfig
    from gwms_obs.pipeline import Ingest

    factory = work / "factory"
    simulate(factory, a.pilots, seed=1)
    # what the scans log goes where the daemon's would, a file (here: the work dir), not the terminal
    logging.basicConfig(filename=work / "scan.log", level=logging.INFO, force=True)
    gc_cpu = [0.0, 0.0]  # total, start of the collection under way

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_cpu[1] = time.process_time()
        else:
            gc_cpu[0] += time.process_time() - gc_cpu[1]

    gc.callbacks.append(on_gc)
    cpu_of: dict[str, list[float]] = {"off": [], "on": []}
    gc_of: dict[str, list[float]] = {"off": [], "on": []}
    pilots = 0
    for r in range(a.rounds):
        for mode in ("off", "on") if r % 2 == 0 else ("on", "off"):
            run_dir = work / f"run-{r}-{mode}"
            errors = ParseErrors()
            # the daemon's span forwarder, never started (a dead endpoint): building and queueing only
            dead = f"http://127.0.0.1:{TB.free_port()}/v1/traces"
            forwarder = span_forwarder(Delivery(endpoint=dead), str(run_dir / "checkpoint.json"), errors)
            traces = pilot_traces(from_dict({"factory_name": "bench"}), errors, forwarder) if mode == "on" else None
            cfg = IngestConfig(
                str(factory), checkpoint=str(run_dir / "checkpoint.json"), settle_seconds=0, final=True,
                lost_after_seconds=0,
            )  # fmt: skip
            ingest = Ingest(cfg, outlets=export_outlets(forwarder, traces), errors=errors)
            gc.collect()
            gc_cpu[0] = 0.0
            t = time.process_time()
            pilots = ingest.scan().pilots
            if traces is not None:
                traces.flush()
            cpu_of[mode].append(time.process_time() - t)
            gc_of[mode].append(gc_cpu[0])
            ingest.close()
            shutil.rmtree(run_dir)
    gc.callbacks.remove(on_gc)
    off, on = cpu_of["off"], cpu_of["on"]
    shares = sorted((b - a_) / a_ * 100 for a_, b in zip(off, on, strict=True))
    added = sorted((b - a_) / pilots * 1e6 for a_, b in zip(off, on, strict=True))
    med = statistics.median
    return "\n".join(
        [
            f"`python benchmarks/pilot_traces.py scan --pilots {a.pilots} --rounds {a.rounds}` on {_machine()}.",
            "",
            f"| one scan of {pilots} pilots, CPU s | median | min | max |",
            "|---|---|---|---|",
            f"| traces off | {med(off):.3f} | {min(off):.3f} | {max(off):.3f} |",
            f"| traces on | {med(on):.3f} | {min(on):.3f} | {max(on):.3f} |",
            f"| - of which Python's garbage collector, off / on "
            f"| {med(gc_of['off']):.3f} / {med(gc_of['on']):.3f} | | |",
            "",
            f"- the pilot's accounting (the scan, traces off), per pilot: **{med(off) / pilots * 1e6:.0f} us**",
            f"- added by its trace, round by round (on - off of one round): median **{med(added):.0f} us** a pilot "
            f"(quartiles {added[len(added) // 4]:.0f}-{added[3 * len(added) // 4]:.0f})",
            f"- the share round by round (a round's added CPU over its own accounting): median **{med(shares):.1f} %** "
            f"(quartiles {shares[len(shares) // 4]:.1f}-{shares[3 * len(shares) // 4]:.1f} %; aim: at most 20 %)",
        ]
    )


@contextlib.contextmanager
def _backends(work: Path, storage: str = "badger") -> Iterator[tuple[TB.CollectorConfig, TB.JaegerConfig, Path, Path]]:
    otelcol, jaeger = TB.find_binary("otelcol", build=False), TB.find_binary("jaeger", build=False)
    jcfg = TB.jaeger_config(work / "jaeger", storage=storage)
    ccfg = TB.collector_config(
        work / "col",
        jaeger_otlp_grpc=jcfg.otlp_grpc,
        remote_write_url=f"http://127.0.0.1:{TB.free_port()}/api/v1/write",
    )
    yield ccfg, jcfg, otelcol, jaeger


def _disk_bytes(d: Path) -> int:
    """Bytes allocated on disk under ``d`` (badger preallocates sparse files: st_size would overstate)."""
    return sum(p.stat().st_blocks * 512 for p in d.rglob("*") if p.is_file())


def _outbox_spans(outbox: Path) -> tuple[int, int, int]:
    files = list(outbox.glob(f"{O.OUTBOX_PREFIX}*.json"))
    spans = sum(int(p.name.rsplit("-", 1)[1].removesuffix(".json")) for p in files)
    return len(files), spans, sum(p.stat().st_size for p in files)


def _forward(
    outbox: Path, ccfg: TB.CollectorConfig, jcfg: TB.JaegerConfig, spans: int, pace: float | None
) -> dict[str, float]:
    kw: dict[str, Any] = {} if pace is None else {"spans_per_second": pace}
    fw = O.SpoolForwarder(ccfg.traces_url, outbox, ParseErrors(), token=ccfg.token, **kw)
    before = TB.metric_sum(TB.scrape(jcfg.telemetry), catalogue.OTELCOL_ACCEPTED_SPANS)
    c0, t0 = time.process_time(), time.perf_counter()
    ok = fw.send_once()
    send_s, cpu_s = time.perf_counter() - t0, time.process_time() - c0

    def in_jaeger() -> bool:
        return TB.metric_sum(TB.scrape(jcfg.telemetry), catalogue.OTELCOL_ACCEPTED_SPANS) - before >= spans

    poll("every span in Jaeger", in_jaeger, 900, step=0.05)
    e2e = time.perf_counter() - t0
    assert ok and not fw.pending(), "the outbox was not emptied"
    assert fw.stats.sent_spans == spans, (fw.stats.sent_spans, spans)
    return {"send_s": send_s, "e2e_s": e2e, "cpu_us_per_span": cpu_s / spans * 1e6, "requests": fw.stats.sent_requests}


def send(a: argparse.Namespace, work: Path) -> str:
    factory, outbox = work / "factory", work / "outbox"
    simulate(factory, a.pilots, seed=2)
    _, pilots = _export_once(factory, work, True, f"http://127.0.0.1:{TB.free_port()}/v1/traces", outbox)
    files, spans, size = _outbox_spans(outbox)
    paced_default = getattr(O, "SPANS_PER_SECOND", None)
    rows = [
        f"`python benchmarks/pilot_traces.py send --pilots {a.pilots} --paced-spans {a.paced_spans}` on {_machine()}.",
        "",
        f"The outbox of one scan: {pilots} pilots counted, {spans} spans ({spans / pilots:.1f} a pilot) in {files} "
        f"requests, {size / 1e6:.1f} MB ({size / pilots / 1e3:.1f} KB a pilot).",
        "",
        "| forwarder | to the collector | until Jaeger counted every span | forwarder CPU |",
        "|---|---|---|---|",
    ]
    with _backends(work) as (ccfg, jcfg, otelcol, jaeger):
        badger = Path(jcfg.values["jaeger_badger_dir"])
        modes: list[tuple[str, float | None]] = [("unpaced", 0.0 if paced_default is not None else None)]
        if paced_default is not None:
            modes.append((f"paced (default {paced_default:g} spans/s)", None))
        for i, (label, pace) in enumerate(modes):
            copy = work / f"outbox-{i}"
            shutil.copytree(outbox, copy)
            n = spans
            if i > 0:  # paced: the oldest requests up to --paced-spans (the whole outbox would take minutes)
                n = 0
                for f in sorted(copy.glob(f"{O.OUTBOX_PREFIX}*.json")):
                    if n >= a.paced_spans:
                        f.unlink()
                    else:
                        n += int(f.name.rsplit("-", 1)[1].removesuffix(".json"))
            with TB.run(jaeger, jcfg.path, jcfg.health, work / "jaeger.log"):
                if i == 0:
                    empty = _disk_bytes(badger)
                with TB.run(otelcol, ccfg.path, ccfg.health, work / "otelcol.log"):
                    r = _forward(copy, ccfg, jcfg, n, pace)
                if i == 0:
                    jaeger_traces = len(_searchable(jcfg, pilots))
            if i == 0:
                stored = _disk_bytes(badger) - empty  # after Jaeger stopped: its memtables are on disk
            rows.append(
                f"| {label}, {n} spans | {n / r['send_s']:,.0f} spans/s "
                f"({r['send_s']:.1f} s, {r['requests']:.0f} posts) "
                f"| {n / r['e2e_s']:,.0f} spans/s ({r['e2e_s']:.1f} s) | {r['cpu_us_per_span']:.1f} us a span |"
            )
    rows += [
        "",
        f"Jaeger (badger, as deployed) held {jaeger_traces} traces after the first pass; its directory grew "
        f"{stored / 1e6:.1f} MB on disk (allocated blocks, Jaeger stopped): **{stored / pilots * 1e5 / 1e9:.2f} GB "
        f"per 100,000 pilots** ({stored / spans:.0f} bytes a span). The second pass sent the same ids again.",
    ]
    return "\n".join(rows)


def _searchable(jcfg: TB.JaegerConfig, pilots: int) -> list[dict[str, Any]]:
    """Jaeger's traces once its search finds ``pilots`` of them (it indexes a few seconds after it
    counts a span accepted), or what it finds after 120 s."""

    def search() -> list[dict[str, Any]]:
        # a search of every trace: slow on a loaded machine (30 s did not do under load 15)
        return J.search(jcfg.query, start=0, end=time.time() + 86400, limit=10 * pilots, timeout=600)

    def all_found() -> list[dict[str, Any]] | None:
        found = search()
        return found if len(found) >= pilots else None

    with contextlib.suppress(TimeoutError):
        return poll("every trace in Jaeger's search", all_found, 120, 1)
    return search()


def _trickle_factory(stage: Path, factory: Path) -> list[tuple[Path, Path]]:
    """The event logs and status files in place; the (.err, .out) pairs to move in, oldest cluster first.
    No completed_jobs file: its lines would count the pilots whose .out has not come yet."""
    pairs: list[tuple[Path, Path]] = []
    for src in sorted(stage.rglob("*")):
        rel = src.relative_to(stage)
        if src.is_dir():
            (factory / rel).mkdir(parents=True, exist_ok=True)
        elif src.name.startswith("completed_jobs_"):
            continue
        elif src.name.startswith("job.") and src.suffix in (".out", ".err"):
            if src.suffix == ".out":
                pairs.append((src.with_suffix(".err"), src))
        else:
            shutil.copy2(src, factory / rel)
    return sorted(pairs, key=lambda p: tuple(int(x) for x in p[1].name.split(".")[1:3]))


def sustained(a: argparse.Namespace, work: Path) -> str:
    stage, factory = work / "stage", work / "factory"
    rate = a.per_day / 86400.0
    duration = a.minutes * 60.0
    need = int(rate * duration * 1.3) + 50  # pilots with no .out (queued, lost) are not moved
    summary = simulate(stage, need, seed=3, end=time.time(), ground_truth=True)
    pairs = _trickle_factory(stage, factory)
    ck = work / "state" / "checkpoint.json"
    ck.parent.mkdir(parents=True)
    # The factory names a user's frontend only in its completed_jobs lines, which are left out here
    # (they would count pilots before their .out arrives): without [clients] every pilot waits
    # lost_after_seconds for its frontend's name, as a factory with no completed_jobs line yet does.
    clients = {p.username: p.client for p in summary.ground_truth or []}
    cfg = work / "exporter.toml"
    cfg.write_text("[clients]\n" + "".join(f'{u} = "{c}"\n' for u, c in sorted(clients.items())))
    outbox = Path(f"{ck}.traces")
    port = TB.free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    samples: list[dict[str, float]] = []
    collectors: list[dict[str, float]] = []  # each collector process's final telemetry
    with _backends(work) as (ccfg, jcfg, otelcol, jaeger), TB.run(jaeger, jcfg.path, jcfg.health, work / "jaeger.log"):
        token = work / "token"
        token.write_text(ccfg.token)
        cmd = [
            *GWMS_OBS, "export", "--config", str(cfg), "--factory-dir", str(factory), "--checkpoint", str(ck),
            "--listen", f"127.0.0.1:{port}", "--interval", "60", "--lost-after-seconds", "1000000000",
            "--traces-endpoint", ccfg.traces_url, "--traces-token-file", str(token),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        col = contextlib.ExitStack()
        col.enter_context(TB.run(otelcol, ccfg.path, ccfg.health, work / "otelcol.log"))
        log = open(work / "export.log", "wb")  # noqa: SIM115 - the daemon's whole life
        daemon = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            poll("the exporter's /metrics", lambda: http_get(url), 120, step=0.5)
            t0 = time.monotonic()
            out_at, out_until = t0 + (duration - a.outage * 60) / 2, t0 + (duration + a.outage * 60) / 2
            moved, down, peak = 0, False, 0
            while (now := time.monotonic()) < t0 + duration:
                while moved < len(pairs) and moved < (now - t0) * rate:
                    for src in pairs[moved]:  # .err first: the .out is what a scan counts
                        shutil.move(src, factory / src.relative_to(stage))
                    moved += 1
                if not down and out_at <= now < out_until:
                    collectors.append(TB.scrape(ccfg.telemetry))
                    col.close()
                    down = True
                elif down and now >= out_until:
                    col = contextlib.ExitStack()
                    col.enter_context(TB.run(otelcol, ccfg.path, ccfg.health, work / "otelcol.log"))
                    down = False
                peak = max(peak, _outbox_bytes(outbox))
                if not samples or now - samples[-1]["t"] >= 10:
                    samples.append({"t": now, "moved": moved, "outbox": _outbox_bytes(outbox), "down": down})
                time.sleep(0.2)
            assert not down
            # The last pilots: one more scan, then the outbox drained into the collector.
            last = _scrape_exporter(url)["scan_ts"]
            poll("a scan after the last pilot", lambda: _scrape_exporter(url)["scan_ts"] > last, 120, step=1)
            poll("the outbox emptied", lambda: _outbox_bytes(outbox) == 0, 900, step=1)
            exp = _scrape_exporter(url)

            def in_jaeger() -> bool:
                return TB.metric_sum(TB.scrape(jcfg.telemetry), catalogue.OTELCOL_ACCEPTED_SPANS) >= exp["sent"]

            # Not an error here: the table shows what arrived where.
            with contextlib.suppress(TimeoutError):
                poll("every span the exporter sent in Jaeger", in_jaeger, 300, step=1)
            collectors.append(TB.scrape(ccfg.telemetry))
            # the daemon's own count: its checkpoint on disk lags by up to CHECKPOINT_SECONDS (the journal)
            counted = int(_scrape_exporter(url)["pilots"])
            traces = _searchable(jcfg, counted)
            jaeger_accepted = TB.metric_sum(TB.scrape(jcfg.telemetry), catalogue.OTELCOL_ACCEPTED_SPANS)
        finally:
            daemon.terminate()
            daemon.wait(60)
            log.close()
            col.close()
    elapsed = duration / 60
    jaeger_spans = sum(len(t["spans"]) for t in traces)
    by_pilot = len({t["traceID"] for t in traces})

    def csum(name: str) -> float:
        return sum(TB.metric_sum(c, name) for c in collectors)

    rows = [
        f"`python benchmarks/pilot_traces.py sustained --minutes {a.minutes:g} --outage {a.outage:g} "
        f"--per-day {a.per_day}` on {_machine()}.",
        "",
        f"{moved} pilots' files moved in over {elapsed:.0f} minutes ({rate:.2f} pilots/s, {a.per_day:,} a day); "
        f"the daemon scanning every 60 s; the collector stopped for {a.outage:g} minutes in the middle.",
        "",
        "| | |",
        "|---|---|",
        f"| pilots counted / traces in Jaeger (one each) | {counted} / {by_pilot} |",
        f"| spans the exporter sent (mean over the run) | {exp['sent']:.0f} ({exp['sent'] / duration:.1f} spans/s) |",
        f"| collectors accepted / sent to Jaeger / Jaeger accepted / spans in Jaeger's API | "
        f"{csum(catalogue.OTELCOL_ACCEPTED_SPANS):.0f} / {csum(catalogue.OTELCOL_SENT_SPANS):.0f} / "
        f"{jaeger_accepted:.0f} / {jaeger_spans} |",
        f"| collectors refused / send failed / enqueue failed | {csum(catalogue.OTELCOL_REFUSED_SPANS):.0f} / "
        f"{csum(catalogue.OTELCOL_SEND_FAILED_SPANS):.0f} / {csum(catalogue.OTELCOL_ENQUEUE_FAILED_SPANS):.0f} |",
        f"| exporter: posts failed during the outage (retried) / spans dropped / spools dropped | "
        f"{exp['failed']:.0f} / {exp['dropped_spans']:.0f} / {exp['dropped_spools']:.0f} |",
        f"| outbox peak / its bound | {peak / 1e6:.2f} MB / {O.MAX_OUTBOX_BYTES / 2**20:.0f} MiB |",
        "",
        "Outbox every minute (MB; * collector down): "
        + ", ".join(f"{s['outbox'] / 1e6:.2f}{'*' if s['down'] else ''}" for s in samples[::6]),
    ]
    return "\n".join(rows)


def _outbox_bytes(outbox: Path) -> int:
    total = 0
    for p in outbox.glob(f"{O.OUTBOX_PREFIX}*.json"):
        with contextlib.suppress(FileNotFoundError):
            total += p.stat().st_size
    return total


def _scrape_exporter(url: str) -> dict[str, float]:
    s = TB.scrape(url)
    return {
        "scan_ts": TB.metric_sum(s, "gwms_obs_last_scan_timestamp_seconds"),
        "pilots": TB.metric_sum(s, catalogue.PILOTS.name),  # counted, as the daemon's ledger says now
        "sent": TB.metric_sum(s, catalogue.TRACE_SPANS.name, result="sent"),
        "dropped_spans": TB.metric_sum(s, catalogue.TRACE_SPANS.name, result="dropped"),
        "dropped_spools": TB.metric_sum(s, catalogue.TRACE_SPOOLS.name, result="dropped"),
        "failed": TB.metric_sum(s, catalogue.TRACE_REQUESTS.name, result="failed"),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", help="a new directory to work in and keep (default: a temporary one, removed)")
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("cpu")
    c.add_argument("--pilots", type=int, default=2000)
    c.add_argument("--runs", type=int, default=9)
    n = sub.add_parser("scan")
    n.add_argument("--pilots", type=int, default=2000)
    n.add_argument("--rounds", type=int, default=30)
    s = sub.add_parser("send")
    s.add_argument("--pilots", type=int, default=5000)
    s.add_argument("--paced-spans", type=int, default=12_000, help="spans of the paced pass (default 12000)")
    u = sub.add_parser("sustained")
    u.add_argument("--minutes", type=float, default=15)
    u.add_argument("--outage", type=float, default=5)
    u.add_argument("--per-day", type=int, default=100_000)
    a = p.parse_args()
    run = {"cpu": cpu, "scan": scan, "send": send, "sustained": sustained}[a.what]
    if a.work:  # kept, logs and all
        Path(a.work).mkdir(parents=True)
        print(run(a, Path(a.work)))
        return 0
    with tempfile.TemporaryDirectory(prefix="gwms-bench-traces-") as tmp:
        print(run(a, Path(tmp)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
