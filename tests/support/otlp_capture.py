"""An OTLP/HTTP endpoint on 127.0.0.1 that records what it is sent, for unit tests.

It answers with scripted statuses (e.g. 503 twice, then 200) or not at all
(``hang``), so senders' retry and timeout paths run against a real socket.
The live tests use the real collector instead.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Captured:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Capture:
    url: str  # base URL; POST {url}/v1/traces
    requests: list[Captured] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)  # answered in order; then 200
    hang: bool = False  # read the request, never answer (until the server stops)
    retry_after: str | None = None  # Retry-After header on every non-2xx answer
    times: list[float] = field(default_factory=list)  # time.monotonic() of each request
    release: threading.Event = field(default_factory=threading.Event)
    got: threading.Condition = field(default_factory=threading.Condition)

    @property
    def traces_url(self) -> str:
        return f"{self.url}/v1/traces"

    def wait_for(self, n: int, timeout: float) -> bool:
        with self.got:
            return self.got.wait_for(lambda: len(self.requests) >= n, timeout)


@contextlib.contextmanager
def otlp_capture(
    statuses: list[int] | None = None, hang: bool = False, *, always: int | None = None, retry_after: str | None = None
) -> Iterator[Capture]:
    """``statuses`` are answered in order, then 200 (or ``always`` for every request)."""
    cap: Capture

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n)
            with cap.got:
                cap.requests.append(Captured(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                cap.times.append(time.monotonic())
                status = always if always is not None else (cap.statuses.pop(0) if cap.statuses else 200)
                cap.got.notify_all()
            if cap.hang:
                cap.release.wait(30)
                return
            payload = b"{}"
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if cap.retry_after is not None and status >= 300:
                self.send_header("Retry-After", cap.retry_after)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    cap = Capture(
        f"http://127.0.0.1:{srv.server_address[1]}", statuses=list(statuses or []), hang=hang, retry_after=retry_after
    )
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield cap
    finally:
        cap.release.set()
        srv.shutdown()
        srv.server_close()
        t.join(5)
