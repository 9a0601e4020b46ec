"""ControllerClient: the factory's GET /v1/decide, cached, bounded, never raising (against a canned server)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.controller.client import ANSWERED, ERROR, TIMEOUT, ControllerClient, parse_decision
from gwms_obs.controller.policy import Attributes, Decision, Effect, Verbosity
from tests.support.canned_controller import answer, canned_controller, hung

A = Attributes(factory="OSG", entry="CMS_T2_X", site="Nebraska", frontend="CMS G&1", security_class="main")
B = Attributes(factory="OSG", entry="CMS_T2_Y")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_answer_is_a_decision_and_the_request_carries_the_attributes() -> None:
    with canned_controller(body=answer("scripts", 0.5, rule=17, kind="site", capped_by=(3,))) as ctl:
        d = ControllerClient(ctl.url + "/", "tok").decide(A)
        (asked,) = ctl.requests
    assert d == Decision(Effect(Verbosity.SCRIPTS, 0.5, False), 17, "site", (3,))
    assert asked.path == "/v1/decide" and asked.headers["authorization"] == "Bearer tok"
    assert asked.query == {"factory": "OSG", "entry": "CMS_T2_X", "site": "Nebraska", "frontend": "CMS G&1",
                           "security_class": "main", "pilot": ""}  # fmt: skip


def test_answers_are_cached_per_attributes_for_ttl() -> None:
    clock = Clock()
    with canned_controller(body=answer("phases")) as ctl:
        c = ControllerClient(ctl.url, ttl=60, clock=clock)
        for _ in range(50):  # a factory cycle: many clusters, two entries
            assert c.decide(A) is not None and c.decide(B) is not None
        assert len(ctl.requests) == 2
        clock.now += 59
        c.decide(A)
        assert len(ctl.requests) == 2
        clock.now += 2
        ctl.body = answer("commands")
        d = c.decide(A)
        assert len(ctl.requests) == 3 and d is not None and d.effect.verbosity is Verbosity.COMMANDS


def test_dead_controller_costs_one_timeout_per_failure_ttl() -> None:
    clock = Clock()
    with hung() as url:
        c = ControllerClient(url, timeout=0.3, failure_ttl=10, clock=clock)
        t0 = time.monotonic()
        assert c.lookup(A) == (None, TIMEOUT)
        first = time.monotonic() - t0
        t0 = time.monotonic()
        for _ in range(100):  # any attributes: the controller is down for everyone
            assert c.decide(A) is None and c.decide(B) is None
        rest = time.monotonic() - t0
        assert c.requests == 1
        clock.now += 11
        assert c.decide(B) is None and c.requests == 2
    assert first < 0.3 + 0.7, first
    assert rest < 0.2, rest


def test_refused_and_server_errors_back_off_for_everyone() -> None:
    clock = Clock()
    c = ControllerClient("http://127.0.0.1:9", clock=clock)
    assert c.lookup(A) == (None, ERROR) and c.decide(B) is None and c.requests == 1
    with canned_controller(503, b"") as ctl:
        c = ControllerClient(ctl.url, clock=clock)
        assert c.decide(A) is None and c.decide(B) is None and len(ctl.requests) == 1


def test_a_refusal_for_some_attributes_is_cached_for_those_only() -> None:
    clock = Clock()
    with canned_controller(400, b'{"error":"invalid","detail":"x"}') as ctl:
        c = ControllerClient(ctl.url, clock=clock, failure_ttl=10)
        assert c.lookup(A) == (None, ERROR)
        assert c.decide(A) is None and len(ctl.requests) == 1
        ctl.status, ctl.body = 200, answer()
        assert c.lookup(B)[1] == ANSWERED and len(ctl.requests) == 2
        clock.now += 11
        assert c.decide(A) is not None and len(ctl.requests) == 3


BAD: list[Any] = [
    None,
    [],
    "x",
    {},
    {**json.loads(answer()), "extra": 1},
    {k: v for k, v in json.loads(answer()).items() if k != "rule"},
    {**json.loads(answer()), "rule": True},
    {**json.loads(answer()), "rule": "17"},
    {**json.loads(answer()), "kind": "cap"},
    {**json.loads(answer()), "verbosity": "loud"},
    {**json.loads(answer()), "sample": 1.5},
    {**json.loads(answer()), "sample": True},
    {**json.loads(answer()), "record_commands": "yes"},
    {**json.loads(answer()), "capped_by": [True]},
    {**json.loads(answer()), "capped_by": 3},
]


@pytest.mark.parametrize("doc", BAD, ids=range(len(BAD)))
def test_anything_but_the_contract_is_refused(doc: Any) -> None:
    assert parse_decision(doc) is None


@pytest.mark.parametrize(
    "body", [b"garbage", answer()[:-1], b" " * (70 << 10) + answer(), json.dumps({"rule": 1}).encode()]
)
def test_bad_bodies_are_none(body: bytes) -> None:
    with canned_controller(200, body) as ctl:
        assert ControllerClient(ctl.url).lookup(A) == (None, ERROR)


def test_never_raises() -> None:
    def boom() -> str:
        raise RuntimeError("token store on fire")

    with canned_controller() as ctl:
        assert ControllerClient(ctl.url, boom).lookup(A) == (None, ERROR)
    assert ControllerClient("not a url").decide(A) is None


def test_from_environment(tmp_path: Path) -> None:
    assert ControllerClient.from_env({}) is None
    tf = tmp_path / "tok"
    tf.write_text("first\n")
    with canned_controller() as ctl:
        c = ControllerClient.from_env({"GWMS_OBS_CONTROLLER_URL": ctl.url, "GWMS_OBS_CONTROLLER_TOKEN_FILE": str(tf)})
        assert c is not None
        c.decide(A)
        tf.write_text("second\n")  # rotated: read at the next request
        c.decide(B)
        assert [r.headers["authorization"] for r in ctl.requests] == ["Bearer first", "Bearer second"]
