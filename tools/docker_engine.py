"""A Docker engine for the container tests: a reachable one, or our own ``dockerd``.

Nothing here touches a system Docker service. If ``DOCKER_HOST`` (or the
default socket) answers a ping, that engine is used as it is. Otherwise,
where Debian's ``docker.io`` is installed and we are root, ``dockerd`` is
started by hand with its own data root under the versioned cache dir (so
images built once survive between runs), its own exec root, socket and
pidfile under /run, no iptables changes beyond its own bridge, and it is
stopped again when the context ends. A lock keeps two test runs from
starting two daemons on one data root.

    python -m tools.docker_engine start   # prints `export DOCKER_HOST=...`; runs until `stop`
    python -m tools.docker_engine stop
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tools import polling, rootfs

RUN_DIR = Path("/run/gwms-obs-docker")  # short: a unix socket path has ~100 bytes
SOCKET = RUN_DIR / "docker.sock"
PIDFILE = RUN_DIR / "dockerd.pid"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0


class EngineUnavailable(RuntimeError):
    """No engine answers and none can be started here (the message says why)."""


def data_root() -> Path:
    return rootfs.cache_dir() / "docker"


def ping(host: str | None) -> str | None:
    """None when the engine at ``host`` (None: the environment's) answers, else why not."""
    import docker

    try:
        client = docker.DockerClient(base_url=host, timeout=10) if host else docker.from_env(timeout=10)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as e:  # DockerException, requests' errors, FileNotFoundError: all mean "not here"
        return f"{type(e).__name__}: {str(e)[:160]}"
    return None


@dataclass(frozen=True)
class Engine:
    host: str  # a DOCKER_HOST value
    started: bool  # True: our dockerd, stopped when the context ends
    log: Path | None = None

    def env(self) -> dict[str, str]:
        """The environment for docker, compose and testcontainers talking to this engine."""
        return {"DOCKER_HOST": self.host}


def why_not_startable() -> str | None:
    if shutil.which("dockerd") is None:
        return "dockerd not installed (apt-get install --no-install-recommends docker.io)"
    if os.geteuid() != 0:
        return "starting dockerd needs root"
    return None


def _start(log: Path) -> subprocess.Popen[bytes]:
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    root = data_root()
    root.mkdir(parents=True, exist_ok=True)
    SOCKET.unlink(missing_ok=True)
    cmd = [
        "dockerd",
        f"--data-root={root / 'data'}",
        f"--exec-root={RUN_DIR / 'exec'}",
        f"--host=unix://{SOCKET}",
        f"--pidfile={PIDFILE}",
    ]
    out = open(log, "ab")  # noqa: SIM115 - the daemon writes here for its whole life
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_ready(proc: subprocess.Popen[bytes], host: str, log: Path) -> None:
    def up() -> bool:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            raise EngineUnavailable(f"dockerd exited ({proc.returncode}); {log}:\n{tail}")
        return ping(host) is None

    polling.poll("dockerd to answer", up, START_TIMEOUT, step=0.3)


def _stop_pid(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        # our child: reap it so it does not linger as a zombie that still "exists"
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def engine(log: Path | None = None) -> Iterator[Engine]:
    """A reachable engine, or our own dockerd for the life of the context."""
    if ping(None) is None:
        yield Engine(os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock"), started=False)
        return
    host = f"unix://{SOCKET}"
    why = why_not_startable()
    if why is not None:
        raise EngineUnavailable(f"no Docker engine reachable and none can be started: {why}")
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    with open(RUN_DIR / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one run at a time owns the data root
        if ping(host) is None:  # left running by `python -m tools.docker_engine start`
            yield Engine(host, started=False)
            return
        log = log or data_root() / "dockerd.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        proc = _start(log)
        try:
            _wait_ready(proc, host, log)
            yield Engine(host, started=True, log=log)
        finally:
            _stop_pid(proc.pid)
            proc.wait(timeout=5)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.docker_engine", description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=["start", "stop", "status"])
    a = p.parse_args(argv)
    host = f"unix://{SOCKET}"
    if a.action == "status":
        why = ping(host)
        print(f"running: export DOCKER_HOST={host}" if why is None else f"not running ({why})")
        return 0 if why is None else 1
    if a.action == "stop":
        if PIDFILE.exists():
            _stop_pid(int(PIDFILE.read_text().strip()))
        return 0
    if ping(host) is None:
        print(f"export DOCKER_HOST={host}")
        return 0
    why = why_not_startable()
    if why:
        print(f"cannot start dockerd: {why}")
        return 1
    log = data_root() / "dockerd.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    _wait_ready(_start(log), host, log)
    print(f"export DOCKER_HOST={host}   # stop it with: python -m tools.docker_engine stop")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
