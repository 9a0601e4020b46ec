"""The /metrics server (outputs/http.py) in process: what it serves, and what idle, trickling and
crowding clients cost it (issue 29, item 12). tests/test_export_daemon.py runs the real exporter."""

from __future__ import annotations

import contextlib
import gzip
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, make_wsgi_app

from gwms_obs.outputs.http import MetricsServer, SharedRenders
from tools.polling import poll


@pytest.fixture
def registry() -> CollectorRegistry:
    r = CollectorRegistry()
    Counter("gwms_test_things", "Things.", registry=r).inc(3)
    Counter("gwms_test_other", "Other things.", registry=r).inc()
    return r


@contextlib.contextmanager
def serving(registry: CollectorRegistry, **kw: Any) -> Iterator[MetricsServer]:
    server = MetricsServer("127.0.0.1", 0, make_wsgi_app(registry), **kw)
    try:
        yield server
    finally:
        server.close()


def request(port: int, head: bytes, timeout: float = 10.0) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """Send ``head``, read to EOF: (status line, headers with lower-case names, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head)
        data = b""
        while chunk := s.recv(1 << 16):
            data += chunk
    top, _, body = data.partition(b"\r\n\r\n")
    status, *lines = top.split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(b":") for x in lines)}
    return status, headers, body


def get(port: int, path: str = "/metrics", *extra: str) -> tuple[bytes, dict[bytes, bytes], bytes]:
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", *extra]
    return request(port, ("\r\n".join(lines) + "\r\n\r\n").encode())


def closed_by_server(s: socket.socket, within: float) -> bool:
    """Whether the server closes ``s`` (EOF or reset) within ``within`` seconds."""
    s.settimeout(within)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_serves_what_prometheus_clients_app_serves(registry: CollectorRegistry) -> None:
    with serving(registry) as srv:
        status, headers, body = get(srv.port)
        assert status == b"HTTP/1.0 200 OK"
        assert headers[b"content-type"].startswith(b"text/plain; version=0.0.4")
        assert b"gwms_test_things_total 3.0" in body
        _, headers, body = get(srv.port, "/metrics", "Accept-Encoding: gzip")
        assert headers[b"content-encoding"] == b"gzip"
        assert b"gwms_test_things_total 3.0" in gzip.decompress(body)
        _, headers, body = get(srv.port, "/metrics", "Accept: application/openmetrics-text; version=1.0.0")
        assert headers[b"content-type"].startswith(b"application/openmetrics-text")
        assert body.endswith(b"# EOF\n")
        _, _, body = get(srv.port, "/metrics?name[]=gwms_test_other_total")
        assert b"gwms_test_other_total" in body and b"gwms_test_things" not in body
        post = request(srv.port, b"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc")
        assert post[0] == b"HTTP/1.0 405 Method Not Allowed"


def test_idle_and_trickling_connections_are_closed_at_the_head_deadline(registry: CollectorRegistry) -> None:
    with serving(registry, head_timeout=0.5) as srv:
        idle = socket.create_connection(("127.0.0.1", srv.port))
        trickle = socket.create_connection(("127.0.0.1", srv.port))
        with idle, trickle:
            t0 = time.monotonic()
            # One byte every 0.1 s: each read is quick, the head never completes. The deadline
            # is for the whole head, so this one is closed as soon as the silent one.
            for b in b"GET /metrics HTTP/1.1\r\nHost: x\r\n":
                try:
                    trickle.sendall(bytes([b]))
                except OSError:
                    break
                if time.monotonic() - t0 > 2.0:
                    break
                time.sleep(0.1)
            assert closed_by_server(idle, 5.0)
            assert closed_by_server(trickle, 5.0)
            assert time.monotonic() - t0 < 4.0
        assert get(srv.port)[0] == b"HTTP/1.0 200 OK"  # and the server goes on


def test_200_idle_connections_take_no_thread(registry: CollectorRegistry) -> None:
    with serving(registry) as srv:
        before = threading.active_count()
        with contextlib.ExitStack() as stack:
            idle = []
            for i in range(200):
                s = stack.enter_context(socket.create_connection(("127.0.0.1", srv.port)))
                if i % 2:
                    s.sendall(b"GET /metrics HTTP/1.1\r\n")  # a head begun, never ended
                idle.append(s)
            assert get(srv.port)[0] == b"HTTP/1.0 200 OK"  # accepted after the 200
            # ... while all 200 are still open: the scrape waited for none of them to end (an
            # order, not a time bound, so a loaded machine cannot fail it).
            assert not any(closed_by_server(s, 0.001) for s in idle)
            assert threading.active_count() == before


def test_past_max_connections_the_oldest_waiting_is_closed(registry: CollectorRegistry) -> None:
    with serving(registry, max_connections=10) as srv:
        socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(15)]
        try:
            # The scrape is the 16th: accepted by closing the oldest waiting, and answered.
            assert get(srv.port)[0] == b"HTTP/1.0 200 OK"
            assert all(closed_by_server(s, 5.0) for s in socks[:6])
            assert not any(closed_by_server(s, 0.2) for s in socks[6:])
        finally:
            for s in socks:
                s.close()


def test_an_oversized_head_is_closed_unanswered(registry: CollectorRegistry) -> None:
    with serving(registry) as srv, socket.create_connection(("127.0.0.1", srv.port)) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\n")
        with contextlib.suppress(OSError):  # the server may close while we still send
            for _ in range(80):
                s.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")
        assert closed_by_server(s, 5.0)


def test_close_stops_every_thread(registry: CollectorRegistry) -> None:
    before = threading.active_count()
    with serving(registry) as srv:
        assert threading.active_count() > before
        port = srv.port
    assert threading.active_count() == before
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=2):
        pass


def test_concurrent_identical_scrapes_share_one_render() -> None:
    """100 scrapes at once cost one render, not 100 one after the other under the ingest lock."""
    release = threading.Event()
    renders: list[str] = []

    def slow_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        renders.append(environ["HTTP_ACCEPT_ENCODING"])
        release.wait(10)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [f"rendered {len(renders)}".encode()]

    app = SharedRenders(slow_app)
    answers: list[bytes] = []

    def scrape(encoding: str) -> None:
        env = {"REQUEST_METHOD": "GET", "PATH_INFO": "/metrics", "HTTP_ACCEPT_ENCODING": encoding}
        answers.append(b"".join(app(env, lambda status, headers: None)))

    threads = [threading.Thread(target=scrape, args=(e,)) for e in ["gzip"] * 8 + ["identity"] * 2]
    threads[0].start()
    poll("the first render to start", lambda: renders, 5, 0.01)
    for t in threads[1:]:
        t.start()
    # Every other request of the same kind waits for the running render; the other kind starts its own.
    poll("the other requests to wait for a render", lambda: app.sharing() == 8, 5, 0.01)
    release.set()
    for t in threads:
        t.join(10)
    assert sorted(renders) == ["gzip", "identity"]
    assert len(answers) == 10 and set(answers) <= {b"rendered 1", b"rendered 2"}
    # Once a render has ended, the next request renders anew.
    scrape("gzip")
    assert answers[-1] == b"rendered 3"
