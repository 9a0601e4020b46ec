"""/metrics over HTTP: prometheus_client's WSGI app behind a server with bounded threads and timeouts.

prometheus_client's ``start_http_server`` listens with socketserver's backlog
of 5 and gives every connection its own thread, which waits on the socket
with no timeout: 100 concurrent scrapes waited seconds in SYN retries, and
200 idle connections made 200 threads (issue 29). Here:

* the listening socket has a backlog of :data:`BACKLOG`;
* one thread accepts connections and reads each one's request head without
  blocking; a connection whose head is not complete :data:`HEAD_TIMEOUT`
  seconds after it connected is closed, so an idle or trickling client costs
  a file descriptor for a while, never a thread; past
  :data:`MAX_CONNECTIONS` waiting, the oldest is closed first;
* a fixed pool of :data:`WORKERS` threads answers complete requests with the
  same WSGI app as before (``make_wsgi_app``: gzip, OpenMetrics negotiation,
  ``name[]`` filtering, every path), each send bounded by :data:`IO_TIMEOUT`;
* :class:`SharedRenders`: scrapes that arrive while the same answer is
  being made wait for it and share it;
* :func:`exposition_app`: the exporter's app, which serves
  outputs/prometheus.py's :class:`Exposition` (the ledger's families rendered
  once per change, as bytes) and builds only the health and process families
  per scrape, so a scrape neither takes the ingest lock nor waits for a scan.

Why not a WSGI server library (waitress, the usual pure-Python one): its
channel timeout counts inactivity, so a client trickling a byte every few
seconds keeps its connection for ever, and its connection limit then turns
new scrapes away; here a head must be complete within a deadline, and the
oldest waiting connection gives way to a new one.
"""

from __future__ import annotations

import collections
import contextlib
import io
import logging
import queue
import selectors
import socket
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client.exposition import choose_encoder, gzip_accepted

log = logging.getLogger("gwms_obs.http")

BACKLOG = 128  # connections the kernel queues before we accept them (socketserver's default: 5)
WORKERS = 4  # threads answering requests (a scrape is ms of CPU: more would only share the GIL)
HEAD_TIMEOUT = 10.0  # seconds a connection has to send its whole request head
IO_TIMEOUT = 10.0  # seconds for each send of an answer (and a read of a body, which /metrics never needs)
MAX_CONNECTIONS = 256  # connections waiting for their head or an answer; well under the usual 1024 fds
MAX_HEAD = 64 << 10  # a request head larger than this is not a scrape: closed

_HEAD_ENDS = (b"\r\n\r\n", b"\n\n")
GZIP_LEVEL = 6  # zlib's default: 9 costs ~3x the CPU for a few % on this text

Encoder = Callable[[Any], bytes]


def negotiate(accept: str | None, accept_encoding: str | None) -> tuple[Encoder, list[tuple[str, str]], bool]:
    """A scrape's encoder, its answer's headers and whether it is gzipped, as prometheus_client's WSGI
    app negotiates them (the daemon's Exposition and its serving process answer alike)."""
    encoder, content_type = choose_encoder(accept or "")
    gz = gzip_accepted(accept_encoding or "")
    return encoder, [("Content-Type", content_type), *([("Content-Encoding", "gzip")] if gz else [])], gz


def gzip_member(data: bytes) -> bytes:
    """One gzip member of ``data``: members appended one after another are one gzip stream."""
    z = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return z.compress(data) + z.flush()


class _Render:
    """One render of the app's answer, shared by the requests that arrive while it runs."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.answer: tuple[str, list[tuple[str, str]], bytes] | None = None
        self.sharers = 0  # requests waiting for it besides the one rendering


class SharedRenders:
    """``app`` (a WSGI app answering GET with one body) with concurrent identical GETs rendered once.

    Requests are the same when their method, path, query, Accept and
    Accept-Encoding are; one arriving after a render ended starts a new one,
    so no answer is older than the request that receives it by more than one render.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self._lock = threading.Lock()
        self._running: dict[tuple[str, ...], _Render] = {}

    def sharing(self) -> int:
        """Requests waiting for a render another one runs."""
        with self._lock:
            return sum(r.sharers for r in self._running.values())

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if environ.get("REQUEST_METHOD") != "GET":
            return list(self.app(environ, start_response))
        key = tuple(
            str(environ.get(k, "")) for k in ("PATH_INFO", "QUERY_STRING", "HTTP_ACCEPT", "HTTP_ACCEPT_ENCODING")
        )
        with self._lock:
            render = self._running.get(key)
            leader = render is None
            if render is None:
                render = self._running[key] = _Render()
            else:
                render.sharers += 1
        if leader:
            try:
                got: list[Any] = []
                body = b"".join(self.app(environ, lambda status, headers, exc_info=None: got.extend((status, headers))))
                render.answer = (got[0], list(got[1]), body)
            finally:
                with self._lock:
                    del self._running[key]
                render.done.set()  # the sharers of a failed render fail too, below
        else:
            render.done.wait()
        if render.answer is None:
            raise RuntimeError("rendering /metrics failed (see the error logged with it)")
        status, headers, body = render.answer
        start_response(status, list(headers))
        return [body]


def exposition_app(exposition: Any) -> Any:
    """A WSGI app answering as prometheus_client's ``make_wsgi_app`` does (OPTIONS, 405, the empty
    favicon, any other path the metrics; Accept, gzip and ``name[]`` negotiated alike), its body
    from ``exposition`` (outputs.prometheus.Exposition)."""

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        method = environ.get("REQUEST_METHOD")
        if method == "OPTIONS":
            start_response("200 OK", [("Allow", "OPTIONS,GET")])
            return [b""]
        if method != "GET":
            start_response("405 Method Not Allowed", [("Allow", "OPTIONS,GET")])
            return [f"# HTTP 405 Method Not Allowed: {method}; use OPTIONS or GET\n".encode()]
        if environ.get("PATH_INFO") == "/favicon.ico":
            start_response("200 OK", [])
            return [b""]
        names = parse_qs(environ.get("QUERY_STRING", "")).get("name[]")
        headers, body = exposition.answer(environ.get("HTTP_ACCEPT"), environ.get("HTTP_ACCEPT_ENCODING"), names)
        start_response("200 OK", headers)
        return [body]

    return app


class _Server(WSGIServer):
    """Holds the listening socket (:func:`listen`) and the WSGI environ; it serves nothing itself."""


class _HeadFirst(io.RawIOBase):
    """A socket's bytes, the head the accepting thread already read first."""

    def __init__(self, head: bytes, sock: socket.socket) -> None:
        self._head = memoryview(head)
        self._sock = sock

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return self._sock.recv_into(b)


class _Handler(WSGIRequestHandler):
    """wsgiref's handler, reading the head already received, logging no request lines."""

    def __init__(self, sock: socket.socket, addr: Any, server: _Server, head: bytes, io_timeout: float) -> None:
        self._head = head
        self._io_timeout = io_timeout
        super().__init__(sock, addr, server)

    def setup(self) -> None:
        self.request.settimeout(self._io_timeout)  # every send (and read) from here on
        super().setup()
        self.rfile.close()
        self.rfile = io.BufferedReader(_HeadFirst(self._head, self.connection))

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Waiting:
    """A connection whose request head is not complete yet."""

    __slots__ = ("addr", "deadline", "head")

    def __init__(self, addr: Any, deadline: float) -> None:
        self.addr = addr
        self.deadline = deadline
        self.head = bytearray()


class MetricsServer:
    """Serves a WSGI app on (host, port) from threads of its own; :meth:`close` stops them."""

    def __init__(
        self,
        host: str,
        port: int,
        app: Any,
        *,
        workers: int = WORKERS,
        head_timeout: float = HEAD_TIMEOUT,
        io_timeout: float = IO_TIMEOUT,
        max_connections: int = MAX_CONNECTIONS,
        sock: socket.socket | None = None,
    ) -> None:
        """``sock``: a socket :func:`listen` made (the daemon's, inherited by its serving child,
        outputs/serve.py), else one bound to (host, port) here; :meth:`close` closes it either way."""
        if sock is None:
            sock = listen(host, port)  # OSError when in use
        handler: Any = _Handler  # made by our workers (_answer_loop), never by socketserver
        self._server: _Server = _Server(sock.getsockname()[:2], handler, bind_and_activate=False)
        self._server.socket.close()  # the one socketserver made, never bound
        self._server.socket = sock
        self._server.server_name = socket.getfqdn(host)  # as HTTPServer.server_bind sets them, for the environ
        self._server.server_port = self._server.server_address[1]
        self._server.setup_environ()
        self._server.set_app(app)
        self._server.socket.setblocking(False)
        self.port: int = self._server.server_address[1]
        self.head_timeout = head_timeout
        self.io_timeout = io_timeout
        self.max_connections = max_connections
        self._waiting: collections.OrderedDict[socket.socket, _Waiting] = collections.OrderedDict()
        self._answering = 0  # handed to the workers, not yet closed
        self._count_lock = threading.Lock()
        self._work: queue.SimpleQueue[tuple[socket.socket, Any, bytes] | None] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._stopping = False
        self._threads = [threading.Thread(target=self._accept_loop, name="metrics-accept", daemon=True)]
        self._threads += [
            threading.Thread(target=self._answer_loop, name=f"metrics-worker-{i}", daemon=True) for i in range(workers)
        ]
        for t in self._threads:
            t.start()

    # --- the accepting thread ---------------------------------------------------------------------
    def _accept_loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._server.socket, selectors.EVENT_READ)
        sel.register(self._wake_r, selectors.EVENT_READ)
        try:
            while not self._stopping:
                timeout = None
                if self._waiting:
                    first = next(iter(self._waiting.values()))
                    timeout = max(0.0, first.deadline - time.monotonic())
                for key, _ in sel.select(timeout):
                    sock = key.fileobj
                    if sock is self._server.socket:
                        self._accept(sel)
                    elif sock is self._wake_r:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(64)
                    else:
                        assert isinstance(sock, socket.socket)
                        self._read_head(sel, sock)
                self._expire(sel)
        except Exception:  # a bug here must not pass silently: /metrics would just stop answering
            log.exception("/metrics server: the accepting thread failed")
        finally:
            for sock in list(self._waiting):
                self._drop(sel, sock)
            sel.close()

    def _accept(self, sel: selectors.BaseSelector) -> None:
        for _ in range(BACKLOG):  # what is queued now, not an endless stream
            try:
                conn, addr = self._server.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # EMFILE and the like: the connection stays queued for a later try
                log.warning("/metrics server: cannot accept a connection: %s", e.strerror or e)
                return
            with self._count_lock:
                busy = len(self._waiting) + self._answering
            if busy >= self.max_connections:
                if not self._waiting:  # every slot is being answered: this one has to go
                    _close(conn)
                    continue
                self._drop(sel, next(iter(self._waiting)))  # the oldest waiting has had the longest
            conn.setblocking(False)
            self._waiting[conn] = _Waiting(addr, time.monotonic() + self.head_timeout)
            sel.register(conn, selectors.EVENT_READ)

    def _read_head(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        w = self._waiting[sock]
        try:
            data = sock.recv(8192)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:  # closed (or reset) before a whole request
            self._drop(sel, sock)
            return
        start = max(0, len(w.head) - 3)
        w.head += data
        if any(w.head.find(end, start) >= 0 for end in _HEAD_ENDS):
            sel.unregister(sock)
            del self._waiting[sock]
            with self._count_lock:
                self._answering += 1
            self._work.put((sock, w.addr, bytes(w.head)))
        elif len(w.head) > MAX_HEAD:
            self._drop(sel, sock)

    def _expire(self, sel: selectors.BaseSelector) -> None:
        now = time.monotonic()
        while self._waiting:
            sock, w = next(iter(self._waiting.items()))
            if w.deadline > now:
                return
            self._drop(sel, sock)

    def _drop(self, sel: selectors.BaseSelector, sock: socket.socket) -> None:
        del self._waiting[sock]
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(sock)
        _close(sock)

    # --- the workers ------------------------------------------------------------------------------
    def _answer_loop(self) -> None:
        while (item := self._work.get()) is not None:
            sock, addr, head = item
            try:
                sock.setblocking(True)
                _Handler(sock, addr, self._server, head, self.io_timeout)
            except OSError as e:  # the client went away or was too slow: its problem, not ours
                log.debug("/metrics: %s: %s", addr, e)
            except Exception:
                log.exception("/metrics: answering %s failed", addr)
            finally:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
                _close(sock)
                with self._count_lock:
                    self._answering -= 1

    # --- stopping ---------------------------------------------------------------------------------
    def close(self, timeout: float = 5.0) -> None:
        """Stop accepting, let the workers finish what they answer (at most ``timeout`` s), close."""
        self._stopping = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        for _ in self._threads[1:]:
            self._work.put(None)
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self._server.server_close()
        _close(self._wake_r)
        _close(self._wake_w)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to (host, port) and listening with :data:`BACKLOG` (OSError when in use)."""
    family, addr = _best_family(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart binds at once (TIME_WAIT)
        sock.bind((addr, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def _best_family(host: str, port: int) -> tuple[socket.AddressFamily, str]:
    """The address family and address to bind for ``host`` (IPv6 for "::"; a name resolved here)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])
