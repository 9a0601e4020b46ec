"""A real ``gwms-obs export`` killed (SIGKILL) while it appends its checkpoint's journal.

The daemon watches (inotify) a tree its files arrive in, in pieces (tests/test_replay_crashes.py's
replay: event logs cut mid-event, a log rotated), and appends a journal record every tick that
changed something (CHECKPOINT_SECONDS 0: a journal record is that cheap; a daemon's default is 300
s). It is killed at random moments a tick or two after it served its first scan, mostly between appends
(a record of this tree is written in well under a millisecond, so a kill rarely tears one: every other
restart finds its journal's last record cut short, as such a kill leaves it), and restarted on its base
and journal. At the end its
/metrics equal ``gwms-obs report`` on the same files, and restarts took pilots counted from records.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from gwms_obs.ingest import checkpoint
from gwms_obs.simulate.factory import simulate
from tests.support.servers import export_command, first_scan_done, free_port
from tests.test_live_numbers import agree, report
from tests.test_replay_crashes import arrivals, settle, stop
from tools.polling import http_get
from tools.polling import poll as wait_for

PILOTS = 150
KILLS = 8
# `gwms-obs export` as users start it, with a journal record at every tick that changed something.
DAEMON = "import sys; from gwms_obs import cli, pipeline; pipeline.CHECKPOINT_SECONDS = 0.0; sys.exit(cli.main())"


def test_kills_during_journal_appends_then_restart_equal_report(tmp_path: Path) -> None:
    archive, live = tmp_path / "archive", tmp_path / "live"
    simulate(archive, PILOTS, seed=37)
    rng = random.Random(37)
    steps = arrivals(archive, live, rng)
    live.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    ck = tmp_path / "checkpoint.json"
    journal = Path(f"{ck}{checkpoint.JOURNAL_SUFFIX}")
    cmd = [sys.executable, "-c", DAEMON, *export_command(live, port, ck, interval=1, settle=0)[3:]]
    log = tmp_path / "exporter.log"
    kill_after = set(rng.sample(range(1, len(steps)), KILLS))
    # At each kill: the journal's size, the pilots counted in the base and in base + journal.
    journals: list[tuple[int, int, int]] = []
    cuts = 0  # journals whose last record was cut before a restart
    deadline = time.monotonic() + 120

    def start(*, wait: bool = True) -> subprocess.Popen[bytes]:
        with open(log, "ab") as out:
            d = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

        def serving() -> bool:  # its first (full) scan done: the ticks that append come next
            assert d.poll() is None, log.read_text()[-3000:]
            try:
                return first_scan_done(http_get(url))
            except OSError:
                return False

        if wait:
            wait_for("the exporter's first scan", serving, 60, 0.05)
        return d

    daemon = start(wait=False)  # the tree is empty: it waits for the factory to create it
    try:
        for i, step in enumerate(steps):
            assert time.monotonic() < deadline, "the replay took too long"
            step()
            time.sleep(rng.uniform(0.0, 0.08))  # pieces arrive over ticks (not a race guard)
            if i in kill_after:
                time.sleep(rng.uniform(0.5, 2.5))  # a tick or two: after some appends
                assert daemon.poll() is None, log.read_text()[-3000:]
                daemon.send_signal(signal.SIGKILL)
                daemon.wait(10)
                # What the restart loads: the base and its journal's valid records (counted pilots).
                data = checkpoint.load(str(ck), str(live))
                base = json.loads(ck.read_bytes())
                assert data is not None
                size = journal.stat().st_size if journal.exists() else 0
                journals.append((size, len(base["seen"]), len(data["seen"])))
                if size and len(journals) % 2:  # as a kill mid-append leaves it: its last record cut short
                    os.truncate(journal, size - rng.randint(1, 12))
                    cuts += 1
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
    # Most kills found records appended since the base, and restarts took pilots counted from them.
    assert sum(size > 0 for size, _, _ in journals) >= KILLS // 2, journals
    assert any(journaled > base for _, base, journaled in journals), journals
    # Each cut record was ignored by the restart that loaded it, counted and logged (the equality above:
    # nothing lost or counted twice for it).
    assert cuts >= 1 and log.read_text().count("torn_journal") == cuts, (cuts, journals)
