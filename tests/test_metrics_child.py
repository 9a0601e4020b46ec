"""/metrics from a process of its own (outputs/serve.py, issue 34): the same bytes as the daemon's own
render, answered while the daemon's GIL is held, gone with the daemon, restarted when it dies."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.exposition import choose_encoder

from gwms_obs import catalogue
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.outputs.http import listen
from gwms_obs.outputs.prometheus import Exposition
from gwms_obs.outputs.serve import ServingChild, encoding_tag
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing.outbox import ForwarderStats
from tests.support.servers import export_command, first_scan_done, process
from tools.polling import http_get
from tools.polling import poll as wait_for
from tools.tracing_backends import free_port

ACCEPTS = (
    None,  # text 0.0.4
    "application/openmetrics-text; version=1.0.0; charset=utf-8",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,text/plain;version=0.0.4;q=0.3",
    "text/plain;version=1.0.0;escaping=underscores",
)
PROMETHEUS = ACCEPTS[1]
# Families whose values move between two reads on their own (CPU time, memory, collections).
_VOLATILE = (b"process_", b"python_gc_")
RESTARTS = catalogue.METRICS_SERVER_RESTARTS.name.encode()


def _steady(body: bytes) -> bytes:
    return b"\n".join(line for line in body.split(b"\n") if not line.lstrip(b"# HELPTYPE").startswith(_VOLATILE))


def _get(port: int, accept: str | None, encoding: str | None = None, query: str = "") -> tuple[dict[str, str], bytes]:
    headers = {k: v for k, v in (("Accept", accept), ("Accept-Encoding", encoding)) if v}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics{query}", headers=headers)
    with urllib.request.urlopen(req, timeout=20) as r:
        body = r.read()
        got = {k: r.headers[k] for k in ("Content-Type", "Content-Encoding") if r.headers[k]}
    return got, gzip.decompress(body) if encoding else body


@pytest.fixture
def child(tmp_path: Path) -> Iterator[tuple[Ingest, Exposition, ServingChild, int]]:
    simulate(tmp_path / "factory", 200, seed=23)
    now = time.time() + 600  # one clock: the lag is the same in both expositions
    ing = Ingest(
        IngestConfig(str(tmp_path / "factory"), settle_seconds=0, final=True, lost_after_seconds=0), clock=lambda: now
    )
    stats = ForwarderStats()
    stats.sent_spans, stats.failures = 17, 2
    expo = Exposition(ing, stats, "childfactory", min_gap=0.05, poll=0.05)
    sock = listen("127.0.0.1", 0)
    served = ServingChild(expo, sock)
    expo.start()
    served.start()
    try:
        yield ing, expo, served, sock.getsockname()[1]
    finally:
        served.close()
        expo.stop()
    assert served.proc is not None and served.proc.returncode == 0  # ended by the daemon's end closing
    assert not served.dir.exists()


def _same_as_in_process(expo: Exposition, port: int, accept: str | None, encoding: str | None) -> None:
    """The child's answer equals the daemon's own (``Exposition.answer``), once the child has the last
    render and per-scrape families (written within TAIL_SECONDS: polled, bounded)."""
    deadline = time.monotonic() + 15
    while True:
        headers, body = _get(port, accept, encoding)
        want_headers, want = expo.answer(accept, encoding)
        if encoding:
            want = gzip.decompress(want)
        if _steady(body) == _steady(want) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert headers == dict(want_headers), (accept, encoding)
    assert _steady(body) == _steady(want), (accept, encoding)
    assert RESTARTS + b" 0.0" in body and b"process_cpu_seconds" in body


def test_the_child_serves_the_in_process_render_byte_for_byte(
    child: tuple[Ingest, Exposition, ServingChild, int],
) -> None:
    ing, expo, served, port = child
    for scan in range(2):  # the empty ledger, then the scanned one
        if scan:
            assert ing.scan().pilots > 0
            expo.changed()
        for accept in ACCEPTS:
            for encoding in (None, "gzip"):
                _same_as_in_process(expo, port, accept, encoding)
        # name[]: from the render and the per-scrape part alike (families in a set's order: line by line)
        query = "?name[]=gwms_pilots_total&name[]=gwms_obs_lag_seconds&name[]=gwms_pilot_lifetime_seconds_bucket"
        names = ["gwms_pilots_total", "gwms_obs_lag_seconds", "gwms_pilot_lifetime_seconds_bucket"]
        for accept in (PROMETHEUS, None):
            headers, body = _get(port, accept, query=query)
            want_headers, want = expo.answer(accept, None, names)
            assert headers == dict(want_headers) and sorted(body.split(b"\n")) == sorted(want.split(b"\n"))
            assert b"gwms_obs_lag_seconds{" in body and b"gwms_cpu_seconds" not in body
    assert b"gwms_pilots_total{" in body
    assert b" # {trace_id=" in _get(port, PROMETHEUS)[1]  # the exemplars, from the daemon's render
    # The daemon's process figures, not the child's.
    assert served.proc is not None
    start = [ln for ln in _get(port, None)[1].split(b"\n") if ln.startswith(b"process_start_time_seconds ")]
    own = [ln for ln in expo.answer(None, None)[1].split(b"\n") if ln.startswith(b"process_start_time_seconds ")]
    assert start == own and len(start) == 1


_CLIENT = """
import json, socket, sys, time
port, start, until = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
head = ("GET /metrics HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n"
        "Accept: application/openmetrics-text; version=1.0.0\\r\\nAccept-Encoding: gzip\\r\\n\\r\\n").encode()
time.sleep(max(0.0, start - time.time()))
took = []
while time.time() < until:
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(head)
        data = b"".join(iter(lambda: s.recv(1 << 20), b""))
    took.append((time.perf_counter() - t0, data.startswith(b"HTTP/1.0 200") and len(data) > 1000))
    time.sleep(0.05)
print(json.dumps(took))
"""


def test_a_scrape_is_answered_while_the_daemon_holds_its_gil(
    child: tuple[Ingest, Exposition, ServingChild, int],
) -> None:
    """The daemon busy in pure Python for 2 s, no thread of its own let in (a switch interval longer
    than the loop): scrapes from another process are answered in milliseconds all along. Served in
    the daemon's process, each would wait for the loop's end."""
    _, _, _, port = child
    _get(port, PROMETHEUS, "gzip")  # the child is up and has the render
    begin = time.time() + 1.0  # the client is started (an interpreter: well under a second)
    client = subprocess.Popen(
        [sys.executable, "-c", _CLIENT, str(port), str(begin + 0.2), str(begin + 1.8)], stdout=subprocess.PIPE
    )
    interval = sys.getswitchinterval()
    try:
        time.sleep(max(0.0, begin - time.time()))
        sys.setswitchinterval(30.0)
        x, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < 2.0:  # the GIL held: the renderer, the publisher, all wait
            x += 1
        held = time.monotonic() - t0
    finally:
        sys.setswitchinterval(interval)
    out, _ = client.communicate(timeout=60)
    took = json.loads(out)
    assert held >= 2.0 and x > 0
    assert len(took) >= 5 and all(ok for _, ok in took), took
    assert max(t for t, _ in took) < 0.5, took  # in-process, one would wait ~1-2 s


def _children(pid: int) -> set[int]:
    kids: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            kids |= {int(k) for k in (task / "children").read_text().split()}
    return kids


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # ended; reparented, its reaper may not have waited for it yet


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return False
    return True


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, Path]]:
    simulate(tmp_path / "factory", 30, seed=4)
    port = free_port()
    log = tmp_path / "exporter.log"
    cmd = export_command(tmp_path / "factory", port, tmp_path / "checkpoint.json", interval=3600, settle=0)
    with process(cmd, log) as p:
        wait_for("the first scan", lambda: first_scan_done(http_get(f"http://127.0.0.1:{port}/metrics")), 120)
        yield p, port, log


def test_a_killed_serving_process_is_restarted_and_counted(
    daemon: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    p, port, log = daemon
    url = f"http://127.0.0.1:{port}/metrics"
    (first,) = _children(p.pid)
    assert RESTARTS + b" 0.0" in http_get(url)
    os.kill(first, signal.SIGKILL)
    wait_for("a new serving process", lambda: _children(p.pid) - {first}, 30)
    wait_for("the restart counted", lambda: RESTARTS + b" 1.0" in http_get(url, timeout=5), 30)
    assert first_scan_done(http_get(url)) and p.poll() is None
    assert f"the serving process {first} ended (killed by signal 9" in log.read_text()


def test_the_serving_process_ends_with_a_sigkilled_daemon(
    daemon: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    p, port, _ = daemon
    (kid,) = _children(p.pid)
    args = Path(f"/proc/{kid}/cmdline").read_bytes().split(b"\0")
    files = Path(args[args.index(b"--dir") + 1].decode())
    assert not _gone(kid) and _listening(port) and files.is_dir()
    p.kill()
    p.wait(10)
    wait_for("the serving process to end", lambda: _gone(kid), 15)
    assert not _listening(port)  # no orphan holds the port
    assert not files.exists()  # nor its files (in memory, on tmpfs)


def test_an_encoding_other_than_prometheus_is_written_only_when_scraped(
    child: tuple[Ingest, Exposition, ServingChild, int],
) -> None:
    """Prometheus' OpenMetrics gzipped is written with every render; another form (here the same
    OpenMetrics, plain) only when the child is asked for it, for the render then: one curl must not
    cost every render after (at 301,040 pilots the plain text written with each render for the ten
    minutes it stays wanted cost ~0.5 % of a core)."""
    ing, expo, served, port = child
    om_gz, om_raw = (served.dir / f"body.{encoding_tag(choose_encoder(PROMETHEUS)[0], gz)}" for gz in (True, False))

    def seq(path: Path) -> int:
        return int(path.read_bytes().split(b"\n", 1)[0])

    _get(port, PROMETHEUS)  # plain: waits for the daemon to write it for the last render
    assert seq(om_raw) == seq(om_gz)
    before = seq(om_gz)
    assert ing.scan().pilots > 0
    while expo.refresh():  # the scan's last change rendered (the renderer's thread rendered some meanwhile)
        pass
    assert seq(om_gz) > before and seq(om_raw) == before  # not written again
    _, body = _get(port, PROMETHEUS)  # asked again: written for the last render, and served
    assert seq(om_raw) == seq(om_gz) and b"gwms_pilots_total{" in body


def test_a_new_encoding_is_answered_on_a_quiet_factory(
    daemon: tuple[subprocess.Popen[bytes], int, Path],
) -> None:
    """Nothing changes after the first scan, so no render comes; each tick only moves the scan's end
    (Exposition replaces its render, sharing the bodies). A form never asked for before must still be
    written for that render and answered at once: compose's healthcheck (plain text) waited for a
    render that never came and the exporter's container stayed unhealthy."""
    _, port, _ = daemon
    url = f"http://127.0.0.1:{port}/metrics"

    def last_scan() -> bytes:
        lines = [ln for ln in _get(port, PROMETHEUS, "gzip")[1].split(b"\n") if ln.startswith(b"gwms_obs_last_scan")]
        return b"".join(lines)

    first = last_scan()
    wait_for("a tick's scan end served (the render replaced, nothing new)", lambda: last_scan() != first, 30)
    for accept in (ACCEPTS[3], PROMETHEUS):  # neither asked for yet: plain text 1.0.0, plain OpenMetrics
        t0 = time.monotonic()
        _, body = _get(port, accept)
        assert time.monotonic() - t0 < 5, accept  # the child waits up to WAIT_SECONDS (10) for a body
        assert first_scan_done(body) and b"gwms_pilots_total" in body
    assert first_scan_done(http_get(url))
