"""A stock factory (no pilot tracer) gets the phase views from the traces the exporter builds
from its files: real collector, Jaeger and Prometheus on 127.0.0.1.

`gwms-obs export --once` sends one trace per counted pilot (outputs/pilot_traces.py) through our
collector; its spanmetrics connector remote-writes phase histograms into Prometheus. Then every
query of the pilot-phases board returns numbers there, and `gwms-obs analyze` reads the same
traces back from Jaeger and names the entry whose validation is slow. The pilots are counted in
two scans (half of their files held back at first), as a running factory returns them: a rate
needs a counter that grew inside its window.

Needs `make otelcol jaeger` and Debian's prometheus (skipped, with the reason, without them).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dashboards import gen
from dashboards.gen import lint
from dashboards.gen import names as N
from dashboards.gen.boards.common import PHASES
from gwms_obs import catalogue
from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import ANOMALY_ENTRIES, DEFAULT_ENTRIES
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import jaeger as J
from tests.support.alert_scenario import GRAFANA_VARS, move_pilots, release
from tests.support.fleet_stack import range_query
from tests.support.servers import prom_query
from tests.test_collector_live import FAST, stack
from tests.test_pilot_traces_live import _pilots_counted
from tools import tracing_backends
from tools.polling import poll as wait_for

pytestmark = pytest.mark.live

SLOW = dataclasses.replace(ANOMALY_ENTRIES[0], slow_script_factor=20.0)  # CVMFS: validation ~3x the fleet's
HEALTHY = ("CMSHTPC_T2_US_Nebraska_red", "Fermilab_NOMATCH_ce", "CMSHTPC_T1_PREEMPT_ce", "OSG_US_GPU_ce")
ENTRIES = (*(e for e in DEFAULT_ENTRIES if e.name in HEALTHY), SLOW)
PILOTS = 160
PER_ENTRY = 8  # analyze --limit: traces per entry, enough for an entry's median (outliers.MIN_SAMPLES 5)
RATE_WINDOW = "5m"  # $__rate_interval and $__range: both scans' samples are inside it


def _binaries() -> tuple[Path, Path]:
    try:
        return tracing_backends.find_binary("otelcol", build=False), tracing_backends.find_binary("jaeger", build=False)
    except tracing_backends.ToolUnavailable as e:
        pytest.skip(f"needs `make otelcol jaeger`: {e}")


def _export_once(factory: Path, ccfg: tracing_backends.CollectorConfig, checkpoint: Path, log: Path) -> None:
    """One scan that sends its pilots' traces; pilots whose .out is not back yet wait (as on a factory)."""
    token = checkpoint.parent / "token"
    token.write_text(ccfg.token)
    cmd = [
        *(sys.executable, "-m", "gwms_obs.cli", "export", "--once", "--factory-dir", str(factory)),
        *("--checkpoint", str(checkpoint), "--settle-seconds", "0", "--lost-after-seconds", str(60 * 86400)),
        *("--traces-endpoint", ccfg.traces_url, "--traces-token-file", str(token)),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300, env=env)
    log.write_text(r.stdout + r.stderr)
    assert r.returncode == 0, r.stderr[-3000:]


def _job_id(line: str) -> str | None:
    """``C.P`` of a completed_jobs line (its id is ``"C.PPP"`` or ``"b'C.PPP'"``)."""
    m = re.search(r'id="(?:b\')?([0-9]+)\.([0-9]+)', line)
    return f"{m[1]}.{int(m[2])}" if m else None


def _untraced(factory: Path) -> int:
    """Remove the span spools the simulator gives some pilots' .err (GWMSTraceSpool, a condor
    section: its name, the encoding line, the data, "===="); returns how many there were."""
    n = 0
    for err in factory.glob("client/*/*/entry_*/job.*.err"):
        lines = err.read_text().splitlines(keepends=True)
        if f"{C.SPOOL_SECTION}\n" not in lines:
            continue
        i = lines.index(f"{C.SPOOL_SECTION}\n")
        j = next(k for k in range(i + 2, len(lines)) if lines[k].startswith("===="))
        err.write_text("".join(lines[:i] + lines[j + 1 :]))
        n += 1
    return n


def _samples(prom: str, n: int) -> None:
    """Wait until Prometheus holds ``n`` more remote-write samples of the validation phase's count."""
    q = f'count_over_time({catalogue.SPANMETRICS_CALLS}{{{N.SPAN_PHASE}="{C.LOG_PHASE_VALIDATION}"}}[10m])'

    def count() -> float:
        r = prom_query(prom, f"max({q})")
        return float(r[0]["value"][1]) if r else 0.0

    start = count()
    wait_for(f"{n} more samples in Prometheus", lambda: count() >= start + n, 60)


def _calls(prom: str, phase: str) -> float:
    r = prom_query(prom, f'sum({catalogue.SPANMETRICS_CALLS}{{{N.SPAN_PHASE}="{phase}"}})')
    return float(r[0]["value"][1]) if r else 0.0


def _finite(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The series with at least one number that is not NaN (histogram_quantile of nothing is NaN)."""

    def ok(v: str) -> bool:
        return v not in ("NaN", "+Inf", "-Inf")

    return [s for s in series if any(ok(v) for _, v in s.get("values", [s.get("value", [0, "NaN"])]))]


def test_stock_factory_fills_the_phase_board_and_analyze_names_the_slow_validation(tmp_path: Path) -> None:
    otelcol, jaeger = _binaries()
    now = time.time()
    factory, held = tmp_path / "factory", tmp_path / "held"
    simulate(factory, PILOTS, seed=31, start=now - 3 * 86400, span_hours=24, entries=ENTRIES)
    assert _untraced(factory) > 0  # a stock factory: no pilot returns a span spool
    # Every other pilot's files come back later; its completed_jobs line would count it first (the
    # others' lines stay: they name the frontends the exporter maps the client dirs to).
    outs = sorted(factory.glob("client/*/*/entry_*/job.*.out"))
    move_pilots(factory, held, outs[1::2])
    later = {".".join(o.name.split(".")[1:3]) for o in outs[1::2]}
    for f in factory.glob("server/entry_*/completed_jobs_*.log"):
        keep = [ln for ln in f.read_text().splitlines(keepends=True) if _job_id(ln) not in later]
        f.write_text("".join(keep))

    with stack(tmp_path, otelcol, jaeger, **FAST) as (ccfg, jcfg, prom):
        ck = tmp_path / "state" / "checkpoint.json"
        ck.parent.mkdir()
        _export_once(factory, ccfg, ck, tmp_path / "export1.log")
        first = _pilots_counted(ck)
        assert len(first) >= len(outs) // 2 - 2
        want_first = len(first)
        wait_for(
            "the first scan's validation phases in Prometheus",
            lambda: _calls(prom, C.LOG_PHASE_VALIDATION) >= want_first * 0.9,
            60,
        )
        before = _calls(prom, C.LOG_PHASE_VALIDATION)
        _samples(prom, 3)  # the first scan's counts, written a few times: the rates' baseline
        release(held, factory)
        _export_once(factory, ccfg, ck, tmp_path / "export2.log")
        counted = _pilots_counted(ck)
        assert len(counted) > len(first) + len(outs) // 3
        # The second scan's pilots had their event-log times held: their queue is a phase too.
        wait_for("the queue phases in Prometheus", lambda: _calls(prom, C.LOG_PHASE_QUEUED) > 0, 60)
        wait_for(
            "the second scan's phases in Prometheus",
            lambda: _calls(prom, C.LOG_PHASE_VALIDATION) > before + len(outs) // 4,
            60,
        )
        _samples(prom, 3)

        # Every query of the pilot-phases board returns numbers (the collector's spanmetrics only).
        board = json.loads(gen.render_all()[f"dashboards/grafana/{PHASES}.json"])
        empty, names = [], set()
        for where, expr in lint.dashboard_exprs(board):
            if " panel " not in where:
                continue  # the variables: the exporter's build info (no exporter here) and the entries
            assert lint.metric_names(expr) & {N.SPAN_CALLS, f"{N.SPAN_DURATION}_bucket"}, where
            q = lint.substitute(
                expr.replace("$__rate_interval", RATE_WINDOW).replace("$__range", RATE_WINDOW), GRAFANA_VARS
            )
            res = _finite(range_query(prom, q, 120))
            if not res:
                empty.append(f"{where}: {q}")
            names |= {s["metric"].get(catalogue.SPAN_LABEL_SPAN_NAME) for s in res}
        assert not empty, "pilot-phases queries without data on a stock factory:\n" + "\n".join(empty)
        # queue, validation and condor durations, and nothing that is no phase (jobs, the roots)
        assert {C.LOG_PHASE_VALIDATION, C.LOG_PHASE_CONDOR} <= names <= set(C.ALL_PHASES) | {None}, names
        # the median validation at the slow entry is over twice the healthy ones' (histogram buckets)
        p50 = prom_query(
            prom,
            f"histogram_quantile(0.5, sum by ({N.SPAN_ENTRY}, le) (increase({N.SPAN_DURATION}_bucket"
            f'{{{N.SPAN_PHASE}="{C.LOG_PHASE_VALIDATION}"}}[1h])))',
        )
        by_entry = {s["metric"][N.SPAN_ENTRY]: float(s["value"][1]) for s in p50}
        assert set(by_entry) == {e.name for e in ENTRIES}, by_entry
        assert by_entry[SLOW.name] > 2 * max(v for e, v in by_entry.items() if e != SLOW.name), by_entry

        # analyze, from these traces in Jaeger alone (the tree has no span spool: no pilot tracer)
        def all_in_jaeger() -> bool:
            return len(J.search(jcfg.query, start=now - 10 * 86400, end=now + 86400, limit=10_000)) >= len(counted)

        wait_for("every counted pilot's trace in Jaeger", all_in_jaeger, 60)
        r = subprocess.run(
            [
                *(sys.executable, "-m", "gwms_obs.cli", "analyze", "--factory-dir", str(factory)),
                *("--jaeger", jcfg.query, "--since", _day(now - 5 * 86400), "--format", "json"),
                *("--limit", str(PER_ENTRY)),
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
        )
        (tmp_path / "analyze.log").write_text(r.stdout + r.stderr)
        assert r.returncode == 0, r.stderr[-3000:]
        doc = json.loads(r.stdout)
        assert doc["spools"] == 0 and doc["jaeger_spans"] > 0, {k: doc[k] for k in ("spools", "jaeger_spans")}
        # a sample of each entry's pilots, not the busiest entries' (one search of the factory)
        per_entry = Counter(k.split("/")[0] for k in counted)
        assert doc["traced_pilots"] == {e: min(n, PER_ENTRY) for e, n in per_entry.items()}, doc["traced_pilots"]
        actions = doc["actions"]
        assert [(a["entry"], a["name"]) for a in actions] == [(SLOW.name, C.LOG_PHASE_VALIDATION)], actions
        assert actions[0]["ratio"] > 2 and actions[0]["excess_core_hours_per_week"] > 0


def _day(t: float) -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(t))
