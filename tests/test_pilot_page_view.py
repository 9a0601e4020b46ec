"""What a pilot page makes of whatever Jaeger answers: malformed shapes, cycles, floods, hostile text.

controller/pilots.view() over hand-made Jaeger JSON (the live tests read the
exporter's real traces): it never raises, bounds what it shows, and draws a
tree however the references are tangled.
"""

from __future__ import annotations

from typing import Any

import pytest

from gwms_obs.controller import pilots as PL
from gwms_obs.controller.policy import Attributes, Principal, Role
from gwms_obs.tracing import conventions as C

TID = "ab" * 16


def span(
    sid: str, parent: str | None, name: Any = "s", start: Any = 1_000_000, dur: Any = 10, **tags: Any
) -> dict[str, Any]:
    refs = [{"refType": "CHILD_OF", "traceID": TID, "spanID": parent}] if parent else []
    tag_list = [{"key": k, "value": v} for k, v in tags.items()]
    return {"traceID": TID, "spanID": sid, "operationName": name, "startTime": start, "duration": dur,
            "references": refs, "processID": "p1", "tags": tag_list}  # fmt: skip


def trace(spans: list[Any], **resource: Any) -> dict[str, Any]:
    tags = [{"key": k, "value": v} for k, v in resource.items()]
    return {"traceID": TID, "spans": spans, "processes": {"p1": {"serviceName": "glidein", "tags": tags}}}


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"spans": None},
        {"spans": "x", "processes": []},
        {"spans": [1, "x", None, {"spanID": 5}], "processes": {"p1": 3}},
        trace([span("1", None, start="later", dur=None), span("2", "1", name=None, start=float("nan"), dur=-5)]),
        trace([{"spanID": "1", "references": "nope", "tags": {"k": "v"}, "logs": [1, {"fields": "x"}]}]),
    ],
)
def test_any_shape_is_a_page_never_an_error(doc: dict[str, Any]) -> None:
    v = PL.view(doc, TID)
    assert v.trace_id == TID and all(0 <= r.offset <= 100 and 0 < r.width <= 100 for r in v.spans)


def test_a_reference_cycle_still_draws_every_span_once() -> None:
    spans = [span("1", "3", C.SPAN_PILOT), span("2", "1"), span("3", "2"), span("4", "4"), span("5", "1")]
    spans += [dict(spans[1])]  # the same span id twice: both rows (Jaeger keeps both copies too)
    v = PL.view(trace(spans), TID)
    assert len(v.spans) == len(spans) and v.hidden_spans == 0


def test_a_flood_of_spans_and_text_is_bounded() -> None:
    spans = [span("root", None, C.SPAN_PILOT, dur=10_000)]
    spans += [span(f"j{i}", "root", "x" * 10_000, start=1_000_000 + i, dur=5, **{C.LOG_JOB_ID: "y" * 10_000})
              for i in range(PL.MAX_SPANS + 500)]  # fmt: skip
    v = PL.view(trace(spans, **{C.ENTRY: "e" * 100_000}), TID)
    assert len(v.spans) == PL.MAX_SPANS and v.hidden_spans == 501
    assert len(v.entry) <= PL.TEXT + 20 and all(len(r.name) <= 140 for r in v.spans)
    assert all(len(val) <= PL.TEXT + 20 for r in v.spans for _, val in r.details)


def test_the_accounting_and_the_failure_come_from_the_trace() -> None:
    account = {C.LOG_CPU_SECONDS + "goodput": 3000.0, C.LOG_CPU_SECONDS + "overhead": 1000.0,
               C.LOG_GPU_SECONDS + "goodput": 50.0, C.PROCESS_EXIT_CODE: 3}  # fmt: skip
    root = span("1", None, C.SPAN_PILOT, dur=3_600_000_000, **account)
    val = span("2", "1", "validation", **{C.LOG_FAILED_TEST: "check_cvmfs", C.LOG_FAILURE: "WN_Resource",
               C.LOG_FAILURE_DETAIL: "cvmfs <missing>", "otel.status_code": "ERROR",
               "otel.status_description": "validation failed: check_cvmfs"})  # fmt: skip
    v = PL.view(trace([val, root]), TID)
    assert [(a.resource, a.category, a.seconds, a.share) for a in v.account] == [
        ("cpu", "goodput", 3000.0, 75.0), ("cpu", "overhead", 1000.0, 25.0), ("gpu", "goodput", 50.0, 100.0)
    ]  # fmt: skip
    assert (v.failed_test, v.failure, v.failure_detail, v.exit_code) == (
        "check_cvmfs",
        "WN_Resource",
        "cvmfs <missing>",
        "3",
    )
    assert [r.name for r in v.spans] == [C.SPAN_PILOT, "validation"] and v.spans[1].depth == 1
    assert v.errors == ["validation: validation failed: check_cvmfs"]


def test_who_may_see_a_pilot() -> None:
    attrs = {C.ENTRY: "E1", C.SITE: "S_trace", C.CLIENT: "fe1.main", C.FACTORY: "f1"}
    admin = Principal("a", Role.SITE_ADMIN, sites=frozenset({"S_conf"}))
    # the configured scope's site for the entry wins over what the trace says
    assert PL.may_see(admin, attrs, [Attributes(factory="f1", entry="E1", site="S_conf")])
    assert not PL.may_see(admin, attrs, [Attributes(factory="f2", entry="E1", site="S_conf")])
    assert not PL.may_see(admin, attrs, [])
    assert PL.may_see(Principal("b", Role.SITE_ADMIN, sites=frozenset({"S_trace"})), attrs, [])
    assert PL.may_see(Principal("v", Role.VO_MANAGER, frontends=frozenset({"fe1"})), attrs, [])
    assert not PL.may_see(Principal("v", Role.VO_MANAGER, frontends=frozenset({"fe"})), attrs, [])
    assert PL.may_see(Principal("o", Role.OPERATOR), attrs, []) and PL.may_see(Principal("r", Role.READER), attrs, [])
    assert not PL.may_see(Principal("p", Role.PILOT), attrs, [])
    assert not PL.may_see(admin, {}, [])


@pytest.mark.parametrize(("raw", "want"), [(TID, TID), (TID.upper(), TID), ("0" * 32, None), ("ab" * 8, None),
                                           (TID + "0", None), ("g" * 32, None), ("../" + TID, None)])  # fmt: skip
def test_trace_ids(raw: str, want: str | None) -> None:
    assert PL.trace_id(raw) == want
