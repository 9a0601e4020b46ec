"""The daemon's /metrics served by a process of its own, so a scrape never waits for the scan's GIL.

In the daemon's process a scrape's answer thread shares the GIL with the scan: at 500 entries,
during back-to-back scans, OpenMetrics gzip took 20-46 ms at p99 where the same bytes from
another process took 1-6 ms (benchmarks/results/metrics-render.md). Here the daemon
(:class:`ServingChild`) binds the listening socket, so a port in use is its error at start and a
restarted child keeps the port and the connections queued on it, and starts
``python -m gwms_obs.outputs.serve`` with it; the child runs :class:`~.http.MetricsServer` on
it with the same app, answering every path as before. The daemon writes what the child serves
into a directory of its own (on tmpfs where there is one), each file atomically replaced:

* ``body.<encoding>.<gz|raw>``: the ledger's families of one render in one encoding
  (:class:`~.prometheus.Exposition`'s bytes) after a line with the render's number.
  OpenMetrics gzipped, what Prometheus asks for, is written with every render (at most every
  MIN_GAP seconds); another only when the child asks for it, for the render then (Exposition
  deciding as before which encodings it keeps rendered, WANTED_SECONDS): one human's curl of the
  plain text cost ~0.5 % of a core at 301,040 pilots for ten minutes when written with every render;
* ``tail.json``: the per-scrape families only the daemon knows (the scan's health, the
  forwarder's counters, build info, its Python's GC, these restarts), written when they change,
  looked at every :data:`TAIL_SECONDS`. The child puts the daemon's ``process_*`` figures in
  their place, read from /proc/<daemon's pid> at each scrape;
* ``want.<encoding>.<gz|raw>``: touched by the child at each scrape of that encoding (it
  holds the Accept header that chose it); the daemon reads their times, as a scrape in its own
  process noted the encoding asked for.

A socket pair joins the two: the child writes a byte on its end to wake the daemon when it needs
an encoding not written for the last render; each sees the other's end close when it dies. The
child exits once the daemon is gone, even SIGKILLed; the daemon starts a new child when one
exits (counted, ``gwms_obs_metrics_server_restarts_total``, and logged).

``name[]`` (a few families chosen by the scraper, rare) is answered from the OpenMetrics body:
the families asked for are parsed back from it and encoded as asked.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import json
import logging
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import ProcessCollector
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Exemplar, Sample

from .. import catalogue
from .http import MetricsServer, SharedRenders, exposition_app, gzip_member, negotiate

if TYPE_CHECKING:
    from .prometheus import Exposition

log = logging.getLogger("gwms_obs.serve")

TAIL_SECONDS = 5.0  # how often the daemon looks at the per-scrape families (0.3-0.7 ms of CPU each time)
WAIT_SECONDS = 10.0  # how long a scrape of an encoding not written for the last render waits for it
ASK_AGAIN = 1.0  # ... waking the daemon again this often (a render may have raced the first ask)
MAX_WANTS = 32  # encodings the child asks for (Accept headers are the scrapers'; a few in practice)
MAX_ACCEPT = 1024  # bytes of an Accept header kept in a want file
RESTART_BACKOFF = (0.5, 30.0)  # seconds before starting a child that lived less than RESTART_FAST: doubling
RESTART_FAST = 10.0
STOP_SECONDS = 5.0  # a child not gone this long after the daemon closed its end is killed

PROMETHEUS_ACCEPT = "application/openmetrics-text; version=1.0.0"
_OM_EOF = b"# EOF\n"
_PROCESS = "process"  # tail.json's place for the daemon's process_* families (the child reads them)


def encoding_tag(encoder: Any, gz: bool) -> str:
    """A file name part per encoding as Exposition tells them apart (``_variant``): which exposition,
    its options (from the scraper's Accept: hashed, never written as sent) and gzip or not."""
    func = getattr(encoder, "func", encoder)
    options = sorted(getattr(encoder, "keywords", {}).items())
    kind = "om" if func is openmetrics.generate_latest else "text"
    digest = hashlib.sha256(repr(options).encode()).hexdigest()[:12]
    return f"{kind}-{digest}.{'gz' if gz else 'raw'}"


PROMETHEUS_TAG = encoding_tag(choose_encoder(PROMETHEUS_ACCEPT)[0], True)


def _write(directory: Path, name: str, *parts: bytes) -> None:
    """``parts`` as file ``name``, atomically (a reader sees the old file or the new one)."""
    tmp = directory / f".{name}.tmp"
    with open(tmp, "wb") as f:
        for p in parts:
            f.write(p)
    os.replace(tmp, directory / name)


def _family_json(fam: Metric) -> list[Any]:
    samples = [
        [s.name, s.labels, s.value, s.timestamp, None if s.exemplar is None else list(s.exemplar)] for s in fam.samples
    ]
    return [fam.name, fam.documentation, fam.type, fam.unit, samples]


def _family_from_json(row: list[Any]) -> Metric:
    name, documentation, typ, unit, samples = row
    fam = Metric(name, documentation, typ, unit)
    fam.samples = [
        Sample(n, dict(labels), value, ts, Exemplar(*ex) if ex is not None else None)
        for n, labels, value, ts, ex in samples
    ]
    return fam


# --- the daemon's side -----------------------------------------------------------------------------
class _Restarts(Collector):
    def __init__(self, child: ServingChild) -> None:
        self.child = child

    def _family(self) -> CounterMetricFamily:
        m = catalogue.METRICS_SERVER_RESTARTS
        return CounterMetricFamily(m.base, m.help, labels=list(m.labels))

    def describe(self) -> list[Metric]:
        return [self._family()]

    def collect(self) -> list[Metric]:
        fam = self._family()
        fam.add_metric([], float(self.child.restarts))
        return [fam]


def _tmpfs() -> str | None:
    """/dev/shm when the daemon may write there (the files live in memory), else the temp dir."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK) else None


class ServingChild:
    """The daemon's side: publishes ``exposition``'s bytes for the child serving ``sock`` and keeps one running.

    Made before ``exposition.start()`` (its renders are published from the first), started after.
    """

    def __init__(self, exposition: Exposition, sock: socket.socket, *, log_level: int | None = None) -> None:
        self.exposition = exposition
        self.sock = sock
        self.dir = Path(tempfile.mkdtemp(prefix="gwms-obs-metrics-", dir=_tmpfs()))
        self.log_level = log_level if log_level is not None else logging.getLogger("gwms_obs").getEffectiveLevel()
        self.restarts = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.publish_cpu = 0.0  # seconds of CPU the publishing took, all threads (benchmarks)
        self.published = 0  # renders published
        self._control: socket.socket | None = None  # our end of the pair; the child holds the other
        self._started_at = 0.0
        self._backoff = RESTART_BACKOFF[0]
        self._lock = threading.Lock()  # the state below, shared by the renderer's thread and ours
        self._cur: Any = None  # the last render published, and its number
        self._seq = 0
        self._written: dict[str, int] = {}  # body file -> the render number in it
        self._want_times: dict[str, int] = {}  # want file -> the mtime_ns last acted on
        self._tail: bytes | None = None
        self._failing: str | None = None  # the last error writing a file, logged once until one succeeds
        self._stop = threading.Event()
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread: threading.Thread | None = None
        from .prometheus import _variant  # the daemon has it loaded; the child never imports it

        self._prometheus_key = _variant(choose_encoder(PROMETHEUS_ACCEPT)[0])
        exposition.per_scrape.register(_Restarts(self))
        exposition.on_render = self._rendered

    # --- publishing ------------------------------------------------------------------------------
    def _rendered(self, cur: Any) -> None:
        """A new render (the renderer's thread): its OpenMetrics gzipped, what Prometheus asks for. Any
        other form is written when the child asks for it (:meth:`_wants`), for the render then."""
        c0 = time.thread_time()
        with self._lock:
            self._seq += 1
            self._cur = cur
            om = cur.bodies.get(self._prometheus_key)
            if om is not None:
                self._publish_body(PROMETHEUS_TAG, om, True)
            self.published += 1
        self.publish_cpu += time.thread_time() - c0

    def _publish_body(self, tag: str, body: Any, gz: bool) -> None:
        """One encoding of the render ``self._seq`` (under the lock), unless already written."""
        name = f"body.{tag}"
        if self._written.get(name) == self._seq:
            return
        data = body.compress() if gz else body.data
        if self._try(name, f"{self._seq}\n".encode(), data):
            self._written[name] = self._seq

    def _try(self, name: str, *parts: bytes) -> bool:
        try:
            _write(self.dir, name, *parts)
        except OSError as e:  # the disk full, the dir removed: the child serves the last bytes written
            if self._failing != str(e):
                log.warning("/metrics: cannot write %s for the serving process: %s", self.dir / name, e)
            self._failing = str(e)
            return False
        self._failing = None
        return True

    def publish_tail(self) -> bool:
        """The per-scrape families, if they changed since last written; True if written."""
        c0 = time.thread_time()
        rows: list[Any] = []
        for fam in self.exposition.per_scrape.collect():
            if fam.name.startswith("process_"):  # the child reads the daemon's own, at each scrape
                if _PROCESS not in rows:
                    rows.append(_PROCESS)
                continue
            rows.append(_family_json(fam))
        data = json.dumps(rows, separators=(",", ":")).encode()
        wrote = False
        if data != self._tail and self._try("tail.json", data):
            self._tail = data
            wrote = True
        self.publish_cpu += time.thread_time() - c0
        return wrote

    def _wants(self, woken: bool = False) -> None:
        """Encodings the child was asked for since we last looked (a want file's new time), or that it
        waits for (``woken``: it woke us): written for the last render if they were not."""
        try:
            names = [n for n in os.listdir(self.dir) if n.startswith("want.")][:MAX_WANTS]
        except OSError:
            return
        for name in names:
            try:
                st = os.stat(self.dir / name)
                # No new scrape of it, and the child is not waiting for it (or its body is the last
                # render's): nothing to do. A wake with the same time (a second scrape within the
                # clock's tick, a render that raced the first ask) still writes a body not written.
                stale = self._written.get(f"body.{name[5:]}") != self._seq
                if self._want_times.get(name) == st.st_mtime_ns and not (woken and stale):
                    continue
                accept = (self.dir / name).read_bytes()[:MAX_ACCEPT].decode("ascii", "replace")
            except OSError:
                continue
            self._want_times[name] = st.st_mtime_ns
            gz = name.endswith(".gz")
            encoder, _ = choose_encoder(accept)
            if f"want.{encoding_tag(encoder, gz)}" != name:  # not the child's: ignored
                continue
            cur, body = self.exposition.ledger_body(encoder, gz)  # rendered whole if Exposition dropped it
            with self._lock:
                # The render published last, or the same with a later scan's end (Exposition replaces
                # its render when a scan changed nothing, sharing its bodies, and publishes no new one:
                # on a quiet factory that is every tick); else a newer render is being published, and
                # the child, still waiting for it, wakes us again (ASK_AGAIN).
                last = self._cur
                if last is None or cur is last or cur.bodies is last.bodies:
                    self._publish_body(encoding_tag(encoder, gz), body, gz)

    # --- the child -------------------------------------------------------------------------------
    def start(self) -> None:
        """The per-scrape families written, the child started, and our thread watching both."""
        self.publish_tail()
        self._spawn()
        self._thread = threading.Thread(target=self._loop, name="metrics-publish", daemon=True)
        self._thread.start()

    def _spawn(self) -> None:
        ours, theirs = socket.socketpair()
        ours.setblocking(False)
        fds = (self.sock.fileno(), theirs.fileno())
        cmd = [
            sys.executable,
            "-m",
            "gwms_obs.outputs.serve",
            "--listen-fd",
            str(fds[0]),
            "--control-fd",
            str(fds[1]),
            "--dir",
            str(self.dir),
            "--parent",
            str(os.getpid()),
            "--log-level",
            str(self.log_level),
        ]
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=fds, stdin=subprocess.DEVNULL, close_fds=True)
        finally:
            theirs.close()
        self._control = ours
        self._started_at = time.monotonic()
        log.debug("/metrics: serving process %d started", self.proc.pid)

    def _loop(self) -> None:
        while not self._stop.is_set():
            ctl = self._control
            try:
                ready, _, _ = select.select([x for x in (ctl, self._wake_r) if x is not None], [], [], TAIL_SECONDS)
                gone = woken = False
                if ctl is not None and ctl in ready:
                    with contextlib.suppress(BlockingIOError, InterruptedError):
                        woken = bool(ctl.recv(4096))  # bytes: wants to look at
                        gone = not woken  # nothing: the child's end closed
                if self._stop.is_set():
                    return
                c0 = time.thread_time()
                self._wants(woken)
                self.publish_cpu += time.thread_time() - c0
                self.publish_tail()
                if gone or (self.proc is not None and self.proc.poll() is not None):
                    self._restart()
            except Exception:  # the child keeps serving the last files; the next round retries
                log.exception("/metrics: publishing for the serving process failed")
                self._stop.wait(TAIL_SECONDS)

    def _restart(self) -> None:
        assert self.proc is not None
        try:
            code = self.proc.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:  # its end closed but still running: not serving, replaced
            self.proc.kill()
            code = self.proc.wait()
        if self._control is not None:
            self._control.close()
            self._control = None
        lived = time.monotonic() - self._started_at
        why = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        log.warning(
            "/metrics: the serving process %d ended (%s, after %.0fs): starting another", self.proc.pid, why, lived
        )
        self.restarts += 1
        if lived < RESTART_FAST:  # dying at start: do not spin
            if self._stop.wait(self._backoff):
                return
            self._backoff = min(RESTART_BACKOFF[1], self._backoff * 2)
        else:
            self._backoff = RESTART_BACKOFF[0]
        self._spawn()

    def close(self, timeout: float = STOP_SECONDS) -> None:
        """Stop publishing, end the child (its end of the pair closes), close the socket, remove the files."""
        self.exposition.on_render = None
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._thread is not None:
            self._thread.join(timeout)
        if self._control is not None:
            self._control.close()
            self._control = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("/metrics: the serving process %d did not stop: killed", self.proc.pid)
                self.proc.kill()
                self.proc.wait()
        self.sock.close()
        self._wake_r.close()
        self._wake_w.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# --- the child's side ------------------------------------------------------------------------------
@dataclass(slots=True)
class _File:
    sig: tuple[int, int, int]  # inode, mtime, size: a new file is a new inode (os.replace)
    seq: int
    data: bytes


_NAME_OK = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*\Z")


class Published:
    """The child's view of the daemon's files, answering as :meth:`Exposition.answer` does."""

    def __init__(self, directory: Path, parent: int, control: socket.socket | None) -> None:
        self.dir = directory
        self.parent = parent
        self.control = control
        self._lock = threading.Lock()
        self._files: dict[str, _File] = {}
        self._tail: tuple[tuple[int, int, int], list[Any]] | None = None  # rows: families, or _PROCESS
        self._encoded: dict[Any, list[bytes]] = {}  # per encoding, the tail's parts around the process figures
        self._process = ProcessCollector(pid=lambda: parent, registry=None)
        self._parsed: tuple[int, dict[str, Metric]] | None = None  # name[]'s families of one render

    def _read(self, name: str) -> _File | None:
        path = self.dir / name
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        with self._lock:
            had = self._files.get(name)
        if had is not None and had.sig == sig:
            return had
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                raw = f.read()
        except FileNotFoundError:  # replaced between: the caller asks again
            return None
        head, _, data = raw.partition(b"\n")
        got = _File((st.st_ino, st.st_mtime_ns, st.st_size), int(head), data)
        with self._lock:
            self._files[name] = got
        return got

    def _tail_rows(self) -> tuple[tuple[int, int, int], list[Any]]:
        path = self.dir / "tail.json"
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise _NotYet(path.name) from None
        sig = (st.st_ino, st.st_mtime_ns, st.st_size)
        cached = self._tail
        if cached is None or cached[0] != sig:
            rows = [_PROCESS if r == _PROCESS else _family_from_json(r) for r in json.loads(path.read_bytes())]
            cached = self._tail = (sig, rows)
            self._encoded = {}
        return cached

    def tail(self) -> list[Metric]:
        """The per-scrape families: the daemon's last, its process figures read now."""
        out: list[Metric] = []
        for row in self._tail_rows()[1]:
            out += self._process.collect() if row is _PROCESS else [row]
        return out

    def encoded_tail(self, encoder: Any) -> bytes:
        """:meth:`tail` in ``encoder``: the daemon's families encoded once per change of them (their help
        texts escaped char by char were most of a scrape's CPU), the process figures at each scrape."""
        rows = self._tail_rows()[1]
        key = (getattr(encoder, "func", encoder), tuple(sorted(getattr(encoder, "keywords", {}).items())))
        parts: list[bytes] | None = self._encoded.get(key)
        if parts is None:
            parts = []
            run: list[Metric] = []
            for row in [*rows, None]:  # None: the end
                if row is _PROCESS or row is None:
                    parts.append(_encode_part(encoder, run))
                    run = []
                else:
                    run.append(row)
            if len(self._encoded) < MAX_WANTS:
                self._encoded[key] = parts
        process = _encode_part(encoder, list(self._process.collect()))
        return process.join(parts) + (_OM_EOF if encoder(_Families([])) == _OM_EOF else b"")

    def _ask(self, tag: str, accept: str) -> None:
        """Tell the daemon ``tag`` was scraped: the want file's time, and a byte to wake it."""
        path = self.dir / f"want.{tag}"
        try:
            os.utime(path)
        except FileNotFoundError:
            if sum(1 for n in os.listdir(self.dir) if n.startswith("want.")) >= MAX_WANTS:
                raise _TooMany(tag) from None
            _write(self.dir, path.name, accept.encode("ascii", "replace")[:MAX_ACCEPT])

    def _wake(self) -> None:
        if self.control is not None:
            with contextlib.suppress(OSError):
                self.control.send(b"w")

    def _body(self, tag: str, accept: str) -> _File | None:
        """``tag``'s body of the daemon's last render, waiting (bounded) for it to be written."""
        if tag != PROMETHEUS_TAG:
            self._ask(tag, accept)
        deadline = time.monotonic() + WAIT_SECONDS
        asked_at = 0.0
        while True:
            got = self._read(f"body.{tag}")
            last = self._read(f"body.{PROMETHEUS_TAG}") if tag != PROMETHEUS_TAG else got
            if got is not None and (last is None or got.seq >= last.seq):
                return got
            now = time.monotonic()
            if now >= deadline:
                return got  # an older render's, or None
            if now - asked_at >= ASK_AGAIN:
                self._wake()
                asked_at = now
            time.sleep(0.01)  # bounded polling for the daemon's file

    def answer(
        self, accept: str | None, accept_encoding: str | None, names: list[str] | None = None
    ) -> tuple[list[tuple[str, str]], bytes]:
        encoder, headers, gz = negotiate(accept, accept_encoding)
        if names:
            data = encoder(self._restricted(names))
            body = gzip_member(data) if gz else data
        else:
            tag = encoding_tag(encoder, gz)
            got = self._body(tag, (accept or "")[:MAX_ACCEPT])
            if got is None:
                raise _NotYet(tag)
            tail = self.encoded_tail(encoder)
            body = got.data + (gzip_member(tail) if gz else tail)
        return headers, body

    def _restricted(self, names: list[str]) -> Any:
        """name[]: the families holding those samples, parsed back from the OpenMetrics body."""
        got = self._body(PROMETHEUS_TAG, PROMETHEUS_ACCEPT)
        if got is None:
            raise _NotYet(PROMETHEUS_TAG)
        parsed = self._parsed
        if parsed is None or parsed[0] != got.seq:
            text = gzip.decompress(got.data)
            parse: Any = text_string_to_metric_families  # untyped in prometheus_client
            fams = {f.name: f for f in parse((text + _OM_EOF).decode())}
            parsed = self._parsed = (got.seq, fams)
        registry = CollectorRegistry()
        registry.register(_Families(list(parsed[1].values())))
        registry.register(_Families(self.tail()))
        return registry.restricted_registry([n for n in names if _NAME_OK.match(n)])


def _encode_part(encoder: Any, families: list[Metric]) -> bytes:
    """``families`` in ``encoder``, without OpenMetrics' closing line (parts are joined, then closed)."""
    data: bytes = encoder(_Families(families))
    return data[: -len(_OM_EOF)] if data.endswith(_OM_EOF) else data


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families

    def describe(self) -> list[Metric]:
        return self.families


class _NotYet(RuntimeError):
    def __init__(self, tag: str) -> None:
        super().__init__(f"/metrics: the daemon has not written {tag} yet")


class _TooMany(RuntimeError):
    def __init__(self, tag: str) -> None:
        super().__init__(f"/metrics: more than {MAX_WANTS} encodings asked for; {tag} refused")


def child_app(published: Published) -> Any:
    """:func:`~.http.exposition_app` over the daemon's files; 503 while they are not there."""
    inner = exposition_app(published)

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        try:
            return list(inner(environ, start_response))
        except (_NotYet, _TooMany) as e:
            log.warning("%s", e)
            start_response("503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"# {e}\n".encode()]

    return app


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The gwms-obs daemon's /metrics server (started by the daemon).")
    ap.add_argument("--listen-fd", type=int, required=True)
    ap.add_argument("--control-fd", type=int, required=True)
    ap.add_argument("--dir", type=Path, required=True)
    ap.add_argument("--parent", type=int, required=True)
    ap.add_argument("--log-level", type=int, default=logging.WARNING)
    a = ap.parse_args(argv)
    logging.basicConfig(level=a.log_level, format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s")
    # The daemon's signals are its own: a Ctrl-C or a stop reaches the whole group, and this one
    # ends when the daemon does (its end of the pair closes), after the daemon's last answer.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sock = socket.socket(fileno=a.listen_fd)
    control = socket.socket(fileno=a.control_fd)
    published = Published(a.dir, a.parent, control)
    host = sock.getsockname()[0]
    server = MetricsServer(host, 0, SharedRenders(child_app(published)), sock=sock)
    try:
        while True:
            try:
                if not control.recv(64):  # the daemon never writes: this returns when it is gone
                    break
            except InterruptedError:
                continue
            except OSError:
                break
    finally:
        server.close(1.0)
    # The daemon is gone (or stopping: it removes them too): its files with it, even if it was killed.
    shutil.rmtree(a.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
