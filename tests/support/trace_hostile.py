"""A hostile OTLP/HTTP collector for pilot/gwms-trace.sh's requests, and the PATH that hides curl.

One plain socket server on 127.0.0.1 (no http.server: it must be able to
misbehave mid-answer). Modes:

* ``ok``       - reads the request, answers 200 with an empty body;
* ``trickle``  - reads the request, promises a long body and sends it one byte
                 every ``interval`` seconds (a read never times out, the transfer
                 never ends);
* ``silent``   - reads the request and never says a word;
* ``redirect`` - answers 307 to ``location`` (a POST is re-sent as a POST).

Every request is recorded (method, path, headers, body). ``hostile()`` stops
the server and closes every connection on exit; each connection's thread is
bounded by ``max_seconds`` in any case.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tools.tracing_backends import free_port

MAX_BODY = 64 << 20


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Hostile:
    url: str
    mode: str
    interval: float = 2.0
    location: str = ""
    max_seconds: float = 60.0
    requests: list[Request] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def traces_url(self) -> str:
        return self.url + "/v1/traces"


def _recv(conn: socket.socket, deadline: float, stop: threading.Event) -> bytes:
    """The next bytes; b"" when the peer closed, the deadline passed or the server stops."""
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            return conn.recv(65536)
        except TimeoutError:
            continue
    return b""


def _read_request(conn: socket.socket, deadline: float, stop: threading.Event) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = _recv(conn, deadline, stop)
        if not chunk or len(data) > 1 << 20:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, *_ = [*lines[0].split(" "), "", ""]
    headers: dict[str, str] = {}
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers[k.strip().lower()] = v.strip()
    want = min(int(headers.get("content-length", "0") or 0), MAX_BODY)
    while len(body) < want:
        chunk = _recv(conn, deadline, stop)
        if not chunk:
            break
        body += chunk
    return Request(method, path, headers, body)


def _serve(state: Hostile, conn: socket.socket) -> None:
    deadline = time.monotonic() + state.max_seconds
    conn.settimeout(0.2)
    with conn, contextlib.suppress(OSError):
        req = _read_request(conn, deadline, state.stop)
        if req is None:
            return
        state.requests.append(req)
        if state.mode == "ok":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        elif state.mode == "redirect":
            conn.sendall(
                f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {state.location}\r\n"
                "Content-Length: 0\r\nConnection: close\r\n\r\n".encode()
            )
        elif state.mode == "trickle":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n")
            while not state.stop.wait(state.interval) and time.monotonic() < deadline:
                conn.sendall(b" ")
        else:  # silent: hold the connection, say nothing
            while not state.stop.wait(0.1) and time.monotonic() < deadline:
                pass


@contextlib.contextmanager
def hostile(mode: str, *, interval: float = 2.0, location: str = "", max_seconds: float = 60.0) -> Iterator[Hostile]:
    port = free_port()
    state = Hostile(f"http://127.0.0.1:{port}", mode, interval, location, max_seconds)
    lsock = socket.create_server(("127.0.0.1", port))
    lsock.settimeout(0.1)
    threads: list[threading.Thread] = []

    def accept() -> None:
        while not state.stop.is_set():
            try:
                conn, _ = lsock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=_serve, args=(state, conn), daemon=True)
            threads.append(t)
            t.start()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield state
    finally:
        state.stop.set()
        acceptor.join(5)
        lsock.close()
        for t in threads:
            t.join(5)


# The tools a glidein may call, for the wget-only PATH: every program of the system's bin directories.
SYSTEM_BINS = ("/usr/local/bin", "/usr/bin", "/bin")


def path_without(bindir: Path, *hidden: str) -> str:
    """A PATH of one directory with a symlink to every program on the system's PATH except ``hidden``."""
    bindir.mkdir(parents=True, exist_ok=True)
    for d in SYSTEM_BINS:
        if not os.path.isdir(d):
            continue
        for name in os.listdir(d):
            target = os.path.join(d, name)
            link = bindir / name
            if name in hidden or link.exists() or link.is_symlink() or not os.access(target, os.X_OK):
                continue
            link.symlink_to(target)
    return str(bindir)
