"""The controller's JSON API over a real SQLite store: tokens, roles, the audit log, expiry, bad input."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.controller.api import create_app
from gwms_obs.controller.service import Controller
from gwms_obs.controller.store import Store
from tests.support.controller import ROLES, in_process

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's notice about httpx versions
    from starlette.testclient import TestClient

T0 = 1_800_000_000.0


@dataclass
class Api:
    client: TestClient
    controller: Controller
    tokens: dict[str, str]
    clock: list[float]

    def as_(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def get(self, path: str, role: str = "reader") -> Any:
        r = self.client.get(path, headers=self.as_(role))
        assert r.status_code == 200, r.text
        return r.json()

    def create(self, role: str, **body: Any) -> Any:
        return self.client.post("/v1/rules", headers=self.as_(role), json=body)

    def decide(self, **attrs: str) -> dict[str, Any]:
        got: dict[str, Any] = self.get("/v1/decide?" + "&".join(f"{k}={v}" for k, v in attrs.items()), "pilot")
        return got


@pytest.fixture
def api(tmp_path: Path) -> Iterator[Api]:
    with in_process(tmp_path, T0) as ip, TestClient(create_app(ip.controller, "s" * 40)) as client:
        yield Api(client, ip.controller, ip.tokens, ip.clock)


def audit(api: Api) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = api.get("/v1/audit")["audit"]
    return got


SITE_OFF: dict[str, Any] = {
    "kind": "site", "selector": {"site": "T2_A"}, "effect": {"verbosity": "off"}, "reason": "drain", "hours": 2,
}  # fmt: skip


def test_every_request_needs_a_known_token(api: Api) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Basic {api.tokens['operator']}"}):
        r = api.client.get("/v1/decide?site=T2_A", headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"] == "unauthenticated"
    metrics = api.client.get("/metrics").text
    assert "gwms_controller_auth_failures_total 3.0" in metrics


def test_a_token_of_one_role_cannot_act_as_another(api: Api) -> None:
    """Each write is made with each role's token: only the roles the policy names succeed."""
    attempts: dict[str, dict[str, Any]] = {
        "operator": {"kind": "operator", "selector": {}, "effect": {"verbosity": "commands"}, "reason": "debug"},
        "site": SITE_OFF,
        "cap": {**SITE_OFF, "kind": "cap"},
        "vo": {"kind": "vo", "selector": {"frontend": "cms"}, "effect": {"verbosity": "scripts"}, "reason": "r",
               "hours": 1},
    }  # fmt: skip
    allowed = {
        "operator": {"operator", "site", "cap", "vo"},
        "site_admin": {"site", "cap"},
        "vo_manager": {"vo"},
        "pilot": set(),
        "reader": set(),
    }
    for role in ROLES:
        for what, body in attempts.items():
            r = api.create(role, **body)
            if what in allowed[role]:
                assert r.status_code == 201, (role, what, r.text)
                assert r.json()["owner"] == f"{role}-1" and r.json()["role"] == role
            else:
                assert r.status_code == 403, (role, what, r.text)
                assert r.json()["error"] == ("read_only" if role in ("pilot", "reader") else "wrong_kind")
    # a site admin cannot touch another site, a VO manager another frontend
    r = api.create("site_admin", **{**SITE_OFF, "selector": {"site": "T2_B"}})
    assert r.status_code == 403 and r.json()["error"] == "out_of_scope"
    r = api.create("vo_manager", **{**attempts["vo"], "selector": {"frontend": "dune"}})
    assert r.status_code == 403 and r.json()["error"] == "out_of_scope"


def test_every_change_and_every_refusal_is_in_the_audit_log(api: Api) -> None:
    made = api.create("site_admin", **SITE_OFF).json()
    api.clock[0] += 60
    r = api.client.post(f"/v1/rules/{made['id']}/expire", headers=api.as_("site_admin"), json={"reason": "done"})
    assert r.status_code == 200 and r.json()["expires"] == T0 + 60
    refused = api.client.request(
        "DELETE", f"/v1/rules/{made['id']}", headers=api.as_("vo_manager"), json={"reason": "mine now"}
    )
    assert refused.status_code == 403
    gone = api.client.request(
        "DELETE", f"/v1/rules/{made['id']}", headers=api.as_("operator"), json={"reason": "clean up"}
    )
    assert gone.status_code == 200
    entries = audit(api)
    assert [(e["action"], e["actor"], e["outcome"]) for e in reversed(entries)] == [
        ("create", "site_admin-1", "ok"),
        ("expire", "site_admin-1", "ok"),
        ("denied", "vo_manager-1", "wrong_kind"),
        ("delete", "operator-1", "ok"),
    ]
    create, expire, _, delete = reversed(entries)
    assert create["before"] is None and create["after"]["effect"]["verbosity"] == "off"
    assert create["reason"] == "drain" and create["at"] == T0
    assert expire["before"]["expires"] == T0 + 7200 and expire["after"]["expires"] == T0 + 60
    assert delete["before"]["id"] == made["id"] and delete["after"] is None and delete["reason"] == "clean up"
    assert entries[1]["reason"] == "mine now" and entries[1]["attempted"] == "delete"  # the refused one's why
    assert api.get(f"/v1/audit?rule={made['id']}")["audit"] == [e for e in entries if e["rule_id"] == made["id"]]
    assert api.client.get(f"/v1/rules/{made['id']}", headers=api.as_("reader")).status_code == 404


def test_a_change_needs_a_reason(api: Api) -> None:
    r = api.create("site_admin", **{**SITE_OFF, "reason": "  "})
    assert r.status_code == 400 and r.json()["error"] == "invalid"
    assert audit(api)[0]["outcome"] == "invalid"


def test_an_override_stops_applying_at_its_expiry(api: Api) -> None:
    assert api.decide(site="T2_A")["kind"] == "default"
    made = api.create("site_admin", **SITE_OFF).json()
    assert api.decide(site="T2_A") | {"sample_threshold": 0} == {
        "verbosity": "off", "sample": 1.0, "record_commands": False, "sample_threshold": 0, "rule": made["id"],
        "kind": "site", "capped_by": [],
    }  # fmt: skip
    api.clock[0] = T0 + 7200 - 0.001
    assert api.decide(site="T2_A")["verbosity"] == "off"
    api.clock[0] = T0 + 7200
    assert api.decide(site="T2_A") | {"sample_threshold": 0} == {
        "verbosity": "phases", "sample": 1.0, "record_commands": False, "sample_threshold": 0, "rule": None,
        "kind": "default", "capped_by": [],
    }  # fmt: skip
    assert api.get("/v1/rules?active=1")["rules"] == []
    assert [r["id"] for r in api.get("/v1/rules")["rules"]] == [made["id"]]
    assert 'gwms_controller_rule_expiries_total{kind="site"} 1.0' in api.client.get("/metrics").text


def test_site_admins_and_vo_managers_rules_must_expire(api: Api) -> None:
    no_end = {k: v for k, v in SITE_OFF.items() if k != "hours"}
    assert api.create("site_admin", **no_end).json()["error"] == "invalid"
    assert api.create("site_admin", **{**SITE_OFF, "hours": 24 * 31}).json()["error"] == "invalid"
    assert api.create("operator", **no_end).status_code == 201  # operators' rules may be open-ended


def test_a_vo_rule_is_cut_by_the_site_cap(api: Api) -> None:
    cap = api.create("site_admin", **{**SITE_OFF, "kind": "cap", "effect": {"verbosity": "phases"}}).json()
    vo = {"kind": "vo", "selector": {"frontend": "cms", "site": "T2_A"}, "effect": {"verbosity": "commands"},
          "reason": "debug", "hours": 1}  # fmt: skip
    r = api.create("vo_manager", **vo)
    assert r.status_code == 403 and r.json()["error"] == "above_cap"
    everywhere = api.create("vo_manager", **{**vo, "selector": {"frontend": "cms"}}).json()
    d = api.decide(site="T2_A", frontend="cms")
    assert (d["verbosity"], d["rule"], d["capped_by"]) == ("phases", everywhere["id"], [cap["id"]])
    assert api.decide(site="T2_B", frontend="cms")["verbosity"] == "commands"


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"kind": "loud"}, "kind"),
        ({**SITE_OFF, "effect": {"verbosity": "max"}}, "verbosity"),
        ({**SITE_OFF, "selector": {"site": "T2_*"}}, "patterns"),
        ({**SITE_OFF, "hours": -1}, "positive"),
        ({**SITE_OFF, "hours": 1, "expires": T0 + 5}, "not both"),
        ({**SITE_OFF, "owner": "someone-else"}, "unknown"),
        ({**SITE_OFF, "effect": {"verbosity": "off", "sample": 1.5}}, "sample"),
    ],
)
def test_bad_rules_get_a_clear_400(api: Api, body: dict[str, Any], detail: str) -> None:
    r = api.create("operator", **body)
    assert r.status_code == 400 and r.json()["error"] == "invalid" and detail in r.json()["detail"], r.text


def test_bad_bodies_and_parameters(api: Api) -> None:
    h = {**api.as_("operator"), "content-type": "application/json"}
    for raw in (b"{", b"[1]", b"\xff\xfe", b'"x"'):
        r = api.client.post("/v1/rules", headers=h, content=raw)
        assert r.status_code == 400 and r.json()["error"] == "invalid", raw
    r = api.client.post("/v1/rules", headers=h, content=b" " * (65 * 1024))
    assert r.status_code == 400 and "65536 bytes" in r.json()["detail"]
    r = api.client.get("/v1/decide?site=T2_A&colour=red", headers=api.as_("pilot"))
    assert r.status_code == 400 and "colour" in r.json()["detail"]
    for path in ("/v1/rules/abc", "/v1/rules/99999", "/v1/rules/" + "9" * 40):
        assert api.client.get(path, headers=api.as_("reader")).status_code == 404
    assert api.client.get("/v1/audit?limit=x", headers=api.as_("reader")).status_code == 400


def test_whoami_effective_and_explain(api: Api) -> None:
    assert api.get("/v1/whoami", "site_admin") == {
        "name": "site_admin-1", "role": "site_admin", "sites": ["T2_A"], "frontends": []
    }  # fmt: skip
    api.create("operator", kind="operator", selector={"entry": "E1"}, effect={"verbosity": "commands"}, reason="r")
    api.decide(site="T2_A", entry="E1", frontend="cms", pilot="p1")
    api.decide(site="T2_A", entry="E2", frontend="cms", pilot="p2")
    rows = api.get("/v1/effective")["effective"]
    assert [(r["scope"]["entry"], r["verbosity"]) for r in rows] == [("E1", "commands"), ("E2", "phases")]
    assert all("pilot" not in r["scope"] for r in rows)  # scopes, never single pilots
    why = api.get("/v1/decide?site=T2_A&entry=E2&explain=1", "pilot")["explain"]
    assert why == [{"rule": 1, "outcome": "no_match", "detail": "entry"}]


def test_a_second_controller_on_the_same_database_sees_changes_within_its_refresh(api: Api, tmp_path: Path) -> None:
    other_store = Store(api.controller.config.database)
    clock = [T0]
    other = Controller(api.controller.config, other_store, clock=lambda: clock[0])
    from gwms_obs.controller.policy import Attributes

    here = Attributes(site="T2_A")
    assert other.decide(here).kind == "default"
    api.create("site_admin", **SITE_OFF)
    clock[0] += api.controller.config.refresh_seconds / 2
    assert other.decide(here).kind == "default"  # not yet looked
    clock[0] += api.controller.config.refresh_seconds
    assert other.decide(here).effect.verbosity.label == "off"
    other_store.close()


def test_metrics_count_decisions_denials_changes_and_active_rules(api: Api) -> None:
    api.create("site_admin", **SITE_OFF)
    api.create("vo_manager", **SITE_OFF)
    for _ in range(3):
        api.decide(site="T2_A")
    api.decide(site="T2_B")
    text = api.client.get("/metrics").text
    for line in (
        'gwms_controller_decisions_total{kind="site",verbosity="off"} 3.0',
        'gwms_controller_decisions_total{kind="default",verbosity="phases"} 1.0',
        'gwms_controller_denials_total{reason="wrong_kind"} 1.0',
        'gwms_controller_changes_total{action="create"} 1.0',
        'gwms_controller_rules{kind="site"} 1.0',
        'gwms_controller_rules{kind="cap"} 0.0',
    ):
        assert line in text, line


def test_healthz_names_the_schema(api: Api) -> None:
    assert api.client.get("/healthz").json() == {"status": "ok", "schema": api.controller.store.head()}


@pytest.mark.parametrize(
    "query",
    ["site=T2_A&entry=E1", "site=T2%5FA&entry=E+1&pilot=p%2F1%20x", "site=&entry", "a=1&&b=%zz&c=%C3%A9+%2B",
     "site=T2_A&site=T2_B", "=x&pilot=é", ""],
)  # fmt: skip
def test_query_strings_read_as_parse_qsl_reads_them(query: str) -> None:
    from urllib.parse import parse_qsl

    from gwms_obs.controller.api import _query

    raw = query.encode("utf-8")
    assert list(_query(raw)) == parse_qsl(raw.decode("latin-1"), keep_blank_values=True)


# --- hostile input (issue 29): every refusal a 4xx, audited and counted --------------------------


@pytest.fixture
def lax(api: Api) -> Iterator[TestClient]:
    """The same application, answering a server error with its 500 instead of raising it into the test."""
    with TestClient(create_app(api.controller, "s" * 40), raise_server_exceptions=False) as client:
        yield client


def _counted(client: TestClient, reason: str) -> float:
    line = f'gwms_controller_denials_total{{reason="{reason}"}} '
    found = [x for x in client.get("/metrics").text.splitlines() if x.startswith(line)]
    return float(found[0].split()[-1]) if found else 0.0


DEEP = b'{"kind": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"  # 60 kB, inside the 64 KiB cap


@pytest.mark.parametrize(
    "raw",
    [
        DEEP,
        b'{"kind":"site","selector":{"site":"T2_A"},"effect":{"verbosity":"off"},"reason":"r","hours":1'
        + b"0" * 400
        + b"}",
        b'{"kind":"site","selector":{"site":"T2_A"},"effect":{"verbosity":"off","sample":1'
        + b"0" * 400
        + b'},"reason":"r","hours":1}',
        b'{"kind":"operator","selector":{},"effect":{"verbosity":"off"},"reason":"r","expires":1' + b"0" * 400 + b"}",
        b'{"kind":"site","selector":{"site":"T2_A"},"effect":{"verbosity":{}},"reason":"r","hours":1}',
        b'{"kind":"site","selector":{"site":"T2_A"},"effect":{"verbosity":true},"reason":"r","hours":1}',
        b'{"kind":"site","selector":{"site":{"x":[1]}},"effect":{"verbosity":"off"},"reason":"r","hours":1}',
        b'{"kind":"site","selector":{"site":"T2_A"},"effect":{"verbosity":"off"},"reason":"\\ud800","hours":1}',
        b'{"\\ud800":1}',
        b'{"kind":"\\udfff"}',
    ],
    ids=[
        "deep",
        "hours-10e400",
        "sample-10e400",
        "expires-10e400",
        "verbosity-object",
        "verbosity-true",
        "selector-object",
        "reason-surrogate",
        "field-surrogate",
        "kind-surrogate",
    ],
)
def test_bad_json_of_any_shape_is_a_400_audited_and_counted(api: Api, lax: TestClient, raw: bytes) -> None:
    h = {**api.as_("operator"), "content-type": "application/json"}
    r = lax.post("/v1/rules", headers=h, content=raw)
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"] == "invalid" and "Traceback" not in r.text
    [entry] = audit(api)
    assert (entry["action"], entry["attempted"], entry["outcome"]) == ("denied", "create", "invalid")
    assert _counted(lax, "invalid") == 1
    assert api.controller.rules() == []


@pytest.mark.parametrize("raw", ["²", "١٢", "12x", "9" * 19])
def test_ids_and_numbers_that_are_not_ascii_digits_are_refused_not_500(api: Api, lax: TestClient, raw: str) -> None:
    h = api.as_("operator")
    assert lax.get(f"/v1/rules/{raw}", headers=h).status_code == 404
    r = lax.post(f"/v1/rules/{raw}/expire", headers=h, json={"reason": "r"})
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    assert lax.get(f"/v1/audit?limit={raw}", headers=h).status_code == 400
    assert lax.get(f"/v1/audit?rule={raw}", headers=h).status_code == 400
    # a header is latin-1: "²" is a digit to str.isdigit, and no number to int()
    r = lax.post("/v1/rules", headers={**h, "content-length": raw.encode("latin-1", "replace")}, content=b"")
    assert r.status_code == 400, r.text


@pytest.mark.parametrize("reason", ["stop\ud800", "stop\x00now", "a\u202egnp.exe", "two\nlines"])
def test_a_reason_that_cannot_be_stored_or_shown_is_refused_and_the_refusal_audited(
    api: Api, lax: TestClient, reason: str
) -> None:
    """A surrogate cannot be stored (SQLite), a NUL neither (PostgreSQL); controls and bidi overrides mislead
    the page's reader."""
    made = api.create("site_admin", **SITE_OFF).json()
    h = {**api.as_("site_admin"), "content-type": "application/json"}

    def body(**fields: Any) -> bytes:
        return json.dumps(fields).encode()  # ASCII, a lone surrogate as its \u escape (as any client may send it)

    attempts = [
        lax.post("/v1/rules", headers=h, content=body(**{**SITE_OFF, "reason": reason})),
        lax.post(f"/v1/rules/{made['id']}/expire", headers=h, content=body(reason=reason)),
        lax.request(
            "DELETE", f"/v1/rules/{made['id']}", headers={**h, **api.as_("operator")}, content=body(reason=reason)
        ),
    ]
    for r in attempts:
        assert r.status_code == 400 and r.json()["error"] == "invalid" and "reason" in r.json()["detail"], r.text
    entries = audit(api)[:3]
    assert [(e["attempted"], e["outcome"]) for e in entries] == [
        ("delete", "invalid"), ("expire", "invalid"), ("create", "invalid")]  # fmt: skip
    for e in entries:  # what was typed, kept in a form every backend stores and every page shows
        assert e["reason"] and e["reason"] == e["reason"].encode("utf-8").decode("utf-8")
        assert e["reason"].isprintable(), e["reason"]
        assert "\\" in e["reason"]  # the offending character, escaped
    assert _counted(lax, "invalid") == 3
    assert [r.id for r in api.controller.rules(active_only=True)] == [made["id"]]


@pytest.mark.parametrize(
    "when", [1e300, T0 * 1000, T0 + 11 * 366 * 86400], ids=["1e300", "milliseconds", "eleven-years"]
)
def test_an_expiry_beyond_any_sane_time_is_refused(api: Api, when: float) -> None:
    for role, body in (("operator", {**SITE_OFF, "kind": "operator"}), ("site_admin", SITE_OFF)):
        r = api.create(role, **{k: v for k, v in body.items() if k != "hours"}, expires=when)
        assert r.status_code == 400 and "expires" in r.json()["detail"], r.text
        assert audit(api)[0]["outcome"] == "invalid"
    r = api.create("operator", **{**SITE_OFF, "kind": "operator", "hours": 11 * 366 * 24})
    assert r.status_code == 400 and "hours" in r.json()["detail"]
    assert api.controller.rules() == []


def test_the_effective_table_is_bounded_per_asker_and_ages(api: Api) -> None:
    """A pilot token making up scopes fills its own share of the table, not the operators' whole page."""
    from gwms_obs.controller import service

    h = api.as_("pilot")
    assert api.client.get("/v1/decide?site=T2_A&entry=REAL_CE", headers=api.as_("reader")).status_code == 200
    for i in range(service.MAX_SEEN_PER_ASKER + 300):
        assert api.client.get(f"/v1/decide?site=FAKE_{i}&entry=E", headers=h).status_code == 200
    # junk that could mislead a reader is decided for, never listed
    assert api.client.get("/v1/decide?site=%E2%80%AEevil&entry=%00", headers=h).status_code == 200
    rows = api.get("/v1/effective")["effective"]
    sites = [r["scope"]["site"] for r in rows]
    assert len(sites) == service.MAX_SEEN_PER_ASKER + 1
    assert "T2_A" in sites  # another asker's scope survives the flood
    assert not any("\u202e" in s or "\x00" in s for s in sites)
    api.clock[0] += service.SEEN_SECONDS + 1
    assert api.get("/v1/effective")["effective"] == []  # nobody asked lately
