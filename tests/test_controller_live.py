"""The controller live, as it runs: SQLite and PostgreSQL, pilots asking it, spans in Jaeger.

Every process is real: `gwms-obs controller serve` (tests/support/controller.py),
a throwaway PostgreSQL (tools/postgres.py), our collector in front of Jaeger
(tests/support/trace_stack.py), and a glidein-like bash script sourcing
pilot/gwms-trace.sh. The rules are made through the HTTP API with the role
tokens a site admin and an operator would hold.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gwms_obs import catalogue
from gwms_obs.tracing import conventions as C
from tests.support.controller import RunningController, controller_server
from tests.support.trace_pilot import LIB, attrs, spool_spans
from tests.support.trace_stack import Stack, stack
from tests.support.traceparent import parse_traceparent
from tools import tracing_backends
from tools.polling import poll
from tools.postgres import PostgresUnavailable, postgres_server

pytestmark = [pytest.mark.live, pytest.mark.slow]

OTHER_SITE = "T2_DE_Other"
DEBUG_ENTRY = "CMS_T2_DE_Other_ce1"


def call(c: RunningController, method: str, path: str, role: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{c.url}{path}", data=data, method=method, headers=c.bearer(role))
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return {"status": e.code, **json.loads(e.read())}


@contextlib.contextmanager
def controller(tmp_path: Path, database: str) -> Iterator[RunningController]:
    if database == "sqlite":
        with controller_server(tmp_path / "controller") as c:
            yield c
        return
    try:
        with postgres_server(tmp_path / "pg") as pg, controller_server(tmp_path / "controller", pg.dsn) as c:
            yield c
    except PostgresUnavailable as e:
        pytest.fail(f"PostgreSQL is a prerequisite (tools/prereqs.sh): {e}")


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_rules_decisions_and_audit_over_http(tmp_path: Path, database: str) -> None:
    with controller(tmp_path, database) as c:
        assert c.database.startswith("sqlite" if database == "sqlite" else "postgresql")
        off = call(c, "POST", "/v1/rules", "site_admin", {
            "kind": "site", "selector": {"site": c.site}, "effect": {"verbosity": "off"}, "reason": "drain",
            "hours": 2})  # fmt: skip
        assert off["owner"] == c.names["site_admin"], off
        refused = call(c, "POST", "/v1/rules", "site_admin", {
            "kind": "site", "selector": {"site": OTHER_SITE}, "effect": {"verbosity": "off"}, "reason": "x",
            "hours": 2})  # fmt: skip
        assert (refused["status"], refused["error"]) == (403, "out_of_scope")
        decided = call(c, "GET", f"/v1/decide?site={c.site}&entry=E&pilot=p1", "pilot")
        assert (decided["verbosity"], decided["rule"], decided["kind"]) == ("off", off["id"], "site")
        expired = call(c, "POST", f"/v1/rules/{off['id']}/expire", "operator", {"reason": "drain over"})
        assert expired["expires"] is not None
        assert call(c, "GET", f"/v1/decide?site={c.site}", "pilot")["kind"] == "default"
        log = call(c, "GET", "/v1/audit", "reader")["audit"]
        assert [(e["action"], e["outcome"]) for e in reversed(log)] == [
            ("create", "ok"), ("denied", "out_of_scope"), ("expire", "ok")]  # fmt: skip
        metrics = urllib.request.urlopen(f"{c.url}/metrics", timeout=10).read().decode()
        assert 'gwms_controller_decisions_total{kind="site",verbosity="off"} 1.0' in metrics
        assert 'gwms_controller_denials_total{reason="out_of_scope"} 1.0' in metrics


# A glidein's skeleton: asks once, a phase, a validation script running one command in a span.
PILOT = r"""
set -euo pipefail
source "$GWMS_TRACE_LIB"
gwms_trace_init "$PWD/spool.jsonl"
t0=$EPOCHREALTIME
gwms_trace_control factory=gfactory-1 "entry=$ENTRY" "site=$SITE" frontend=frontend-cms security_class=main \
  "pilot=$PILOT_ID"
t1=$EPOCHREALTIME
echo "control_us $(( ${t1/./} - ${t0/./} ))"
gwms_trace_phase setup
check_os() { gwms_trace_begin "uname"; uname -r >/dev/null; gwms_trace_end 0; }
gwms_trace_script entry/check_os.sh check_os
gwms_trace_phase_end 0
gwms_trace_flush 0
echo "result $GWMS_TRACE_RESULT"
"""


def run_pilot(
    workdir: Path, st: Stack, c: RunningController, url: str, site: str, entry: str, trace_id: str, timeout: float = 2
) -> tuple[subprocess.CompletedProcess[str], bytes, float]:
    workdir.mkdir(parents=True)
    (workdir / "controller.token").write_text(c.tokens["pilot"] + "\n")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "GWMS_TRACE_LIB": str(LIB),
        "TRACEPARENT": f"00-{trace_id}-00f067aa0ba902b7-01",  # a sampled trace from the factory
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": st.col.traces_url,
        "GWMS_TRACE_TOKEN": st.col.token,
        "GWMS_TRACE_VERBOSITY": "phases",  # the factory's default
        "GWMS_TRACE_CONTROLLER_URL": url,
        "GWMS_TRACE_CONTROLLER_TOKEN_FILE": str(workdir / "controller.token"),
        "GWMS_TRACE_CONTROLLER_TIMEOUT": str(timeout),
        "ENTRY": entry,
        "SITE": site,
        "PILOT_ID": f"glidein_{trace_id[:6]}.0",
    }
    t = time.monotonic()
    p = subprocess.run(["/bin/bash", "-c", PILOT], cwd=workdir, env=env, capture_output=True, text=True, timeout=60,
                       check=False)  # fmt: skip
    elapsed = time.monotonic() - t
    assert p.returncode == 0, p.stderr[-2000:]
    spool = workdir / "spool.jsonl"
    return p, spool.read_bytes() if spool.exists() else b"", elapsed


def jaeger_spans(st: Stack, trace_id: str, n: int) -> list[dict[str, Any]]:
    def there() -> list[dict[str, Any]] | None:
        spans = tracing_backends.jaeger_trace(st.jaeger.query, trace_id)
        return spans if len(spans) >= n else None

    found: list[dict[str, Any]] = poll(f"{n} spans of {trace_id} in Jaeger", there, timeout=60)
    return found


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (Linux /proc), children before grandchildren."""
    out: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop(0)
        for task in Path(f"/proc/{parent}/task").iterdir():
            kids = [int(k) for k in (task / "children").read_text().split()]
            out.extend(kids)
            todo.extend(kids)
    return out


def tags(span: dict[str, Any]) -> dict[str, Any]:
    return {t["key"]: t["value"] for t in span.get("tags", [])}


def test_pilots_obey_the_controller_and_the_trace_says_why(tmp_path: Path) -> None:
    silent, verbose = "1" * 32, "2" * 32
    with stack(tmp_path) as st, controller_server(tmp_path / "controller") as c:
        # the site admin turns tracing off at their site; an operator raises an entry elsewhere to commands
        off = call(c, "POST", "/v1/rules", "site_admin", {
            "kind": "site", "selector": {"site": c.site}, "effect": {"verbosity": "off"}, "reason": "downtime",
            "hours": 2})  # fmt: skip
        raised = call(c, "POST", "/v1/rules", "operator", {
            "kind": "operator", "selector": {"entry": DEBUG_ENTRY},
            "effect": {"verbosity": "commands", "record_commands": True}, "reason": "GGUS-1234"})  # fmt: skip
        assert "id" in off and "id" in raised, (off, raised)

        p, spool, _ = run_pilot(tmp_path / "silent", st, c, c.url, c.site, "CMS_T2_US_Test_ce1", silent)
        assert "result off" in p.stdout and spool == b"", p.stdout

        p, spool, _ = run_pilot(tmp_path / "verbose", st, c, c.url, OTHER_SITE, DEBUG_ENTRY, verbose)
        assert "result sent" in p.stdout, p.stderr[-2000:]
        spans = jaeger_spans(st, verbose, len(spool_spans(spool)))
        by_name = {s["operationName"]: s for s in spans}
        assert {"glidein", "setup", "entry/check_os.sh", "uname"} <= set(by_name), sorted(by_name)
        root = tags(by_name["glidein"])
        assert root[C.CONTROLLER_RULE] == raised["id"] and root[C.CONTROLLER_KIND] == "operator"
        assert root[C.TRACE_VERBOSITY] == "commands" and root[C.CONTROLLER_RESULT] == "answered"
        assert "check_os" in tags(by_name["entry/check_os.sh"]).get("process.command_line", "")
        local = attrs(next(s for s in spool_spans(spool) if s["name"] == "glidein")["attributes"])
        assert local[C.CONTROLLER_RULE] == raised["id"]

        # the collector took the verbose pilot's spans and nothing else: the silent one sent none
        telemetry = tracing_backends.scrape(st.col.telemetry)
        accepted = tracing_backends.metric_sum(telemetry, catalogue.OTELCOL_ACCEPTED_SPANS)
        assert accepted == len(spool_spans(spool))
        assert tracing_backends.jaeger_trace(st.jaeger.query, silent) == []


def test_a_controller_that_does_not_answer_costs_the_pilot_its_timeout_at_most(tmp_path: Path) -> None:
    trace_id = "3" * 32
    with stack(tmp_path) as st, controller_server(tmp_path / "controller") as c:
        server = [c.process.pid, *descendants(c.process.pid)]  # granian's workers hold the socket
        for pid in server:
            os.kill(pid, signal.SIGSTOP)  # the port still accepts connections; nothing answers
        try:
            p, spool, elapsed = run_pilot(tmp_path / "p", st, c, c.url, c.site, "CMS_T2_US_Test_ce1", trace_id,
                                          timeout=1.5)  # fmt: skip
        finally:
            for pid in server:
                os.kill(pid, signal.SIGCONT)
        assert "result sent" in p.stdout, p.stderr[-2000:]
        match = [line for line in p.stdout.splitlines() if line.startswith("control_us ")]
        asked_s = int(match[0].split()[1]) / 1e6
        assert 1.4 <= asked_s <= 1.5 + 0.5, asked_s  # curl's --max-time, then on
        spans = jaeger_spans(st, trace_id, len(spool_spans(spool)))
        root = tags(next(s for s in spans if s["operationName"] == "glidein"))
        assert root[C.CONTROLLER_RESULT] == "timeout" and root[C.TRACE_VERBOSITY] == "phases"
        assert {s["operationName"] for s in spans} == {"glidein", "setup"}  # the default: phases only
        # a controller that is gone altogether: refused at once, the default again
        c.process.terminate()
        c.process.wait(timeout=30)
        p, spool, elapsed = run_pilot(tmp_path / "q", st, c, c.url, c.site, "CMS_T2_US_Test_ce1", "4" * 32)
        assert "result sent" in p.stdout and elapsed < 1.5
        root_local = attrs(next(s for s in spool_spans(spool) if s["name"] == "glidein")["attributes"])
        assert root_local[C.CONTROLLER_RESULT] == "error" and root_local[C.TRACE_VERBOSITY] == "phases"


def test_the_factory_samples_by_the_real_controller(tmp_path: Path) -> None:
    """A site capped off: the factory's submit spans are dropped and its glideins get unsampled traceparents;
    an entry elsewhere is sampled, and its submit span names the deciding rule."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from gwms_obs.controller.client import ControllerClient
    from gwms_obs.tracing.factory import FactoryTracer, make_provider

    with controller_server(tmp_path / "controller") as c:
        cap = call(c, "POST", "/v1/rules", "site_admin", {
            "kind": "cap", "selector": {"site": c.site}, "effect": {"verbosity": "off"}, "reason": "no tracing here",
            "hours": 1})  # fmt: skip
        vo = call(c, "POST", "/v1/rules", "vo_manager", {
            "kind": "vo", "selector": {"frontend": c.frontend}, "effect": {"verbosity": "scripts"},
            "reason": "our pilots", "hours": 1})  # fmt: skip
        spans = InMemorySpanExporter()
        client = ControllerClient(c.url, c.tokens["pilot"], timeout=2.0)
        ft = FactoryTracer("gfactory-1", "gfactory_instance",
                           make_provider("gfactory-1", "gfactory_instance", spans, controller=client))  # fmt: skip
        submitted = {}
        for entry, site in (("CMS_T2_US_Test_ce1", c.site), (DEBUG_ENTRY, OTHER_SITE)):
            with ft.submit_cluster(entry, "client.main", 2, frontend=c.frontend, site=site) as sc:
                submitted[site] = [parse_traceparent(tp) for tp in sc.traceparents]
                sc.submitted(100, 2)
        assert ft.flush()
        assert all(tp is not None and not tp.sampled for tp in submitted[c.site])
        assert all(tp is not None and tp.sampled for tp in submitted[OTHER_SITE])
        (cluster,) = [s for s in spans.get_finished_spans() if s.name == C.SPAN_SUBMIT]
        assert cluster.attributes is not None
        assert cluster.attributes[C.CONTROLLER_RULE] == vo["id"] and cluster.attributes[C.CONTROLLER_KIND] == "vo"
        assert cap["id"] != vo["id"]
        ft.shutdown()


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_refusals_of_hostile_requests_are_audited_and_the_page_stays_up(tmp_path: Path, database: str) -> None:
    """A site admin's absurd expiry (1e300): a 400, audited, and the web page still answers every user with the
    refusal on it. Then an operator's millisecond timestamp and a NUL in a reason (PostgreSQL cannot store one):
    each a 400, each in the audit log and the denials counter, the page still up."""
    import re
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import httpx

    def pages_show(web: httpx.Client, refusals: int) -> None:
        for path in ("/", "/audit"):
            page = web.get(path)
            assert page.status_code == 200, (path, page.status_code)
            denied = re.findall(r'<tr class="denied">.*?</tr>', page.text, re.S)
            assert len(denied) == refusals and all("create refused" in d for d in denied), denied
            assert "\x00" not in page.text

    with controller(tmp_path, database) as c, httpx.Client(base_url=c.url, timeout=10, follow_redirects=False) as web:
        csrf = re.search(r'name="csrf" value="([^"]+)"', web.get("/login").text)
        assert csrf is not None
        r = web.post("/login", data={"csrf": csrf.group(1), "token": c.tokens["reader"]})
        assert r.status_code == 303, r.text

        site_off = {"kind": "site", "selector": {"site": c.site}, "effect": {"verbosity": "off"}}
        got = call(c, "POST", "/v1/rules", "site_admin", {**site_off, "reason": "drain", "expires": 1e300})
        assert (got.get("status"), got.get("error")) == (400, "invalid"), got
        pages_show(web, 1)

        for role, body in (
            ("operator", {**site_off, "kind": "operator", "reason": "drain", "expires": time.time() * 1000}),
            ("vo_manager", {"kind": "vo", "selector": {"frontend": c.frontend}, "effect": {"verbosity": "off"},
                            "reason": "nul\x00here", "hours": 1}),
        ):  # fmt: skip
            got = call(c, "POST", "/v1/rules", role, body)
            assert (got.get("status"), got.get("error")) == (400, "invalid"), (role, got)
        log = call(c, "GET", "/v1/audit", "reader")["audit"]
        assert [(e["actor"], e["outcome"]) for e in log] == [
            (c.names["vo_manager"], "invalid"),
            (c.names["operator"], "invalid"),
            (c.names["site_admin"], "invalid"),
        ]
        assert log[0]["reason"] == "nul\\x00here"  # kept, escaped
        metrics = httpx.get(f"{c.url}/metrics", timeout=10).text
        assert 'gwms_controller_denials_total{reason="invalid"} 3.0' in metrics
        pages_show(web, 3)
        assert "nul\\x00here" in web.get("/audit").text
