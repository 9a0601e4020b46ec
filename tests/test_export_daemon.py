"""`gwms-obs export` as a process (issue 29): one exporter per checkpoint, a /metrics that holds up
under concurrent and idle connections, `--once` without a port, and a factory dir waited for.

Each test runs the real command in a subprocess on 127.0.0.1 and stops what it starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gwms_obs import catalogue
from gwms_obs.simulate.factory import simulate
from tests.support.servers import export_command, first_scan_done, free_port, http_get, process, wait_for


def gwms_obs(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GWMS_OBS_"))}
    return subprocess.run(
        [sys.executable, "-m", "gwms_obs.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("factory")
    simulate(out, 40, seed=3)
    return out


@contextlib.contextmanager
def daemon(
    factory: Path, checkpoint: Path, log: Path, *, interval: float = 3600, scanned: bool = True
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """`gwms-obs export` running; yields it and its /metrics URL once it answers (and has scanned)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    with process(export_command(factory, port, checkpoint, interval=interval, settle=0), log) as p:

        def ready() -> bool:
            if p.poll() is not None:
                raise AssertionError(f"export exited with {p.returncode}:\n{log.read_text()[-3000:]}")
            body = http_get(url)
            return first_scan_done(body) if scanned else bool(body)

        wait_for("the exporter's /metrics", ready, 60)
        yield p, url


def threads_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


def scrape(port: int, timeout: float = 30.0) -> tuple[float, bytes]:
    """One GET /metrics on a fresh connection: (seconds from connect to the last byte, the status line)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        chunks = []
        while chunk := s.recv(1 << 16):
            chunks.append(chunk)
    return time.monotonic() - t0, b"".join(chunks).split(b"\r\n", 1)[0]


# --- hole 9: one exporter per checkpoint -----------------------------------------------------------
def test_a_second_exporter_on_the_same_checkpoint_is_refused_naming_the_first(factory: Path, tmp_path: Path) -> None:
    ck = tmp_path / "checkpoint.json"
    with daemon(factory, ck, tmp_path / "first.log") as (first, _):
        # --once too: it would write the checkpoint under the daemon's feet.
        once = gwms_obs("export", "--factory-dir", str(factory), "--checkpoint", str(ck), "--once")
        assert once.returncode == 2, once.stderr
        (line,) = once.stderr.strip().splitlines()
        assert f"pid {first.pid}," in line and str(ck) in line and "in use by another gwms-obs export" in line, line
        # A second daemon on another port: refused before it reads the checkpoint or binds anything.
        second = gwms_obs(*export_command(factory, free_port(), ck, interval=3600, settle=0)[3:], timeout=60)
        assert second.returncode == 2, second.stderr
        assert f"pid {first.pid}," in second.stderr, second.stderr
        assert "serving /metrics" not in second.stderr
        first.send_signal(signal.SIGKILL)  # dies holding the lock: the kernel releases it
        first.wait(10)
    lock = Path(f"{ck}.lock")
    assert f'"pid": {first.pid},' in lock.read_text()  # the dead holder's name is still in the file
    after = gwms_obs("export", "--factory-dir", str(factory), "--checkpoint", str(ck), "--once")
    assert after.returncode == 0, after.stderr


def test_report_needs_no_lock(factory: Path, tmp_path: Path) -> None:
    """report keeps no checkpoint: it runs beside the exporter."""
    with daemon(factory, tmp_path / "checkpoint.json", tmp_path / "export.log"):
        r = gwms_obs("report", "--factory-dir", str(factory), "--format", "csv")
        assert r.returncode == 0, r.stderr


# --- hole 12: /metrics under concurrent and idle connections ---------------------------------------
def test_100_concurrent_scrapes_are_all_answered_within_2s(factory: Path, tmp_path: Path) -> None:
    with daemon(factory, tmp_path / "checkpoint.json", tmp_path / "export.log") as (_, url):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        start = threading.Barrier(100)
        results: list[tuple[float, bytes] | BaseException] = []

        def one() -> None:
            start.wait(30)
            try:
                results.append(scrape(port))
            except OSError as e:
                results.append(e)

        threads = [threading.Thread(target=one) for _ in range(100)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert len(results) == 100
        failed = [r for r in results if isinstance(r, BaseException)]
        assert not failed, failed[:3]
        times = sorted(r[0] for r in results if not isinstance(r, BaseException))
        assert all(r[1] == b"HTTP/1.0 200 OK" for r in results if not isinstance(r, BaseException))
        assert times[-1] < 2.0, f"slowest of 100 concurrent scrapes: {times[-1]:.2f}s (median {times[50]:.2f}s)"


def test_200_idle_connections_cost_no_threads_and_scrapes_go_on(factory: Path, tmp_path: Path) -> None:
    with daemon(factory, tmp_path / "checkpoint.json", tmp_path / "export.log") as (p, url):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        before = threads_of(p.pid)
        with contextlib.ExitStack() as idle:
            for i in range(200):
                s = idle.enter_context(socket.create_connection(("127.0.0.1", port), timeout=10))
                if i % 2:  # half send the start of a request and nothing more
                    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            # Accepted in order: once this scrape is answered, all 200 were accepted before it.
            took, status = scrape(port)
            assert status == b"HTTP/1.0 200 OK"
            assert took < 2.0, f"a scrape beside 200 idle connections took {took:.2f}s"
            during = threads_of(p.pid)
        assert during <= before + 2, f"{during - before} more threads with 200 idle connections open"


# --- hole 18: --once binds no port ----------------------------------------------------------------
def test_export_once_binds_no_port(factory: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:  # as the production exporter or `make run` holds 9822
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        addr = f"127.0.0.1:{taken.getsockname()[1]}"
        r = gwms_obs(
            "export", "--factory-dir", str(factory), "--listen", addr, "--once", "--settle-seconds", "0",
            "--checkpoint", str(tmp_path / "ck.json"),
        )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "cannot listen" not in r.stderr
    assert (tmp_path / "ck.json").exists()


# --- hole 19: the factory dir is waited for -------------------------------------------------------
@pytest.mark.parametrize("kind", ["missing", "neither-client-nor-server"])
def test_export_waits_for_the_factory_dir(kind: str, tmp_path: Path) -> None:
    d = tmp_path / "factory"
    if kind != "missing":
        (d / "logs").mkdir(parents=True)  # the factory's dir, before the factory first ran
    staging = tmp_path / "staging"
    simulate(staging, 20, seed=5)
    log = tmp_path / "export.log"
    with daemon(d, tmp_path / "checkpoint.json", log, interval=0.2, scanned=False) as (p, url):
        assert not first_scan_done(http_get(url))
        text = log.read_text()
        assert "waiting for the factory to create it" in text and str(d) in text, text
        assert text.count("waiting for the factory") == 1  # said once, not every poll
        if kind == "missing":
            staging.rename(d)
        else:
            for sub in staging.iterdir():
                sub.rename(d / sub.name)
        wait_for("the first scan of the new factory", lambda: first_scan_done(http_get(url)))
        body = http_get(url)
        assert f"{catalogue.PILOTS.name}{{".encode() in body
        assert p.poll() is None
        assert f"factory_dir {d} is ready: scanning" in log.read_text()


def test_export_still_refuses_a_factory_dir_no_wait_fixes(tmp_path: Path) -> None:
    """A file where the dir should be is a wrong configuration, not a factory still to start."""
    d = tmp_path / "factory"
    d.write_text("not a directory\n")
    r = gwms_obs("export", "--factory-dir", str(d), "--listen", f"127.0.0.1:{free_port()}", timeout=60)
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert "factory_dir" in line and str(d) in line and "is not a directory" in line, line
