"""A stock factory (no pilot tracer) gets the phase views from the traces the exporter builds
from its files: real collector, Jaeger and Prometheus on 127.0.0.1.

`gwms-obs export --once` sends one trace per counted pilot (outputs/pilot_traces.py) through our
collector; its spanmetrics connector remote-writes phase histograms into Prometheus. Then every
query of the pilot-phases board returns numbers there, and `gwms-obs analyze` reads the same
traces back from Jaeger and names the entry whose validation is slow. The pilots are counted in
two scans (half of their files held back at first), as a running factory returns them: a rate
needs a counter that grew inside its window.

Two such factories on one Prometheus (issue 31): their traces through the same collector, their
entries of the same names. The span series carry each pilot's factory (the gwms.factory dimension,
label gwms_factory), so with a factory chosen in the boards' variable every pilot-phases query
returns numbers, and only that factory's.

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
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from dashboards import gen
from dashboards.gen import lint
from dashboards.gen import names as N
from dashboards.gen.boards.common import PHASES
from gwms_obs import catalogue
from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import ANOMALY_ENTRIES, DEFAULT_ENTRIES, EntrySpec
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import jaeger as J
from tests.support.alert_scenario import GRAFANA_VARS, move_pilots, release
from tests.support.fleet_stack import range_query
from tests.support.servers import prom_query
from tests.test_collector_live import FAST, stack
from tests.test_pilot_traces_live import _pilots_counted
from tools import tracing_backends
from tools.polling import http_get
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


@dataclasses.dataclass(frozen=True)
class _Stock:
    """A simulated stock factory (no span spool in any .err) whose pilots come back in two scans."""

    root: Path
    factory: Path
    held: Path  # every other pilot's files until the second scan
    outs: int  # its pilots' .out files
    name: str | None  # its traces' gwms.factory, export's factory_name (None: descript.xml's FactoryName)

    @property
    def checkpoint(self) -> Path:
        return self.root / "state" / "checkpoint.json"


def _stock(root: Path, seed: int, entries: Sequence[EntrySpec], now: float, name: str | None = None) -> _Stock:
    factory, held = root / "factory", root / "held"
    simulate(factory, PILOTS, seed=seed, start=now - 3 * 86400, span_hours=24, entries=entries)
    assert _untraced(factory) > 0  # a stock factory: no pilot returns a span spool
    # Every other pilot's files come back later; its completed_jobs line would count it first (the
    # others' lines stay: they name the frontends the exporter maps the client dirs to).
    outs = sorted(factory.glob("client/*/*/entry_*/job.*.out"))
    move_pilots(factory, held, outs[1::2])
    later = {".".join(o.name.split(".")[1:3]) for o in outs[1::2]}
    for f in factory.glob("server/entry_*/completed_jobs_*.log"):
        keep = [ln for ln in f.read_text().splitlines(keepends=True) if _job_id(ln) not in later]
        f.write_text("".join(keep))
    (root / "state").mkdir()
    return _Stock(root, factory, held, len(outs), name)


def _export_once(st: _Stock, ccfg: tracing_backends.CollectorConfig, scan: int) -> None:
    """One scan that sends its pilots' traces; pilots whose .out is not back yet wait (as on a factory)."""
    token = st.checkpoint.parent / "token"
    token.write_text(ccfg.token)
    cmd = [
        *(sys.executable, "-m", "gwms_obs.cli", "export", "--once", "--factory-dir", str(st.factory)),
        *("--checkpoint", str(st.checkpoint), "--settle-seconds", "0", "--lost-after-seconds", str(60 * 86400)),
        *("--traces-endpoint", ccfg.traces_url, "--traces-token-file", str(token)),
    ]
    if st.name is not None:
        config = st.root / "exporter.toml"
        config.write_text(f'factory_dir = "{st.factory}"\nfactory_name = "{st.name}"\n')
        cmd += ["--config", str(config)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300, env=env)
    (st.root / f"export{scan}.log").write_text(r.stdout + r.stderr)
    assert r.returncode == 0, r.stderr[-3000:]


def _scan_twice(stocks: Sequence[_Stock], ccfg: tracing_backends.CollectorConfig, prom: str) -> list[set[str]]:
    """Each factory's two scans, their phases in Prometheus after each (a rate needs a counter that
    grew inside its window); the pilots each counted."""
    firsts = []
    for st in stocks:
        _export_once(st, ccfg, 1)
        first = _pilots_counted(st.checkpoint)
        assert len(first) >= st.outs // 2 - 2
        firsts.append(first)
    before = []
    for st, first in zip(stocks, firsts, strict=True):
        want = len(first)
        wait_for(
            f"the first scan's validation phases of {st.name} in Prometheus",
            _reached(prom, C.LOG_PHASE_VALIDATION, st.name, want * 0.9),
            60,
        )
        before.append(_calls(prom, C.LOG_PHASE_VALIDATION, st.name))
    _samples(prom, 3)  # the first scans' counts, written a few times: the rates' baseline
    counted = []
    for st, first in zip(stocks, firsts, strict=True):
        release(st.held, st.factory)
        _export_once(st, ccfg, 2)
        counted.append(_pilots_counted(st.checkpoint))
        assert len(counted[-1]) > len(first) + st.outs // 3
    for st, was in zip(stocks, before, strict=True):
        # The second scan's pilots had their event-log times held: their queue is a phase too.
        wait_for(f"the queue phases of {st.name} in Prometheus", _reached(prom, C.LOG_PHASE_QUEUED, st.name, 1), 60)
        wait_for(
            f"the second scan's phases of {st.name} in Prometheus",
            _reached(prom, C.LOG_PHASE_VALIDATION, st.name, was + st.outs // 4 + 1),
            60,
        )
    _samples(prom, 3)
    return counted


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


def _calls(prom: str, phase: str, factory: str | None = None) -> float:
    """Spans of ``phase`` in Prometheus; of one factory's pilots when ``factory`` names it."""
    of = f',{N.SPAN_FACTORY}="{factory}"' if factory is not None else ""
    r = prom_query(prom, f'sum({catalogue.SPANMETRICS_CALLS}{{{N.SPAN_PHASE}="{phase}"{of}}})')
    return float(r[0]["value"][1]) if r else 0.0


def _reached(prom: str, phase: str, factory: str | None, count: float) -> Callable[[], bool]:
    """Whether Prometheus holds at least ``count`` spans of ``phase`` (of ``factory``'s pilots)."""
    return lambda: _calls(prom, phase, factory) >= count


def _phase_panels() -> Iterator[tuple[str, str]]:
    """(where, expr) of every panel query of the pilot-phases board: each reads the span metrics only."""
    board = json.loads(gen.render_all()[f"dashboards/grafana/{PHASES}.json"])
    for where, expr in lint.dashboard_exprs(board):
        if " panel " not in where:
            continue  # the variables: the exporter's build info (no exporter here) and the entries
        assert lint.metric_names(expr) & {N.SPAN_CALLS, f"{N.SPAN_DURATION}_bucket"}, where
        yield where, expr


def _query(expr: str, factory: str = ".*") -> str:
    """A panel's query as Grafana sends it, with ``factory`` chosen in the factory variable (All: .*)."""
    expr = expr.replace("$__rate_interval", RATE_WINDOW).replace("$__range", RATE_WINDOW)
    return lint.substitute(expr, {**GRAFANA_VARS, catalogue.FACTORY_LABEL: factory})


def _finite(series: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The series with at least one number that is not NaN (histogram_quantile of nothing is NaN)."""

    def ok(v: str) -> bool:
        return v not in ("NaN", "+Inf", "-Inf")

    return [s for s in series if any(ok(v) for _, v in s.get("values", [s.get("value", [0, "NaN"])]))]


def test_stock_factory_fills_the_phase_board_and_analyze_names_the_slow_validation(tmp_path: Path) -> None:
    otelcol, jaeger = _binaries()
    now = time.time()
    stock = _stock(tmp_path, 31, ENTRIES, now)
    factory = stock.factory

    with stack(tmp_path, otelcol, jaeger, **FAST) as (ccfg, jcfg, prom):
        (counted,) = _scan_twice([stock], ccfg, prom)

        # Every query of the pilot-phases board returns numbers (the collector's spanmetrics only).
        empty, names = [], set()
        for where, expr in _phase_panels():
            q = _query(expr)
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


FACTORIES = ("factory-a", "factory-b")
PER_SECOND = "Phases per second"  # the board's one additive panel: rates summed by phase and status


def _instant(prom: str, expr: str, at: float) -> dict[tuple[str, str], float]:
    """``expr`` at ``at``, by (span_name, status_code): the same instant for every factory chosen."""
    doc = json.loads(http_get(f"{prom}/api/v1/query?" + urllib.parse.urlencode({"query": expr, "time": at})))
    assert doc["status"] == "success", doc
    m = catalogue.SPAN_LABEL_SPAN_NAME, catalogue.SPAN_LABEL_STATUS
    return {(s["metric"][m[0]], s["metric"][m[1]]): float(s["value"][1]) for s in doc["data"]["result"]}


def test_two_factories_on_one_prometheus_each_chosen_gets_only_its_phases(tmp_path: Path) -> None:
    """Issue 31: two stock factories' pilot traces through one real collector into one real
    Prometheus, entries of the same names at both (factory-b without the slow one). With each factory
    chosen in the boards' factory variable, every pilot-phases query has numbers, every series that
    names a factory or an entry is that factory's (the slow entry only at factory-a), and the phase
    rates of the two add up to All's, each a part of it. Without the gwms.factory dimension, or with
    the panels matching the exporter's factory label, which remote-written series lack, a chosen
    factory's queries are empty."""
    otelcol, jaeger = _binaries()
    now = time.time()
    entries = {FACTORIES[0]: ENTRIES, FACTORIES[1]: tuple(e for e in ENTRIES if e is not SLOW)}
    stocks = [_stock(tmp_path / n, 41 + i, entries[n], now, n) for i, n in enumerate(FACTORIES)]
    with stack(tmp_path, otelcol, jaeger, **FAST) as (ccfg, _, prom):
        _scan_twice(stocks, ccfg, prom)
        # the collector's series carry each pilot's factory (from its resource)
        by_factory = prom_query(prom, f"count by ({N.SPAN_FACTORY}) ({N.SPAN_CALLS})")
        assert {s["metric"].get(N.SPAN_FACTORY) for s in by_factory} == set(FACTORIES), by_factory

        panels = list(_phase_panels())
        (per_second,) = (expr for where, expr in panels if f"{PER_SECOND!r}" in where)
        at = time.time()
        rates = {}
        for name in FACTORIES:
            empty, seen = [], set()
            for where, expr in panels:
                q = _query(expr, name)
                res = _finite(range_query(prom, q, 120))
                if not res:
                    empty.append(f"{where}: {q}")
                for s in res:
                    assert s["metric"].get(N.SPAN_FACTORY, name) == name, (where, s["metric"])
                    seen |= {s["metric"][N.SPAN_ENTRY]} if N.SPAN_ENTRY in s["metric"] else set()
            assert not empty, f"pilot-phases queries without data with factory={name}:\n" + "\n".join(empty)
            assert seen and seen <= {e.name for e in entries[name]}, (name, seen)
            assert (SLOW.name in seen) == (name == FACTORIES[0]), (name, seen)
            rates[name] = _instant(prom, _query(per_second, name), at)
        every = _instant(prom, _query(per_second), at)
        assert all(sum(v for (span, _), v in rates[n].items() if span == C.LOG_PHASE_VALIDATION) > 0 for n in FACTORIES)
        assert set(every) == set(rates[FACTORIES[0]]) | set(rates[FACTORIES[1]]), (every, rates)
        for key, v in every.items():
            assert v == pytest.approx(sum(r.get(key, 0.0) for r in rates.values())), (key, every, rates)
