"""Archived logs replayed into a watched tree while the daemon is killed (SIGKILL) and restarted.

A simulated factory (months old: its events are older than the timeline's 30
days) is the archive. Its files arrive in a live tree in pieces, in the
factory's order of kinds (configuration, then the pilots' .out/.err, moved in
whole; then the completed_jobs lines; then the event logs), each log cut at
random byte offsets (half lines and half events included), one completed_jobs
log renamed logrotate-style (``.log.1``) half way and appended to under its new
name, as the factory holding it open would. A real ``gwms-obs export`` scans
it every 0.2 s and is killed with SIGKILL at random moments (mid-scan,
mid-checkpoint) and restarted from its checkpoint. At the end its /metrics
equal ``gwms-obs report`` on the same files: the same pilots per entry, the
same seconds per (entry, category, resource).
"""

from __future__ import annotations

import functools
import itertools
import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from gwms_obs.simulate.factory import simulate
from tests.support.servers import export_command, free_port
from tests.test_live_numbers import Numbers, agree, report, scrape
from tools.polling import poll as wait_for

PILOTS = 150
PIECES = 3
KILLS = 6


def cut(data: bytes, rng: random.Random, n: int) -> list[bytes]:
    """``data`` in ``n`` pieces cut at random bytes (a piece may end mid-line)."""
    points = sorted(rng.sample(range(1, len(data)), min(n - 1, len(data) - 1))) if len(data) > 1 else []
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def arrivals(archive: Path, live: Path, rng: random.Random) -> list[Callable[[], None]]:
    """The steps that move the archive into ``live``, in order."""

    def place(srcs: list[Path]) -> None:
        """Whole files moved in (written aside, renamed: never seen half written)."""
        for src in srcs:
            dst = live / src.relative_to(archive)
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(".incoming")
            shutil.copy2(src, tmp)
            os.replace(tmp, dst)

    def append(dst: Path, piece: bytes) -> None:
        dst.parent.mkdir(parents=True, exist_ok=True)
        with open(dst, "ab") as f:
            f.write(piece)

    files = sorted(p for p in archive.rglob("*") if p.is_file())
    completed = [p for p in files if p.name.startswith("completed_jobs_")]
    events = [p for p in files if p.name.startswith("condor_activity_")]
    pilot_files = [p for p in files if p.name.startswith("job.")]
    config = [p for p in files if p not in {*completed, *events, *pilot_files}]
    steps: list[Callable[[], None]] = [functools.partial(place, config)]
    rng.shuffle(pilot_files)
    steps += [functools.partial(place, pilot_files[i::PIECES]) for i in range(PIECES)]
    rotated = max(completed, key=lambda p: p.stat().st_size)
    for kind in (completed, events):
        pieces = {p: cut(p.read_bytes(), rng, PIECES) for p in kind}
        for i in range(PIECES):
            order = list(kind)
            rng.shuffle(order)
            for p in order:
                if i < len(pieces[p]):
                    dst = live / p.relative_to(archive)
                    if p == rotated and i > 0:
                        if i == 1:  # logrotate renames it; the factory appends on to the open file
                            steps.append(functools.partial(os.rename, dst, dst.with_name(dst.name + ".1")))
                        dst = dst.with_name(dst.name + ".1")
                    steps.append(functools.partial(append, dst, pieces[p][i]))
    return steps


def settle(daemon: subprocess.Popen[bytes], url: str, log: Path, last_change: float) -> Numbers:
    """/metrics once two scans began after ``last_change`` (the second after every piece was there)."""
    scans_after: list[float] = []

    def settled() -> Numbers | None:
        if daemon.poll() is not None:
            raise RuntimeError(f"the exporter exited with {daemon.returncode}:\n{log.read_text()[-3000:]}")
        try:
            n = scrape(url)
        except OSError:
            return None  # not listening yet
        if n.last_scan is not None and n.last_scan > last_change and n.last_scan not in scans_after:
            scans_after.append(n.last_scan)
        return n if len(scans_after) >= 2 else None  # the second one began after the last change

    return wait_for("two scans after the last piece", settled, 60, 0.1)


def stop(daemon: subprocess.Popen[bytes]) -> None:
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(15)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(5)


def test_replay_into_a_live_tree_with_kills_equals_report(tmp_path: Path) -> None:
    archive, live = tmp_path / "archive", tmp_path / "live"
    simulate(archive, PILOTS, seed=29)
    rng = random.Random(29)
    steps = arrivals(archive, live, rng)
    live.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    cmd = export_command(live, port, tmp_path / "checkpoint.json", interval=0.2, settle=0)
    log = tmp_path / "exporter.log"
    kill_after = set(rng.sample(range(1, len(steps)), KILLS))
    deadline = time.monotonic() + 50

    def start() -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    daemon = start()
    try:
        for i, step in enumerate(steps):
            assert time.monotonic() < deadline, "the replay took too long"
            step()
            time.sleep(rng.uniform(0.0, 0.08))  # the daemon scans as pieces arrive (not a race guard)
            if i in kill_after:
                time.sleep(rng.uniform(0.0, 0.5))  # anywhere: starting, mid-scan, mid-checkpoint
                assert daemon.poll() is None, log.read_text()[-3000:]
                daemon.send_signal(signal.SIGKILL)
                daemon.wait(10)
                daemon = start()
        last_change = time.time()
        want = report(live)
        assert sum(want.pilots.values()) > PILOTS // 2, want.pilots
        got = settle(daemon, url, log, last_change)
    finally:
        stop(daemon)
    bad = agree(got, want)
    assert not bad, "daemon (/metrics) after kills vs report, per (entry, category, resource):\n" + "\n".join(bad)
    assert got.pilots == want.pilots
