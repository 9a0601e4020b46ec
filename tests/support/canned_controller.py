"""A canned stand-in for the controller's ``GET /v1/decide`` (the real service: gwms_obs.controller.api).

Answers every request with one configured status and body (changeable between
requests), and records what it was asked: path, query and headers. A
``hung()`` listener accepts connections at the TCP level and never answers.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from gwms_obs.controller.policy import Decision, Effect, Verbosity
from tools.tracing_backends import free_port


def answer(
    verbosity: str = "commands",
    sample: float = 1.0,
    record_commands: bool = False,
    rule: int | None = 17,
    kind: str = "site",
    capped_by: tuple[int, ...] = (3,),
    compact: bool = True,
) -> bytes:
    """A decide answer as the service writes it (Decision.as_dict; compact JSON like api._Json)."""
    d = Decision(Effect(Verbosity.parse(verbosity), sample, record_commands), rule, kind, capped_by)
    return json.dumps(d.as_dict(), separators=(",", ":") if compact else None).encode()


@dataclass
class Asked:
    path: str
    query: dict[str, str]
    headers: dict[str, str]


@dataclass
class CannedController:
    url: str
    status: int = 200
    body: bytes = field(default_factory=answer)
    content_length: bool = True  # False: the body ends when the connection closes (no early refusal by size)
    requests: list[Asked] = field(default_factory=list)


@contextlib.contextmanager
def canned_controller(status: int = 200, body: bytes | None = None) -> Iterator[CannedController]:
    port = free_port()
    state = CannedController(f"http://127.0.0.1:{port}", status, body if body is not None else answer())

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            u = urlsplit(self.path)
            state.requests.append(
                Asked(
                    u.path,
                    dict(parse_qsl(u.query, keep_blank_values=True)),
                    {k.lower(): v for k, v in self.headers.items()},
                )
            )
            self.send_response(state.status)
            self.send_header("Content-Type", "application/json")
            if state.content_length:
                self.send_header("Content-Length", str(len(state.body)))
            self.end_headers()
            with contextlib.suppress(OSError):  # a client that stops reading early
                self.wfile.write(state.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def hung() -> Iterator[str]:
    """A URL whose server completes the TCP handshake (the kernel's backlog) and never says a word."""
    port = free_port()
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen(16)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        s.close()
