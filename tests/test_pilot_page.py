"""The controller's pilot pages against a real Jaeger holding a simulated factory's pilot traces.

The traces are the exporter's (``gwms-obs export --once`` through our real
collector, tests/support/pilot_pages.py); the controller runs in this process
over a real SQLite store, each role browsing with a TestClient of its own.
Shown: a site admin reads a pilot of their site (timeline, accounting,
failing test) and gets the very same 404 for another site's pilot as for a
trace id nobody has; the list of an entry's pilots; the login round trip;
hostile text escaped and bounded; Jaeger down or silent as a 502 or a 504
within the timeout, counted. Needs `make otelcol jaeger` (skipped without).
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import socket
import threading
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.controller import config as CC
from gwms_obs.controller.api import create_app
from gwms_obs.controller.service import Controller
from gwms_obs.controller.store import Store
from gwms_obs.outputs import pilot_traces as P
from gwms_obs.settings import ConfigError
from gwms_obs.tracing import conventions as C
from tests.support.pilot_pages import Populated, populated
from tools import render

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # starlette's notice about httpx versions
    from starlette.testclient import TestClient

pytestmark = pytest.mark.live

FAIL_ENTRY = "OSG_US_FAIL_VALIDATION_ce1"  # site FailSite in the simulator
OTHER_ENTRY = "CMSHTPC_T2_US_Nebraska_red"  # site Nebraska
SECRET = "s" * 40
TOKENS = {"operator": "gwmsc_op-" + "o" * 40, "site_admin": "gwmsc_sa-" + "a" * 40, "pilot": "gwmsc_pi-" + "p" * 40,
          "vo_manager": "gwmsc_vo-" + "v" * 40}  # fmt: skip
CMS_FRONTEND = "CMSG-v1_0_cmspilot"  # the simulator's CMS frontend client


@pytest.fixture(scope="module")
def jaeger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Populated]:
    with populated(tmp_path_factory.mktemp("pilot-pages")) as p:
        yield p


def _controller(tmp: Path, **extra: Any) -> Controller:
    tokens = [
        {"name": "op", "role": "operator", "sha256": CC.token_hash(TOKENS["operator"])},
        {"name": "failsite-admin", "role": "site_admin", "sites": ["FailSite"],
         "sha256": CC.token_hash(TOKENS["site_admin"])},
        {"name": "a-pilot", "role": "pilot", "sha256": CC.token_hash(TOKENS["pilot"])},
        {"name": "cms-manager", "role": "vo_manager", "frontends": [CMS_FRONTEND],
         "sha256": CC.token_hash(TOKENS["vo_manager"])},
    ]  # fmt: skip
    cfg = CC.from_dict({"database": f"sqlite:///{tmp}/controller.db", "tokens": tokens, **extra})
    store = Store(cfg.database)
    store.migrate()
    return Controller(cfg, store)


def _login(app: Any, role: str, next_path: str | None = None) -> TestClient:
    c = TestClient(app, follow_redirects=False)
    page = c.get("/login" + (f"?next={next_path}" if next_path else "")).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', page)
    assert csrf
    form = {"csrf": csrf.group(1), "token": TOKENS[role], **({"next": next_path} if next_path else {})}
    r = c.post("/login", data=form)
    assert r.status_code == 303, r.text
    assert r.headers["location"] == (next_path or "/")
    return c


def text_of(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


def _failed_validation(p: Populated) -> dict[str, Any]:
    def failed(t: dict[str, Any]) -> bool:
        return any(
            s["operationName"] == P.SPAN_VALIDATION
            and any(x["key"] == "otel.status_code" and x["value"] == "ERROR" for x in s["tags"])
            for s in t["spans"]
        )

    return next(t for t in p.of_entry(FAIL_ENTRY) if failed(t))


def _tag(span: dict[str, Any], key: str) -> Any:
    return next((x["value"] for x in span["tags"] if x["key"] == key), None)


def _jaeger_requests(ctl: Controller, outcome: str) -> float:
    v = ctl.metrics.registry.get_sample_value("gwms_controller_jaeger_requests_total", {"outcome": outcome})
    return v or 0.0


def test_a_site_admin_reads_a_pilot_of_their_site_and_not_another_sites(jaeger: Populated, tmp_path: Path) -> None:
    ctl = _controller(tmp_path, jaeger_query_url=jaeger.jaeger)
    app = create_app(ctl, SECRET)
    admin = _login(app, "site_admin")
    t = _failed_validation(jaeger)
    r = admin.get(f"/pilots/{t['traceID']}")
    assert r.status_code == 200, r.text
    page = text_of(r.text)
    root = next(s for s in t["spans"] if s["operationName"] == C.SPAN_PILOT)
    res = jaeger.resource(t)
    assert f"Pilot {res[C.CONDOR_CLUSTER]}.{res[C.CONDOR_PROC]} at {FAIL_ENTRY}" in page
    assert "Site FailSite" in page and "Outcome validation_failed" in page
    validation = next(s for s in t["spans"] if s["operationName"] == P.SPAN_VALIDATION)
    test = _tag(validation, P.FAILED_TEST)
    assert test and f"Failing test: {test}" in page
    # the timeline: one row per span, in tree order, each with its bar
    rows = re.findall(r'<tr class="span depth-(\d)[^"]*">\s*<th scope="row" class="name">([^<]+)', r.text)
    tree = [(int(d), n) for d, n in rows]
    assert tree[0] == (0, C.SPAN_PILOT)
    # the queue (the event log's, read before the .out), then the worker node
    assert [n for d, n in tree if d == 1] == [P.SPAN_QUEUED, P.SPAN_RUNNING]
    assert sorted(n for _, n in rows) == sorted(s["operationName"] for s in t["spans"])
    assert len(re.findall(r'<rect class="fill', r.text)) == len(t["spans"])
    assert 'class="fill error"' in r.text  # the failed validation's bar
    # the accounting: the root's categories, to the second
    cpu = {
        x["key"][len(P.CPU_SECONDS) :]: float(x["value"]) for x in root["tags"] if x["key"].startswith(P.CPU_SECONDS)
    }
    assert cpu and set(cpu) == {"validation_failed"}
    assert f"cpu validation_failed {cpu['validation_failed']:.0f}" in page
    assert "100.0 %" in page
    assert _tag(root, C.PROCESS_EXIT_CODE) is None or f"Exit code {_tag(root, C.PROCESS_EXIT_CODE)}" in page
    # no link where none is configured
    assert "jaeger-link" not in r.text and "grafana-link" not in r.text

    # another site's pilot: the same 404 as a trace id Jaeger never had (no probing)
    other = jaeger.of_entry(OTHER_ENTRY)[0]
    r_other = admin.get(f"/pilots/{other['traceID']}")
    r_none = admin.get(f"/pilots/{'ab' * 16}")
    r_bad = admin.get("/pilots/not-a-trace-id")
    assert r_other.status_code == r_none.status_code == r_bad.status_code == 404
    assert text_of(r_other.text) == text_of(r_none.text) == text_of(r_bad.text)
    assert "No such pilot" in text_of(r_other.text)
    # the operator sees it; a pilot's token sees none
    assert _login(app, "operator").get(f"/pilots/{other['traceID']}").status_code == 200
    assert _login(app, "pilot").get(f"/pilots/{t['traceID']}").status_code == 404
    assert _jaeger_requests(ctl, "ok") == 3 and _jaeger_requests(ctl, "not_found") == 1


def test_an_entrys_pilot_list_links_each_pilot_the_viewer_may_see(jaeger: Populated, tmp_path: Path) -> None:
    ctl = _controller(tmp_path, jaeger_query_url=jaeger.jaeger)
    app = create_app(ctl, SECRET)
    admin = _login(app, "site_admin")
    want = {t["traceID"] for t in jaeger.of_entry(FAIL_ENTRY)}
    assert want
    r = admin.get(f"/pilots?entry={FAIL_ENTRY}&since=30d")
    assert r.status_code == 200, r.text
    assert set(re.findall(r'href="/pilots/([0-9a-f]{32})"', r.text)) == want
    assert "validation failed: " in text_of(r.text)  # the failed ones say which test
    # another site's entry: nothing for this admin, everything for the operator
    others = {t["traceID"] for t in jaeger.of_entry(OTHER_ENTRY)}
    r = admin.get(f"/pilots?entry={OTHER_ENTRY}&since=30d")
    assert r.status_code == 200 and not re.findall(r'href="/pilots/[0-9a-f]{32}"', r.text)
    r = _login(app, "operator").get(f"/pilots?entry={OTHER_ENTRY}&since=30d")
    assert set(re.findall(r'href="/pilots/([0-9a-f]{32})"', r.text)) == others
    # every pilot of every site the admin may see, and none other
    r = admin.get("/pilots?since=30d&limit=500")
    assert set(re.findall(r'href="/pilots/([0-9a-f]{32})"', r.text)) == {
        t["traceID"] for t in jaeger.traces if jaeger.resource(t)[C.SITE] == "FailSite"
    }
    # a VO manager: its frontend's pilots, at every site
    r = _login(app, "vo_manager").get("/pilots?since=30d&limit=500")
    cms = {t["traceID"] for t in jaeger.traces if jaeger.resource(t)[C.CLIENT].split(".")[0] == CMS_FRONTEND}
    assert cms and set(re.findall(r'href="/pilots/([0-9a-f]{32})"', r.text)) == cms
    for bad in ("since=yesterday", "limit=0", "limit=99999", "entry=a%20b", "since=2026-11-02&until=2026-11-01"):
        r = admin.get(f"/pilots?{bad}")
        assert r.status_code == 400, bad


def test_not_logged_in_goes_to_the_login_and_back_to_the_pilot(jaeger: Populated, tmp_path: Path) -> None:
    app = create_app(_controller(tmp_path, jaeger_query_url=jaeger.jaeger), SECRET)
    tid = _failed_validation(jaeger)["traceID"]
    anon = TestClient(app, follow_redirects=False)
    r = anon.get(f"/pilots/{tid}")
    assert r.status_code == 303 and r.headers["location"] == f"/login?next=/pilots/{tid}"
    assert anon.get("/pilots").headers["location"] == "/login?next=/pilots"
    c = _login(app, "site_admin", f"/pilots/{tid}")
    assert c.get(f"/pilots/{tid}").status_code == 200
    # a list, its query kept through the login
    listing = f"/pilots?entry={FAIL_ENTRY}&since=7d"
    r = anon.get(listing)
    assert r.headers["location"] == "/login?next=" + urllib.parse.quote(listing, safe="/")
    c = _login(app, "site_admin", listing)
    assert c.get(listing).status_code == 200
    # a "next" elsewhere is ignored: a login never sends the browser off this site
    c = TestClient(app, follow_redirects=False)
    csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/login?next=https://evil.example/").text)
    assert csrf and "evil" not in c.get("/login?next=https://evil.example/").text
    for bad in ("//evil.example/x", f"/pilots/{tid}\n", f"/pilots/{tid}\nSet-Cookie: x=1", "/pilots/../x", "/rules"):
        c = TestClient(app, follow_redirects=False)
        csrf = re.search(r'name="csrf" value="([^"]+)"', c.get("/login").text)
        assert csrf
        r = c.post("/login", data={"csrf": csrf.group(1), "token": TOKENS["operator"], "next": bad})
        assert r.status_code == 303 and r.headers["location"] == "/", bad


def test_links_to_jaeger_and_grafana_only_when_configured(jaeger: Populated, tmp_path: Path) -> None:
    ctl = _controller(tmp_path, jaeger_query_url=jaeger.jaeger, jaeger_ui_url="http://127.0.0.1:16686/",
                      grafana_url="http://127.0.0.1:3000")  # fmt: skip
    tid = _failed_validation(jaeger)["traceID"]
    r = _login(create_app(ctl, SECRET), "operator").get(f"/pilots/{tid}")
    assert f'id="jaeger-link" href="http://127.0.0.1:16686/trace/{tid}"' in r.text
    link = re.search(r'id="grafana-link" href="([^"]+)"', r.text)
    assert link and link.group(1).startswith("http://127.0.0.1:3000/explore?schemaVersion=1&amp;panes=")
    panes = json.loads(urllib.parse.unquote(html.unescape(link.group(1)).split("panes=", 1)[1]))
    assert panes["t"]["queries"][0]["query"] == tid and panes["t"]["datasource"] == "gwms-obs-jaeger"


def _post_otlp(p: Populated, body: dict[str, Any]) -> None:
    req = urllib.request.Request(
        p.stack.col.traces_url,
        json.dumps(body).encode(),
        {"Content-Type": "application/json", "Authorization": f"Bearer {p.stack.col.token}"},
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def test_hostile_text_from_a_trace_is_escaped_and_bounded(jaeger: Populated, tmp_path: Path) -> None:
    tid = "5" * 32
    now = time.time() - 3600
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>'

    def kv(k: str, v: str) -> dict[str, Any]:
        return {"key": k, "value": {"stringValue": v}}

    def span(sid: str, parent: str, name: str, attrs: list[dict[str, Any]], error: bool = False) -> dict[str, Any]:
        s = {"traceId": tid, "spanId": sid, "parentSpanId": parent, "name": name, "kind": 1,
             "startTimeUnixNano": str(int(now * 1e9)), "endTimeUnixNano": str(int((now + 60) * 1e9)),
             "attributes": attrs}  # fmt: skip
        if error:
            s["status"] = {"code": 2, "message": evil}
        return s

    resource = [kv(C.SERVICE_NAME, C.SERVICE_PILOT), kv(C.ENTRY, FAIL_ENTRY + evil), kv(C.SITE, "FailSite")]
    body = {"resourceSpans": [{"resource": {"attributes": resource}, "scopeSpans": [{"scope": P.SCOPE, "spans": [
        span("1" * 16, "", C.SPAN_PILOT, [kv(P.CPU_SECONDS + evil, "1"), kv(P.OUTCOME, evil)]),
        span("2" * 16, "1" * 16, evil, [kv(P.FAILED_TEST, evil), kv(P.FAILURE_DETAIL, "D" * 50_000)], error=True),
    ]}]}]}  # fmt: skip
    _post_otlp(jaeger, body)
    ctl = _controller(tmp_path, jaeger_query_url=jaeger.jaeger)
    op = _login(create_app(ctl, SECRET), "operator")
    deadline = time.monotonic() + 30
    while (r := op.get(f"/pilots/{tid}")).status_code == 404 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert r.status_code == 200, r.text
    assert "<script>" not in r.text and "<img" not in r.text and "onerror=alert(1)>" not in r.text
    assert "&lt;script&gt;" in r.text
    details = re.search(r'<p id="failure-detail">([^<]*)</p>', r.text)
    assert details and 0 < len(details.group(1)) <= 1000
    assert len(r.text) < 100_000


@pytest.fixture(params=["silent", "dripping"])
def silent_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A TCP port that accepts connections and never answers (a hung Jaeger), or answers a byte at a time
    (each read gets something: only a deadline for the whole answer ends it)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def drip(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            while not stop.wait(0.1):
                conn.sendall(b" ")

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn = srv.accept()[0]
            except OSError:
                continue
            held.append(conn)
            if request.param == "dripping":
                threading.Thread(target=drip, args=(conn,), daemon=True).start()

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    try:
        yield srv.getsockname()[1]
    finally:
        stop.set()
        th.join(5)
        for s in held:
            s.close()
        srv.close()


def test_jaeger_down_or_silent_is_a_clear_page_within_the_timeout(tmp_path: Path, silent_port: int) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    down = closed.getsockname()[1]
    closed.close()  # nothing listens there
    tid = "ab" * 16
    (tmp_path / "down").mkdir()
    ctl = _controller(tmp_path / "down", jaeger_query_url=f"http://127.0.0.1:{down}")
    op = _login(create_app(ctl, SECRET), "operator")
    r = op.get(f"/pilots/{tid}")
    assert r.status_code == 502 and "Jaeger cannot be reached" in text_of(r.text)
    assert op.get("/pilots").status_code == 502
    assert _jaeger_requests(ctl, "error") == 2

    (tmp_path / "silent").mkdir()
    ctl = _controller(tmp_path / "silent", jaeger_query_url=f"http://127.0.0.1:{silent_port}",
                      jaeger_timeout_seconds=1.5)  # fmt: skip
    op = _login(create_app(ctl, SECRET), "operator")
    t0 = time.monotonic()
    r = op.get(f"/pilots/{tid}")
    took = time.monotonic() - t0
    assert r.status_code == 504 and "did not answer within 1.5 s" in text_of(r.text)
    assert 1.4 < took < 5
    assert _jaeger_requests(ctl, "timeout") == 1

    (tmp_path / "none").mkdir()
    op = _login(create_app(_controller(tmp_path / "none"), SECRET), "operator")
    r = op.get(f"/pilots/{tid}")
    assert r.status_code == 404 and "jaeger_query_url" in text_of(r.text)


def test_the_role_template_renders_the_pilot_pages_keys() -> None:
    """The one controller.toml template (Ansible, compose, these tests) carries the pilot pages' keys."""
    tokens = [{"name": "op", "role": "operator", "token": "gwmsc_x"}]
    text = render.render(
        "gwms_controller", "controller.toml.j2", gwms_controller_tokens=tokens,
        gwms_controller_jaeger_query_url="http://jaeger:16686", gwms_controller_jaeger_timeout_seconds=3,
        gwms_controller_grafana_url="https://grafana.example.org",
    )  # fmt: skip
    import tomllib

    cfg = CC.from_dict(tomllib.loads(text))
    assert (cfg.jaeger_query_url, cfg.jaeger_timeout_seconds) == ("http://jaeger:16686", 3.0)
    assert (cfg.jaeger_ui_url, cfg.grafana_url) == (None, "https://grafana.example.org")
    bare = CC.from_dict(tomllib.loads(render.render("gwms_controller", "controller.toml.j2",
                                                    gwms_controller_tokens=tokens)))  # fmt: skip
    assert bare.jaeger_query_url is None and bare.grafana_url is None
    for bad in ("ftp://x", "http://", "http://h/?q=1", 5):
        with pytest.raises(ConfigError, match="jaeger_query_url must be an http"):
            CC.from_dict({"jaeger_query_url": bad})


def test_the_page_reads_the_names_the_exporter_writes() -> None:
    """The controller may not import the exporter (test_module_graph): the names its pilot pages read are
    tracing/conventions.py's, and they are the ones outputs/pilot_traces.py writes."""
    pairs = {
        P.TRACE_SOURCE: C.LOG_TRACE_SOURCE, P.OUTCOME: C.LOG_OUTCOME, P.CPU_SECONDS: C.LOG_CPU_SECONDS,
        P.GPU_SECONDS: C.LOG_GPU_SECONDS, P.JOB_ID: C.LOG_JOB_ID, P.JOB_CATEGORY: C.LOG_JOB_CATEGORY,
        P.JOB_CPUS: C.LOG_JOB_CPUS, P.JOB_CPU_SECONDS: C.LOG_JOB_CPU_SECONDS, P.JOB_CPU_USED: C.LOG_JOB_CPU_USED,
        P.JOB_MEMORY: C.LOG_JOB_MEMORY, P.JOB_MEMORY_USED: C.LOG_JOB_MEMORY_USED, P.JOB_GPUS: C.LOG_JOB_GPUS,
        P.JOB_SIGNAL: C.LOG_JOB_SIGNAL, P.JOB_COUNT: C.LOG_JOB_COUNT, P.HOLD_REASON: C.LOG_HOLD_REASON,
        P.FAILED_TEST: C.LOG_FAILED_TEST, P.FAILURE: C.LOG_FAILURE, P.FAILURE_DETAIL: C.LOG_FAILURE_DETAIL,
        P.EXIT_CODE: C.PROCESS_EXIT_CODE,
    }  # fmt: skip
    assert [k for k, v in pairs.items() if k != v] == []
