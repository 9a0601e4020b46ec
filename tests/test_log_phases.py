"""The phases of a pilot's trace built from the factory's files are the conventions' phases.

A stock factory's only spans are outputs/pilot_traces.py's: their phase spans carry gwms.phase,
as the pilot tracer's do, with names from tracing/conventions.py, so that the collector's
spanmetrics, the pilot-phases board, the phase_slow rule and `gwms-obs analyze` see them.
The live proof (real collector, Prometheus and Jaeger) is tests/test_log_phases_live.py.
"""

from __future__ import annotations

from collections import Counter

import pytest

from gwms_obs.analysis import actions as A
from gwms_obs.analysis import spans as S
from gwms_obs.analysis.distributions import Key
from gwms_obs.outputs import pilot_traces as P
from gwms_obs.tracing import conventions as C
from tests.test_pilot_traces import Pilot, _attrs, _scan
from tools import render

PHASE_SPANS = {P.SPAN_QUEUED, P.SPAN_HELD, P.SPAN_VALIDATION, P.SPAN_CONDOR, P.SPAN_CLEANUP}


def test_one_list_of_phase_names() -> None:
    assert set(C.LOG_PHASES) == PHASE_SPANS
    assert set(C.ALL_PHASES) == set(C.PHASES) | set(C.LOG_PHASES) and len(set(C.ALL_PHASES)) == len(C.ALL_PHASES)
    assert set(C.OVERHEAD_PHASES) <= set(C.ALL_PHASES)
    assert not {C.PHASE_MAIN, C.LOG_PHASE_CONDOR, C.LOG_PHASE_HELD} & set(C.OVERHEAD_PHASES)
    # the collector keeps exactly these gwms.phase values as a spanmetrics dimension (gwmsguard: others "other")
    assert tuple(render.role_defaults("otel_collector")["otel_collector_spanmetrics_phases"]) == C.ALL_PHASES


@pytest.fixture(scope="module")
def pilots(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int, int], Pilot]:
    from gwms_obs.simulate.factory import simulate

    out = tmp_path_factory.mktemp("factory")
    simulate(out, 80, seed=12)
    return _scan(out)[2]


def test_every_phase_span_says_its_phase_and_no_other_span_does(pilots: dict[tuple[str, int, int], Pilot]) -> None:
    seen: Counter[str] = Counter()
    for p in pilots.values():
        for s in p.spans:
            phase = _attrs(s["attributes"]).get(C.PHASE)
            if s["name"] in PHASE_SPANS:
                assert phase == s["name"], s
                seen[s["name"]] += 1
            else:
                assert phase is None, s
    # every counted pilot with a .out has its validation, and those HTCondor started their condor phase
    assert seen[P.SPAN_VALIDATION] > 0 and seen[P.SPAN_CONDOR] > 0 and seen[P.SPAN_CLEANUP] > 0


def test_analyze_reads_them_as_phases(pilots: dict[tuple[str, int, int], Pilot]) -> None:
    resource_spans = [
        {
            "resource": {"attributes": [{"key": k, "value": {"stringValue": str(v)}} for k, v in p.resource.items()]},
            "scopeSpans": [{"spans": p.spans}],
        }
        for p in pilots.values()
    ]
    spans = S.from_otlp(resource_spans)
    kinds = Counter((s.kind, s.name) for s in spans)
    assert kinds[(S.KIND_PILOT, C.SPAN_PILOT)] == len(pilots)
    assert kinds[(S.KIND_PHASE, C.LOG_PHASE_VALIDATION)] > 0 and kinds[(S.KIND_PHASE, C.LOG_PHASE_CONDOR)] > 0
    # running and the user jobs are no phase, and no script
    assert {n for k, n in kinds if k != S.KIND_PILOT} <= set(C.LOG_PHASES)
    # the log-derived validation is what analyze weighs there: a candidate, and validation time
    assert A.is_candidate(Key("e", S.KIND_PHASE, C.LOG_PHASE_VALIDATION, C.LOG_PHASE_VALIDATION))
    for name in (C.LOG_PHASE_QUEUED, C.LOG_PHASE_HELD, C.LOG_PHASE_CONDOR, C.PHASE_CLEANUP):
        assert not A.is_candidate(Key("e", S.KIND_PHASE, name, name)), name
    assert C.LOG_PHASE_VALIDATION in A.VALIDATION_PHASES


def test_every_board_reads_phase_durations_through_the_phase_selector() -> None:
    """A span-metrics duration query without the gwms.phase selector mixes user jobs, roots and
    scripts into a "phase" percentile (the site-health board did, on a stock factory)."""
    import json
    from pathlib import Path

    from dashboards.gen import names as N
    from dashboards.gen.boards.common import PHASE_SEL

    boards = sorted((Path(__file__).resolve().parents[1] / "dashboards" / "grafana").glob("*.json"))
    queries = [
        t["expr"]
        for b in boards
        for p in json.loads(b.read_text())["panels"]
        for t in p.get("targets", [])
        if f"{N.SPAN_DURATION}_bucket" in t.get("expr", "")
    ]
    assert len(queries) >= 4
    assert [q for q in queries if PHASE_SEL not in q] == []
