"""The controller's test and benchmark harness works on its own, before any controller:
a throwaway PostgreSQL cluster (tools/postgres.py), headless Chromium through
Selenium (tools/browser.py) and the vegeta load generator (tools/vegeta.py),
each against something trivial on 127.0.0.1.

A missing prerequisite skips here, and `make test` (GWMS_OBS_STRICT_SKIPS)
turns that skip into a failure: tools/prereqs.sh installs chromium,
chromium-driver and postgresql, and vegeta is built from the Go module proxy.
"""

from __future__ import annotations

import contextlib
import html
import os
import socket
import threading
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import psycopg
import pytest

from tools import browser, postgres
from tools.tracing_backends import ToolUnavailable
from tools.vegeta import Target, attack, find_vegeta

pytestmark = pytest.mark.live


def _have_postgres() -> bool:
    try:
        postgres.bindir()
        return True
    except postgres.PostgresUnavailable:
        return False


# --- a tiny page with a form --------------------------------------------------------------------
FORM = b"""<!doctype html><html><body>
<form method="post" action="/greet"><input id="name" name="name"><button id="go" type="submit">Go</button></form>
</body></html>"""


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        self._answer(FORM)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        name = urllib.parse.parse_qs(body.decode()).get("name", [""])[0]
        self._answer(f'<!doctype html><p id="result">Hello, {html.escape(name)}</p>'.encode())

    def _answer(self, page: bytes) -> None:
        with self.server.lock:
            self.server.hits[(self.command, self.path)] += 1
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, format: str, *args: object) -> None:
        pass  # 200 requests a second would flood the test's output


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # vegeta opens its connections in bursts

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.hits: Counter[tuple[str, str]] = Counter()


@contextlib.contextmanager
def page_server() -> Iterator[_Server]:
    srv = _Server()
    t = threading.Thread(target=srv.serve_forever, name="page-server", daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(10)


def _url(srv: _Server, path: str = "/") -> str:
    return f"http://127.0.0.1:{srv.server_address[1]}{path}"


# --- PostgreSQL ------------------------------------------------------------------------------------
@pytest.mark.skipif(not _have_postgres(), reason="Debian postgresql missing")
def test_postgres_server_serves_its_database_then_is_gone(tmp_path: Path) -> None:
    import sqlalchemy

    with postgres.postgres_server(tmp_path) as pg:
        assert pg.dsn == f"postgresql+psycopg://gwms:{pg.password}@127.0.0.1:{pg.port}/gwms"
        with psycopg.connect(pg.conninfo) as c:
            c.execute("CREATE TABLE decisions (id serial PRIMARY KEY, rule text NOT NULL)")
            c.execute("INSERT INTO decisions (rule) VALUES (%s), (%s)", ("hold", "release"))
        # the controller's form: a SQLAlchemy URL, over TCP with the password
        engine = sqlalchemy.create_engine(pg.dsn)
        try:
            with engine.connect() as conn:
                assert conn.execute(sqlalchemy.text("SELECT rule FROM decisions ORDER BY id")).scalars().all() == [
                    "hold",
                    "release",
                ]
                assert conn.execute(sqlalchemy.text("SELECT current_user")).scalar() == "gwms"
        finally:
            engine.dispose()
        wrong = psycopg.conninfo.make_conninfo(pg.conninfo, password="wrong")
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(wrong, connect_timeout=5).close()
        port, pid, home = pg.port, pg.pid, pg.socket_dir
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # the postmaster exited (and was reaped)
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))
    assert not home.exists()
    assert "database system is shut down" in (tmp_path / "postgres.log").read_text()


# --- Chromium ---------------------------------------------------------------------------------------
@pytest.mark.skipif(not browser.have_chromium(), reason="Debian chromium/chromium-driver missing")
def test_chromium_fills_and_submits_a_form(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.wait import WebDriverWait

    artifacts = browser.artifacts_dir("controller") / "harness"
    with page_server() as srv, browser.chromium_driver(artifacts) as driver:
        assert driver.get_window_size() == {"width": 1280, "height": 900}
        driver.get(_url(srv))
        driver.find_element(By.ID, "name").send_keys("Ada <admin>")
        driver.find_element(By.ID, "go").click()
        result = WebDriverWait(driver, 10).until(ec.presence_of_element_located((By.ID, "result")))
        assert result.text == "Hello, Ada <admin>"
        shot = browser.screenshot(driver, artifacts, "form submitted")
    assert srv.hits[("GET", "/")] == 1 and srv.hits[("POST", "/greet")] == 1  # (and the favicon, asked twice)
    assert shot == artifacts / "form_submitted.png"
    assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and shot.stat().st_size > 2000


# --- vegeta -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def vegeta() -> Path:
    try:
        return find_vegeta()
    except ToolUnavailable as e:
        pytest.skip(f"vegeta not built: {e}")


def test_vegeta_sends_a_constant_rate_and_reports_it(vegeta: Path, tmp_path: Path) -> None:
    with page_server() as srv:
        get = Target(_url(srv))
        post = Target(
            _url(srv, "/greet"), "POST", b"name=load", {"Content-Type": ["application/x-www-form-urlencoded"]}
        )
        report = attack([get, post], rate=200, duration=1, workdir=tmp_path, binary=vegeta)
    assert report.requests == 200, report.raw
    assert report.status_codes == {"200": 200} and report.success == 1.0 and not report.errors
    assert srv.hits == {("GET", "/"): 100, ("POST", "/greet"): 100}  # round-robin, the body as sent
    assert 150 < report.rate < 250, report.raw  # the generator kept the rate
    lat = report.latency_ms
    assert 0 < lat["min"] <= lat["50th"] <= lat["99th"] <= lat["max"] < 1000
    assert (tmp_path / "results.bin").stat().st_size > 0 and (tmp_path / "report.json").is_file()
