"""The controller's web page over a real SQLite store: logins, CSRF, the override forms, refusals, expiry.

Each role browses with a TestClient of its own (its own cookie jar) over one
application; the clock is the test's, so expiry is a number the test moves.
"""

from __future__ import annotations

import base64
import html
import json
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.controller import config as C
from gwms_obs.controller import web
from gwms_obs.controller.api import create_app
from gwms_obs.controller.service import Controller
from gwms_obs.controller.store import Store
from tests.support.controller import in_process, in_process_config

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's notice about httpx versions
    import httpx
    from starlette.testclient import TestClient

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
SECRET = "s" * 40
SCOPES = [
    {"factory": "gf1", "entry": "CMS_T2_A_ce1", "site": "T2_A", "frontend": "cms"},
    {"factory": "gf1", "entry": "CMS_T2_B_ce1", "site": "T2_B", "frontend": "cms"},
]


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def text_of(page: str) -> str:
    """The page's text, tags dropped and whitespace collapsed: what a reader sees."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


@dataclass
class Site:
    controller: Controller
    tokens: dict[str, str]
    clock: list[float]
    app: Any
    clients: list[TestClient] = field(default_factory=list)

    def browser(self) -> TestClient:
        client = TestClient(self.app, follow_redirects=False)
        self.clients.append(client)
        return client

    def login(self, role: str) -> TestClient:
        client = self.browser()
        r = client.post("/login", data={"csrf": csrf_of(client.get("/login").text), "token": self.tokens[role]})
        assert r.status_code == 303 and r.headers["location"] == "/", r.text
        return client

    def audit(self) -> list[dict[str, Any]]:
        return [e.as_dict() for e in self.controller.audit()]


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with in_process(tmp_path, T0, scopes=SCOPES) as ip:
        s = Site(ip.controller, ip.tokens, ip.clock, create_app(ip.controller, SECRET))
        yield s
        for c in s.clients:
            c.close()


def post_form(client: TestClient, path: str = "/rules", **fields: str) -> httpx.Response:
    """Submit a form as the browser would: with the CSRF token of the page it came from."""
    page = client.get("/").text
    r: httpx.Response = client.post(path, data={"csrf": csrf_of(page), **fields})
    return r


SITE_FORM = {"kind": "site", "site": "T2_A", "level": "commands", "sample": "0.5", "record_commands": "1",
             "hours": "2", "reason": "debugging GGUS-4242"}  # fmt: skip


def effective_row(page: str, entry: str) -> str:
    row = re.search(r"<tr>\s*<th scope=\"row\">[^<]*</th>\s*<td>" + re.escape(entry) + r"</td>.*?</tr>", page, re.S)
    assert row, f"no effective row for {entry}"
    return text_of(row.group(0))


# --- logging in and out ---------------------------------------------------------------------------


def test_pages_need_a_login_and_logout_ends_it(site: Site) -> None:
    anonymous = site.browser()
    assert anonymous.get("/").headers["location"] == "/login"
    assert anonymous.get("/audit").headers["location"] == "/login"
    page = anonymous.get("/login")
    assert page.status_code == 200 and '<label for="token">' in page.text and 'type="password"' in page.text

    client = site.login("site_admin")
    page = client.get("/")
    assert page.status_code == 200
    seen = text_of(page.text)
    assert "Logged in as site_admin-1 (site_admin)." in seen
    assert "You are site_admin-1 , site_admin (sites T2_A)" in seen

    r = client.post("/logout", data={"csrf": csrf_of(page.text)})
    assert r.status_code == 303 and r.headers["location"] == "/login"
    assert "Logged out." in client.get("/login").text
    assert client.get("/").headers["location"] == "/login"


def test_a_token_not_in_the_config_cannot_log_in(site: Site) -> None:
    client = site.browser()
    for token in (C.new_token(), "", "gwmsc_" + "x" * 600):
        r = client.post("/login", data={"csrf": csrf_of(client.get("/login").text), "token": token})
        assert r.status_code == 401
        assert 'role="alert"' in r.text and "That token is not valid here" in r.text
        assert "set-cookie" not in r.headers or "sub" not in _session(r.headers["set-cookie"])
    assert client.get("/").headers["location"] == "/login"
    metrics = client.get("/metrics").text
    assert "gwms_controller_auth_failures_total 3.0" in metrics


def _session(set_cookie: str) -> dict[str, Any]:
    """The session cookie's content: base64 JSON, then itsdangerous' timestamp and signature."""
    value = re.search(web.SESSION_COOKIE + r"=([^;]+)", set_cookie)
    assert value, set_cookie
    payload = value.group(1).split(".")[0]
    decoded: dict[str, Any] = json.loads(base64.b64decode(payload + "=" * (-len(payload) % 4)))
    return decoded


def test_the_session_cookie_holds_a_session_id_never_the_token(site: Site) -> None:
    client = site.browser()
    token = site.tokens["operator"]
    r = client.post("/login", data={"csrf": csrf_of(client.get("/login").text), "token": token})
    cookie = r.headers["set-cookie"]
    assert token not in cookie
    session = _session(cookie)
    assert set(session) == {"sid", "csrf", "flash"} and len(session["sid"]) >= 43  # 256 random bits
    assert token not in json.dumps(session) and C.token_hash(token) not in json.dumps(session)
    flags = cookie.lower()
    assert "httponly" in flags and "samesite=strict" in flags and f"max-age={8 * 3600}" in flags


def test_a_token_removed_from_the_config_ends_its_sessions(site: Site, tmp_path: Path) -> None:
    """The config edited and the controller restarted (same session secret): the old cookie is worth nothing."""
    client = site.login("site_admin")
    assert client.get("/").status_code == 200
    kept = {r: t for r, t in site.tokens.items() if r != "site_admin"}
    store = Store(f"sqlite:///{tmp_path}/controller.db")
    restarted = Controller(in_process_config(store.url, kept), store, clock=lambda: site.clock[0])
    with TestClient(create_app(restarted, SECRET), follow_redirects=False) as after:
        after.cookies = client.cookies
        assert after.get("/").headers["location"] == "/login"
        r = after.post("/rules", data={"csrf": "anything", **SITE_FORM})
        assert r.status_code == 401 and "Not logged in" in r.text
    store.close()


# --- CSRF -----------------------------------------------------------------------------------------


def test_every_post_needs_the_sessions_csrf_token(site: Site) -> None:
    anonymous = site.browser()
    r = anonymous.post("/login", data={"token": site.tokens["operator"]})  # no session, no token
    assert r.status_code == 403 and "CSRF" in r.text
    anonymous.get("/login")
    r = anonymous.post("/login", data={"csrf": "forged", "token": site.tokens["operator"]})
    assert r.status_code == 403

    client = site.login("site_admin")
    page = client.get("/").text
    real = csrf_of(page)
    altered = real[:-1] + ("B" if real.endswith("A") else "A")  # one character off, never the token itself
    for data in (SITE_FORM, {**SITE_FORM, "csrf": ""}, {**SITE_FORM, "csrf": altered}):
        r = client.post("/rules", data=data)
        assert r.status_code == 403 and "CSRF" in r.text
    assert client.post("/logout", data={}).status_code == 403
    assert site.controller.rules() == []
    # a JSON or multipart body is not one of the page's forms
    r = client.post("/rules", json={**SITE_FORM, "csrf": csrf_of(page)})
    assert r.status_code == 415


def test_login_starts_a_new_session(site: Site) -> None:
    """Session fixation: a CSRF token planted before the login is refused after it."""
    client = site.browser()
    planted = csrf_of(client.get("/login").text)
    client.post("/login", data={"csrf": planted, "token": site.tokens["site_admin"]})
    fresh = csrf_of(client.get("/").text)
    assert fresh != planted
    assert client.post("/rules", data={"csrf": planted, **SITE_FORM}).status_code == 403
    assert client.post("/rules", data={"csrf": fresh, **SITE_FORM}).status_code == 303


# --- the site admin's override --------------------------------------------------------------------


def test_a_site_admin_sets_a_two_hour_override_and_it_expires(site: Site) -> None:
    client = site.login("site_admin")
    page = client.get("/").text
    assert 'id="site-form"' in page and 'id="vo-form"' not in page
    assert '<option value="T2_A"' in page  # the admin's sites, as a select
    assert effective_row(page, "CMS_T2_A_ce1").startswith("T2_A CMS_T2_A_ce1 cms gf1 phases 1 no default")

    r = client.post("/rules", data={"csrf": csrf_of(page), **SITE_FORM})
    assert r.status_code == 303 and r.headers["location"] == "/"
    page = client.get("/").text
    seen = text_of(page)
    assert "Rule 1 created: site [site=T2_A] at commands until 2027-01-15T10:00:00Z (in 2 h)." in seen
    rule = text_of(re.search(r'<tr id="rule-1".*?</tr>', page, re.S).group(0))  # type: ignore[union-attr]
    assert rule.startswith("1 site site=T2_A commands, sample 0.5, command lines yes site_admin-1 site_admin")
    assert "debugging GGUS-4242" in rule
    assert "2027-01-15T08:00:00Z now 2027-01-15T10:00:00Z in 2 h" in rule
    assert effective_row(page, "CMS_T2_A_ce1").startswith("T2_A CMS_T2_A_ce1 cms gf1 commands 0.5 yes rule 1 (site)")
    assert effective_row(page, "CMS_T2_B_ce1").startswith("T2_B CMS_T2_B_ce1 cms gf1 phases 1 no default")
    audit = re.search(r'<table class="audit">.*?</table>', page, re.S).group(0)  # type: ignore[union-attr]
    assert "site_admin-1" in audit and "debugging GGUS-4242" in audit
    assert "→ site [site=T2_A]: commands, sample 0.5, command lines yes, until 2027-01-15T10:00:00Z" in audit
    assert site.audit()[0]["action"] == "create" and site.audit()[0]["outcome"] == "ok"

    site.clock[0] += 60  # a minute later
    page = client.get("/").text
    assert "in 1 h 59 min" in text_of(re.search(r'<tr id="rule-1".*?</tr>', page, re.S).group(0))  # type: ignore[union-attr]

    site.clock[0] = T0 + 2 * 3600  # the expiry passes
    page = client.get("/").text
    assert 'id="rule-1"' not in page and "No rules in force" in page
    assert effective_row(page, "CMS_T2_A_ce1").startswith("T2_A CMS_T2_A_ce1 cms gf1 phases 1 no default")
    page = client.get("/?all=1").text
    expired = text_of(re.search(r'<tr id="rule-1".*?</tr>', page, re.S).group(0))  # type: ignore[union-attr]
    assert "2027-01-15T10:00:00Z now" in expired and "Expire" not in expired


def test_a_site_admin_sets_a_ceiling_and_expires_a_rule(site: Site) -> None:
    client = site.login("site_admin")
    assert post_form(client, **SITE_FORM).status_code == 303
    assert post_form(client, **{**SITE_FORM, "ceiling": "1", "level": "scripts", "reason": "cap"}).status_code == 303
    page = client.get("/").text
    assert 'class="badge kind-cap">cap<' in page
    # the override asks for commands, the site's ceiling cuts it to scripts
    assert effective_row(page, "CMS_T2_A_ce1").startswith(
        "T2_A CMS_T2_A_ce1 cms gf1 scripts 0.5 no rule 1 (site) rule 2"
    )
    assert 'action="/rules/1/expire"' in page and 'action="/rules/2/expire"' in page
    # above its own ceiling, a new override is refused
    r = post_form(client, **SITE_FORM)
    assert r.status_code == 403 and "above_cap" in r.text

    r = post_form(client, "/rules/1/expire", reason="done debugging")
    assert r.status_code == 303
    page = client.get("/").text
    assert "Rule 1 expired." in page
    # back to the default, still under the site's ceiling (sample 0.5)
    assert effective_row(page, "CMS_T2_A_ce1") == "T2_A CMS_T2_A_ce1 cms gf1 phases 0.5 no default rule 2"
    entry = site.audit()[0]
    assert [entry[k] for k in ("action", "rule_id", "reason", "outcome")] == ["expire", 1, "done debugging", "ok"]
    # an expiry needs a reason too; refused, and nothing changes
    r = post_form(client, "/rules/2/expire", reason=" ")
    assert r.status_code == 400 and "a change needs a reason" in r.text
    assert site.controller.rule(2).active(site.clock[0])  # type: ignore[union-attr]


def test_a_refused_form_comes_back_with_the_reason_and_what_was_typed(site: Site) -> None:
    client = site.login("site_admin")
    cases = [
        ({"sample": "2"}, 400, "invalid", "sample 2.0: a ratio in [0, 1]"),
        ({"hours": "-1"}, 400, "invalid", "duration in hours: more than 0"),
        ({"hours": str(24 * 31)}, 400, "invalid", "may last 720 h at most"),
        ({"level": "everything"}, 400, "invalid", "verbosity 'everything'"),
        ({"reason": ""}, 400, "invalid", "a change needs a reason"),
        ({"site": "T2_B"}, 403, "out_of_scope", "site T2_B is not one of T2_A"),
    ]
    for change, status, reason, detail in cases:
        r = post_form(client, **{**SITE_FORM, **change})
        assert r.status_code == status, (change, r.status_code)
        alert = text_of(re.search(r'<div class="error" role="alert".*?</div>', r.text, re.S).group(0))  # type: ignore[union-attr]
        assert f"Refused (create): {reason}." in alert and detail in alert, alert
        assert r.text.count('role="alert"') == 1
        if change.get("reason") != "":
            assert 'value="debugging GGUS-4242"' in r.text  # the reason typed is still there
    assert site.controller.rules() == []
    assert [e["outcome"] for e in site.audit()] == [c[2] for c in reversed(cases)]


# --- the VO manager -------------------------------------------------------------------------------


def test_a_vo_manager_is_refused_the_site_form(site: Site) -> None:
    client = site.login("vo_manager")
    page = client.get("/").text
    assert 'id="vo-form"' in page and 'id="site-form"' not in page
    assert '<option value="cms"' in page

    for kind in ("site", "cap"):
        form = {**SITE_FORM, "ceiling": "1"} if kind == "cap" else SITE_FORM
        r = post_form(client, **form)
        assert r.status_code == 403
        seen = text_of(r.text)
        assert f"Refused (create): wrong_kind. a vo_manager may not make {kind} rules" in seen
        assert "Nothing was changed; the refusal is in the audit log." in seen
        entry = site.audit()[0]
        assert (entry["actor"], entry["action"], entry["attempted"], entry["outcome"]) == (
            "vo_manager-1", "denied", "create", "wrong_kind")  # fmt: skip
        assert entry["after"]["kind"] == kind and entry["after"]["selector"] == {"site": "T2_A"}
    assert site.controller.rules() == []
    # the refusals show in the page's audit log as denials
    audit = text_of(re.search(r'<table class="audit">.*?</table>', client.get("/").text, re.S).group(0))  # type: ignore[union-attr]
    assert "create refused: site [site=T2_A]" in audit and "denied: wrong_kind" in audit

    # a frontend that is not theirs
    r = post_form(client, kind="vo", frontend="atlas", level="scripts", sample="1", hours="2", reason="x")
    assert r.status_code == 403 and "out_of_scope" in r.text and "frontend atlas is not one of cms" in text_of(r.text)
    assert site.audit()[0]["outcome"] == "out_of_scope"

    # their own frontend, at one site
    r = post_form(client, kind="vo", frontend="cms", site="T2_B", level="scripts", sample="1", hours="1", reason="y")
    assert r.status_code == 303
    page = client.get("/").text
    assert effective_row(page, "CMS_T2_B_ce1").startswith("T2_B CMS_T2_B_ce1 cms gf1 scripts 1 no rule 1 (vo)")
    assert 'action="/rules/1/expire"' in page


def test_the_expire_button_shows_only_where_the_role_may_use_it(site: Site) -> None:
    admin = site.login("site_admin")
    assert post_form(admin, **SITE_FORM).status_code == 303
    assert 'action="/rules/1/expire"' in admin.get("/").text
    vo = site.login("vo_manager")
    page = vo.get("/").text
    assert 'id="rule-1"' in page and 'action="/rules/1/expire"' not in page
    r = post_form(vo, "/rules/1/expire", reason="mine now")  # the server checks anyway
    assert r.status_code == 403 and "wrong_kind" in r.text
    assert site.audit()[0]["outcome"] == "wrong_kind" and site.controller.rule(1).expires == T0 + 7200  # type: ignore[union-attr]


# --- read-only tokens, the operator ---------------------------------------------------------------


@pytest.mark.parametrize("role", ["reader", "pilot"])
def test_read_only_tokens_get_no_forms_and_their_posts_are_refused(site: Site, role: str) -> None:
    admin = site.login("site_admin")
    assert post_form(admin, **SITE_FORM).status_code == 303
    client = site.login(role)
    page = client.get("/").text
    assert 'action="/rules"' not in page and "/expire" not in page and "<select" not in page
    assert 'id="rule-1"' in page and "CMS_T2_A_ce1" in page  # but they read everything
    seen = text_of(page)
    assert f"You are {role}-1 , {role} (read only)" in seen

    r = post_form(client, **SITE_FORM)
    assert r.status_code == 403 and f"read_only. a {role} token reads, never writes" in text_of(r.text)
    r = post_form(client, "/rules/1/expire", reason="no")
    assert r.status_code == 403 and "read_only" in r.text
    assert [e["outcome"] for e in site.audit()[:2]] == ["read_only", "read_only"]
    assert len(site.controller.rules(active_only=True)) == 1


def test_an_operator_gets_both_forms_and_types_the_site(site: Site) -> None:
    client = site.login("operator")
    page = client.get("/").text
    assert 'id="site-form"' in page and 'id="vo-form"' in page
    assert '<input type="text" id="site-site" name="site" required list="known-sites"' in page
    assert '<option value="T2_B">' in page  # the datalist of known sites
    assert post_form(client, **{**SITE_FORM, "site": "T2_B", "hours": "1000"}).status_code == 303
    assert site.controller.rules()[0].expires == T0 + 1000 * 3600  # no limit on an operator's duration


# --- the audit page, headers ----------------------------------------------------------------------


def test_the_audit_page_pages_by_id(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(web, "AUDIT_PAGE", 3)
    client = site.login("site_admin")
    for i in range(5):
        assert post_form(client, **{**SITE_FORM, "reason": f"change {i}"}).status_code == 303
    page = client.get("/audit").text
    assert [int(x) for x in re.findall(r"<tr class=\"ok\">\s*<td>(\d+)</td>", page)] == [5, 4, 3]
    assert 'href="/audit?before=3"' in page
    page = client.get("/audit?before=3").text
    assert [int(x) for x in re.findall(r"<tr class=\"ok\">\s*<td>(\d+)</td>", page)] == [2, 1]
    assert "before=" not in page.split('class="pager"')[1] and 'href="/audit">Newest' in page
    page = client.get("/audit?rule=4").text
    assert [int(x) for x in re.findall(r"<tr class=\"ok\">\s*<td>(\d+)</td>", page)] == [4]
    assert client.get("/audit?before=x").status_code == 400


def test_every_page_has_the_security_headers(site: Site) -> None:
    client = site.login("operator")
    for path, status in (("/login", 303), ("/", 200), ("/audit", 200), ("/static/style.css", 200), ("/nope", 404)):
        r = client.get(path)
        assert r.status_code == status, path
        csp = r.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "no-referrer"
        assert r.headers["x-content-type-options"] == "nosniff"
        if path != "/static/style.css":
            assert r.headers["cache-control"] == "no-store"
    for path in ("/", "/audit", "/login"):
        body = site.browser().get(path).text if path == "/login" else client.get(path).text
        assert "<script" not in body and " style=" not in body  # nothing the CSP would block
    assert site.browser().post("/login", data={}).headers["cache-control"] == "no-store"


def test_every_field_has_a_label(site: Site) -> None:
    page = site.login("operator").get("/").text
    ids = set(re.findall(r'<(?:input|select)[^>]*\bid="([^"]+)"', page))
    labels = set(re.findall(r'<label for="([^"]+)"', page))
    assert ids and ids <= labels, ids - labels
    assert all(re.search(r'<th scope="col">', t) for t in re.findall(r"<thead>.*?</thead>", page, re.S))


# --- hostile input (issue 29) ---------------------------------------------------------------------


def test_logout_ends_the_session_on_the_server(site: Site) -> None:
    """A cookie saved before the logout (copied, stolen, kept by a proxy) is worth nothing after it."""
    client = site.login("site_admin")
    page = client.get("/").text
    saved, csrf = dict(client.cookies), csrf_of(page)
    assert client.post("/logout", data={"csrf": csrf}).status_code == 303
    with TestClient(site.app, follow_redirects=False) as replay:
        replay.cookies = saved
        assert replay.get("/").headers["location"] == "/login"
        assert replay.get("/audit").headers["location"] == "/login"
        r = replay.post("/rules", data={"csrf": csrf, **SITE_FORM})
        assert r.status_code == 401 and "Not logged in" in r.text
    assert site.controller.rules() == []
    # another browser's session of the same token is its own: it stays
    other = site.login("site_admin")
    assert other.get("/").status_code == 200


@pytest.mark.parametrize("role", ["site_admin", "vo_manager", "operator"])
def test_a_refused_absurd_expiry_leaves_every_page_up(site: Site, role: str) -> None:
    """The refusal is audited with what was asked; the page shows it, and answers 200 for everyone after it."""
    lax = TestClient(site.app, raise_server_exceptions=False)
    site.clients.append(lax)
    bodies = {
        "site_admin": {"kind": "site", "selector": {"site": "T2_A"}, "effect": {"verbosity": "off"}},
        "vo_manager": {"kind": "vo", "selector": {"frontend": "cms"}, "effect": {"verbosity": "off"}},
        "operator": {"kind": "operator", "selector": {}, "effect": {"verbosity": "off"}},
    }
    for expires in (1e300, T0 * 1000):  # absurd, and an operator's millisecond timestamp
        r = lax.post("/v1/rules", headers={"Authorization": f"Bearer {site.tokens[role]}"},
                     json={**bodies[role], "reason": "keep it", "expires": expires})  # fmt: skip
        assert r.status_code == 400 and r.json()["error"] == "invalid", r.text
    reader = site.login("reader")
    for path in ("/", "/audit"):
        r = reader.get(path)
        assert r.status_code == 200, (path, r.status_code)
        rows = re.findall(r'<tr class="denied">.*?</tr>', r.text, re.S)
        assert len(rows) == 2 and all("create refused" in x and "denied: invalid" in x for x in rows), rows
    assert site.controller.rules() == []


def _stored_before_the_fix(site: Site) -> None:
    """Rows written straight into the database, as an older controller (or a hand) left them."""
    import sqlalchemy as sa

    from gwms_obs.controller.store import audit_table, rules_table

    with site.controller.store._engine.begin() as conn:
        conn.execute(sa.insert(rules_table).values(
            kind="operator", verbosity=1, sample=1.0, record_commands=False, owner="olga", role="operator",
            reason="ms \u202eclock\x07", created=T0 - 60, expires=T0 * 1000))  # fmt: skip
        request = {"kind": "site", "selector": {"site": "T2_A"}, "effect": {"verbosity": "off"}, "expires": 1e300}
        for after in (json.dumps(request), '{"effect": "not an object", "expires": "soon"}', "[1, 2]", "{oops"):
            conn.execute(sa.insert(audit_table).values(
                at=T0, actor="vic", role="vo_manager", action="denied", attempted="create", rule_id=None,
                before_json=None, after_json=after, reason="why \u202etxt.exe\x00", outcome="invalid",
                detail="a vo_manager's rule may last 720 h at most"))  # fmt: skip
        conn.execute(sa.insert(audit_table).values(
            at=float("inf"), actor="x", role="operator", action="expire", attempted="", rule_id=7,
            before_json=None, after_json=None, reason="r", outcome="ok", detail=""))  # fmt: skip


def test_the_pages_render_any_stored_row(site: Site) -> None:
    """An absurd expiry, a broken audit entry, a control or bidi character stored before the fix: shown, escaped."""
    _stored_before_the_fix(site)
    site.controller._reload(site.clock[0])
    client = site.login("operator")
    for path in ("/", "/?all=1", "/audit"):
        r = client.get(path)
        assert r.status_code == 200, (path, r.status_code)
        assert "\u202e" not in r.text and "\x00" not in r.text and "\x07" not in r.text
        assert "\\u202e" in r.text  # shown, as an escape a reader sees
    page = client.get("/audit").text
    assert "(not a time: 1e+300)" in page
    assert page.count("(this entry could not be read") == 3  # the three that are not a rule request
    rule = text_of(re.search(r'<tr id="rule-1".*?</tr>', client.get("/").text, re.S).group(0))  # type: ignore[union-attr]
    assert "(not a time: 1800000000000.0)" in rule


def test_a_reason_with_a_nul_or_bidi_override_is_refused_and_shown_escaped(site: Site) -> None:
    """Before, the rule was made and its reason reached every reader's audit page as it was."""
    client = site.login("site_admin")
    r = post_form(client, **{**SITE_FORM, "reason": "ok \u202eexe.txt\x00"})
    assert r.status_code == 400 and "Refused (create): invalid." in text_of(r.text)
    assert "\u202e" not in r.text and "\x00" not in r.text
    assert site.controller.rules() == []
    assert site.audit()[0]["reason"] == "ok \\u202eexe.txt\\x00"
    page = site.login("reader").get("/audit").text
    assert "ok \\u202eexe.txt\\x00" in page and "\u202e" not in page
