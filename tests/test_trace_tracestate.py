"""W3C tracestate travels with traceparent: factory → glidein environment → pilot spans and children.

A valid TRACESTATE that comes with a usable TRACEPARENT is exported unchanged
to the pilot's children and carried in the `traceState` of every span of the
trace; anything else (invalid, oversized, or without its traceparent) is
dropped silently, and the pilot traces as before. The shell and the Python
side (`conventions.is_tracestate`) apply the same rules.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, TraceState
from opentelemetry.util.types import Attributes

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing.factory import FactoryTracer
from gwms_obs.tracing.spool import parse_spool
from tests.support.trace_pilot import MODES, spool_spans
from tests.support.traceparent import parse_traceparent
from tests.test_trace_shell import FACTORY_SPAN, FACTORY_TRACE, TP, bash

VALID = [
    "congo=t61rcWkgMzE",
    "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
    " rojo=00f067aa0ba902b7 ,\tcongo=t61rcWkgMzE\t",  # optional white space around members
    "a=1,,b=2,",  # empty members are allowed
    "fw529a3039@dt=w1nsvbgbtaekzp,dd=s:-1;t.dm:-0",  # tenant@system keys, ":;" in values
    "ot=th:8;rv:9b8f7a6e5d4c3b",  # OpenTelemetry's own entry (consistent sampling)
    "k=a b",  # a space inside a value
    'q="x\\y"',  # quote and backslash: JSON-escaped in the spool, unchanged for children
    ",".join(f"k{i}=v" for i in range(32)),  # 32 members
    "a=" + "x" * 256,  # the longest value
    "a" * 256 + "=v",  # the longest simple key
    "k=" + "v" * 255 + "," + "j=" + "w" * 252,  # 512 characters exactly
]
INVALID = [
    "garbage",  # no "="
    "Rojo=1",  # upper case key
    "1abc=x",  # a simple key starts with a letter
    "a=1,a=2",  # a key twice
    "a=",  # empty value
    "=v",  # empty key
    "a=b=c",  # "=" in a value
    "a =b",  # space before "="
    "a=b\x01",  # control character
    "a=\u00e9t\u00e9",  # not ASCII
    "a@b@c=1",  # two "@"
    "t@" + "s" * 15 + "=1",  # system id over 14 characters
    "a=" + "x" * 257,  # value over 256 characters
    "a" * 257 + "=v",  # key over 256 characters
    ",".join(f"k{i}=v" for i in range(33)),  # 33 members
    "k=" + "v" * 255 + "," + "j=" + "w" * 253,  # 513 characters
    "a=" + "x" * 200 + "," + "b=" * 400,  # oversized hostile input
    ",",  # no member at all
    " \t ",
]
CHILD = 'gwms_trace_script child sh -c \'echo "child-ts=${TRACESTATE-<unset>}"; echo "child-tp=$TRACEPARENT"\''
PILOT = f'gwms_trace_init "$PWD/s.jsonl"; gwms_trace_phase setup; {CHILD}; _gt_frame() {{ return 1; }}; '
PILOT += "gwms_trace_flush 0"


def shell_says(values: Sequence[str], tmp_path: Path) -> list[bool]:
    """_gt_tracestate_ok on each value (passed in files: the environment cannot hold every byte)."""
    for i, v in enumerate(values):
        (tmp_path / f"v{i}").write_bytes(v.encode())
    script = f'for ((i = 0; i < {len(values)}; i++)); do v=$(<"v$i"); _gt_tracestate_ok "$v" && echo 1 || echo 0; done'
    r = bash(script, tmp_path, {"LANG": "C.UTF-8"})
    assert r.returncode == 0, r.stderr
    return [x == "1" for x in r.stdout.split()]


def child_line(stdout: str, key: str) -> str:
    (line,) = [x for x in stdout.splitlines() if x.startswith(key + "=")]
    return line.split("=", 1)[1]


def test_shell_and_python_agree_on_what_is_a_tracestate(tmp_path: Path) -> None:
    assert [C.is_tracestate(v) for v in VALID] == [True] * len(VALID)
    assert [C.is_tracestate(v) for v in INVALID] == [False] * len(INVALID)
    assert shell_says(VALID, tmp_path) == [True] * len(VALID)
    assert shell_says(INVALID, tmp_path) == [False] * len(INVALID)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("value", ["rojo=00f067aa0ba902b7,congo=t61rcWkgMzE", 'q="x\\y",k=a b'])
def test_children_see_tracestate_and_spans_carry_it(tmp_path: Path, mode: str, value: str) -> None:
    r = bash(PILOT, tmp_path, {"TRACEPARENT": TP, "TRACESTATE": value, **MODES[mode]})
    assert r.returncode == 0, r.stderr
    assert child_line(r.stdout, "child-ts") == value  # unchanged, next to the child's own TRACEPARENT
    tp = parse_traceparent(child_line(r.stdout, "child-tp"))
    assert tp is not None and tp.trace_id == FACTORY_TRACE
    spool = (tmp_path / "s.jsonl").read_bytes()
    spans = spool_spans(spool)
    assert {s["name"] for s in spans} == {"glidein", "setup", "child"}
    assert all(s["traceState"] == value for s in spans)
    root = next(s for s in spans if s["name"] == "glidein")
    assert root["parentSpanId"] == FACTORY_SPAN
    # The exporter's validator keeps it.
    errors = ParseErrors()
    parsed = parse_spool(spool, "spool", errors)
    assert parsed.spans == 3 and not errors.counts
    kept = [s for rs in parsed.request()["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert [s["traceState"] for s in kept] == [value] * 3


@pytest.mark.parametrize("value", INVALID)
def test_invalid_tracestate_is_dropped_and_the_pilot_still_traces(tmp_path: Path, value: str) -> None:
    (tmp_path / "ts").write_bytes(value.encode())
    r = bash("TRACESTATE=$(<ts); export TRACESTATE; " + PILOT, tmp_path, {"TRACEPARENT": TP, "LANG": "C.UTF-8"})
    assert r.returncode == 0, r.stderr
    assert child_line(r.stdout, "child-ts") == "<unset>"
    spans = spool_spans((tmp_path / "s.jsonl").read_bytes())
    assert {s["name"] for s in spans} == {"glidein", "setup", "child"}
    assert all(s["traceId"] == FACTORY_TRACE and "traceState" not in s for s in spans)
    assert C.PARENT_INVALID not in json.dumps(spans)


@pytest.mark.parametrize("tp", [None, "garbage"])
def test_tracestate_without_its_traceparent_is_dropped(tmp_path: Path, tp: str | None) -> None:
    env = {"TRACESTATE": "congo=t61rcWkgMzE"} | ({"TRACEPARENT": tp} if tp else {})
    r = bash(PILOT, tmp_path, env)
    assert r.returncode == 0, r.stderr
    assert child_line(r.stdout, "child-ts") == "<unset>"  # it belonged to a trace this pilot is not in
    spans = spool_spans((tmp_path / "s.jsonl").read_bytes())
    assert len(spans) == 3 and all("traceState" not in s for s in spans)


def test_unsampled_pilot_leaves_tracestate_alone(tmp_path: Path) -> None:
    r = bash(PILOT, tmp_path, {"TRACEPARENT": TP[:-2] + "00", "TRACESTATE": "congo=t61rcWkgMzE"})
    assert r.returncode == 0, r.stderr
    assert child_line(r.stdout, "child-ts") == "congo=t61rcWkgMzE"
    assert child_line(r.stdout, "child-tp") == TP[:-2] + "00"


def test_spool_validator_drops_a_bad_tracestate_and_keeps_the_span() -> None:
    def line(ts: object) -> dict[str, object]:
        span = {"traceId": FACTORY_TRACE, "spanId": FACTORY_SPAN, "name": "x", "kind": 1, "traceState": ts}
        span |= {"startTimeUnixNano": "1", "endTimeUnixNano": "2"}
        return {"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [span]}]}]}

    for ts, kept in (("a=1", "a=1"), ("A=1", None), ("a=" + "x" * 600, None), (["a=1"], None)):
        parsed = parse_spool(json.dumps(line(ts)).encode(), "spool", ParseErrors())
        (span,) = [s for rs in parsed.request()["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
        assert span.get("traceState") == kept


class _StateSampler(Sampler):
    """Samples everything and gives root spans a tracestate (as a consistent-probability sampler does)."""

    def __init__(self, state: TraceState) -> None:
        self.state = state

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, trace_state or self.state)

    def get_description(self) -> str:
        return "state"


def _submit_env(state: TraceState) -> tuple[dict[str, str], InMemorySpanExporter]:
    mem = InMemorySpanExporter()
    provider = TracerProvider(sampler=_StateSampler(state))
    provider.add_span_processor(SimpleSpanProcessor(mem))
    ft = FactoryTracer("OSG", "gfactory_instance", provider)
    with ft.submit_cluster("Entry_A", "fe.main", 2) as sc:
        env = dict(e.split("=", 1) for e in sc.submit_env())
        sc.submitted(1, 2)
    return env, mem


def test_factory_passes_its_tracestate_next_to_the_traceparents(tmp_path: Path) -> None:
    env, mem = _submit_env(TraceState([("ot", "th:8"), ("gwms", "f1")]))
    assert env[C.ENV_TRACESTATE_CLUSTER] == "ot=th:8,gwms=f1"
    assert {s.context.trace_state.to_header() for s in mem.get_finished_spans()} == {"ot=th:8,gwms=f1"}
    # What the submit file hands glidein 1: its traceparent and the cluster's tracestate.
    tp = env[C.ENV_TRACEPARENT_LIST].split(",")[1]
    r = bash(PILOT, tmp_path, {"TRACEPARENT": tp, "TRACESTATE": env[C.ENV_TRACESTATE_CLUSTER]})
    assert child_line(r.stdout, "child-ts") == "ot=th:8,gwms=f1"
    assert {s["traceState"] for s in spool_spans((tmp_path / "s.jsonl").read_bytes())} == {"ot=th:8,gwms=f1"}


@pytest.mark.parametrize(
    "state",
    [
        TraceState(),  # none: nothing to pass
        TraceState([("k", "a b")]),  # a space would split condor's environment string
        TraceState([(f"k{i}", "v" * 40) for i in range(12)]),  # over 512 characters
    ],
)
def test_factory_passes_no_tracestate_it_should_not(state: TraceState) -> None:
    env, _ = _submit_env(state)
    assert C.ENV_TRACESTATE_CLUSTER not in env
