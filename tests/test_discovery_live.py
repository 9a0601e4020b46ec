"""Event-driven discovery (ingest/watch.py) and settling by evidence, against the real daemon.

`gwms-obs export` runs as users start it, on a simulated factory some of whose
pilots are still arriving (their .err cut before its last line, so only their
age could settle them, and settle_seconds is an hour). While it runs, the
factory's files are rotated, rewritten in place, replaced, deleted and the
arriving pilots finish. In both discovery modes (inotify, and scanning forced
by ``discovery = "scan"``) /metrics ends with the numbers of `gwms-obs report`
on the final tree. A burst of events beyond the kernel's queue
(fs.inotify.max_queued_events, read, never changed) while the daemon is
stopped is counted as a fallback, and the numbers stay right. A pilot whose
files close is on /metrics within seconds, not settle_seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gwms_obs import catalogue
from gwms_obs.catalogue import Outcome
from gwms_obs.simulate.factory import simulate
from tests.support.arriving import cut_errs_of
from tests.support.servers import export_command, first_scan_done, free_port, process
from tests.test_live_numbers import Numbers, agree, gwms_obs, parse_csv, scrape
from tools.polling import http_get
from tools.polling import poll as wait_for

pytestmark = [pytest.mark.live]

SETTLE = 3600  # nothing settles by age during a test: only by evidence
# The simulated pilots ended months ago: with the default hour, the event log would count a pilot
# whose files arrive during the test as lost at the first scan. As in the factory, they end just
# before their files come back, so the daemon and the report wait for them.
LOST_AFTER = 10**9
N_PILOTS = 300


@dataclass
class NewPilot:
    """A pilot that ends during the test: its files and completed_jobs line, not in the tree yet."""

    out: Path
    out_bytes: bytes
    err_bytes: bytes
    log: Path | None  # the completed_jobs log its line goes to
    line: bytes

    def arrive(self) -> None:
        """As the factory: the .out and .err transferred back, then its completed_jobs line."""
        self.out.write_bytes(self.out_bytes)
        self.out.with_suffix(".err").write_bytes(self.err_bytes)
        if self.log is not None:
            with open(self.log, "ab") as f:
                f.write(self.line)


@dataclass
class Factory:
    root: Path
    arriving: dict[Path, bytes]  # .err cut short -> its whole bytes
    doomed: list[Path]  # .out files of arriving pilots the factory will delete
    new: list[NewPilot]


def factory(tmp: Path, seed: int) -> Factory:
    root = tmp / "factory"
    simulate(root, N_PILOTS, seed=seed)
    errs = sorted(root.glob("client/*/*/entry_*/job.*.err"))
    arriving = cut_errs_of(errs[::4], time.time())  # one pilot in four is still arriving
    assert len(arriving) > 30, len(arriving)
    doomed = [e.with_suffix(".out") for e in list(arriving)[::6]]
    new = [hold_back(root, e.with_suffix(".out")) for e in errs[1::4][:15]]
    return Factory(root, arriving, doomed, new)


def hold_back(root: Path, out: Path) -> NewPilot:
    """Take a pilot's files and its completed_jobs line out of the tree, to arrive later."""
    err = out.with_suffix(".err")
    p = NewPilot(out, out.read_bytes(), err.read_bytes(), None, b"")
    out.unlink()
    err.unlink()
    cluster, proc = out.name.split(".")[1:3]
    mine = re.compile(rb"id=\"(?:b')?" + cluster.encode() + rb"\.0*" + proc.encode() + rb"'?\"")
    entry = out.parent.name
    for log in sorted((root / "server" / entry).glob("completed_jobs_*.log")):
        lines = log.read_bytes().splitlines(keepends=True)
        keep = [x for x in lines if not mine.search(x)]
        if len(keep) < len(lines):
            p.log, p.line = log, b"".join(x for x in lines if mine.search(x))
            log.write_bytes(b"".join(keep))
    return p


@contextlib.contextmanager
def exporter(tmp: Path, root: Path, discovery: str, tick: float = 0.2) -> Iterator[tuple[str, int]]:
    """The daemon with its config file; yields its /metrics URL and pid once its first scan is done."""
    cfg = tmp / "exporter.toml"
    cfg.write_text(
        f'discovery = "{discovery}"\ntick_seconds = {tick}\nfull_scan_seconds = 3600\n'
        f"lost_after_seconds = {LOST_AFTER}\n"
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    cmd = [*export_command(root, port, tmp / "checkpoint.json", interval=1, settle=SETTLE), "--config", str(cfg)]
    log = tmp / "exporter.log"
    with process(cmd, log) as p:

        def scanned() -> bool:
            if p.poll() is not None:
                raise RuntimeError(f"the exporter exited with {p.returncode}:\n{log.read_text()[-3000:]}")
            return first_scan_done(http_get(url))

        wait_for("the first scan", scanned, 120)
        yield url, p.pid


def report(root: Path) -> Numbers:
    """`gwms-obs report` on the tree as it is: cells from its CSV, pilots per entry from its JSON."""
    args = ("report", "--factory-dir", str(root), "--lost-after-seconds", str(LOST_AFTER), "--format")
    n = parse_csv(gwms_obs(*args, "csv"))
    for row in json.loads(gwms_obs(*args, "json"))["pilots"]:
        n.pilots[row["entry"]] = n.pilots.get(row["entry"], 0) + sum(row[o.value] for o in Outcome)
    return n


def fallbacks(url: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(http_get(url).decode()):
        for s in fam.samples:
            if s.name == catalogue.DISCOVERY_FALLBACKS.name + "_total" or s.name == catalogue.DISCOVERY_FALLBACKS.name:
                out[s.labels["reason"]] = s.value
    return out


def equal_to(url: str, want: Numbers) -> Numbers | None:
    got = scrape(url)
    return got if not agree(got, want) else None


def churn(f: Factory) -> None:
    """What a factory and its host do to the files: rotate, rewrite, replace, delete, finish."""
    root = f.root
    for log in sorted(root.glob("server/entry_*/completed_jobs_*.log")):  # logrotate-style
        log.rename(log.with_name(log.name + ".1"))
        log.touch()
    events = sorted(root.glob("client/*/*/entry_*/condor_activity_*.log"))
    assert len(events) >= 3
    data = events[0].read_bytes()  # rewritten in place: same inode, truncated, written again
    with open(events[0], "r+b") as fh:
        fh.truncate(0)
        fh.write(data)
    tmp = events[1].with_name(".replace.tmp")  # replaced: a new inode renamed over it
    tmp.write_bytes(events[1].read_bytes())
    os.replace(tmp, events[1])
    events[2].rename(events[2].with_name(events[2].name + ".1"))  # rotated
    for out in f.doomed:  # deleted before they were whole: their line (or event log) counts them
        out.unlink()
        out.with_suffix(".err").unlink()
    for err, data in f.arriving.items():  # the others arrive whole
        if err.exists():
            err.write_bytes(data)
    for p in f.new:
        p.arrive()


@pytest.mark.parametrize("discovery", ["inotify", "scan"])
def test_metrics_equal_report_while_files_churn(tmp_path: Path, discovery: str) -> None:
    f = factory(tmp_path, seed=41)
    with exporter(tmp_path, f.root, discovery) as (url, _):
        before = sum(scrape(url).pilots.values())
        churn(f)
        want = report(f.root)
        assert sum(want.pilots.values()) > before, (before, want.pilots)  # the finished pilots count
        got = wait_for(f"/metrics ({discovery}) equal to the report", lambda: equal_to(url, want), 90, 0.25)
        fell = fallbacks(url)
    assert got.pilots == want.pilots
    if discovery == "inotify":
        assert fell == dict.fromkeys(fell, 0.0) and "queue_overflow" in fell, fell
    else:
        assert fell["configured"] == 1.0, fell


def test_a_burst_beyond_the_event_queue_is_counted_and_the_numbers_stay_right(tmp_path: Path) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    f = factory(tmp_path, seed=43)
    entry_dir = next(iter(f.arriving)).parent
    with exporter(tmp_path, f.root, "inotify") as (url, pid):
        os.kill(pid, signal.SIGSTOP)  # its reader paused: the kernel queues, then drops, the events
        try:
            for i in range(limit // 2 + 1000):  # IN_CREATE and IN_CLOSE_WRITE each: past the limit
                (entry_dir / f"burst.{i}").write_bytes(b"x")
            churn(f)
        finally:
            os.kill(pid, signal.SIGCONT)
        want = report(f.root)
        got = wait_for("/metrics equal to the report after the overflow", lambda: equal_to(url, want), 120, 0.25)

        # The health is handed to the serving process apart from the renders (outputs/serve.py, every few
        # seconds): the pilots a render shows can be on /metrics before the overflow's count.
        def counted() -> dict[str, float] | None:
            fell = fallbacks(url)
            return fell if fell["queue_overflow"] else None

        fell = wait_for("the overflow counted on /metrics", counted, 15)
    assert fell["queue_overflow"] >= 1, fell
    assert got.pilots == want.pilots


def test_a_pilot_is_on_metrics_seconds_after_its_files_close(tmp_path: Path) -> None:
    """New pilots (files absent at start) and pilots that were arriving, one by one."""
    f = factory(tmp_path, seed=47)
    finishing = [e for e in f.arriving if e.with_suffix(".out") not in f.doomed][:5]
    delays = []
    with exporter(tmp_path, f.root, "inotify", tick=1.0) as (url, _):  # the default tick
        n = sum(scrape(url).pilots.values())
        todo: list[NewPilot | Path] = [*f.new[:5], *finishing]
        for p in todo:
            if isinstance(p, NewPilot):
                p.arrive()
            else:
                p.write_bytes(f.arriving[p])  # closed: the last line is there
            closed = time.monotonic()
            n += 1

            def counted(want: int = n) -> bool:
                return sum(scrape(url).pilots.values()) == want

            wait_for("the pilot on /metrics", counted, 30, 0.05)
            delays.append(time.monotonic() - closed)
    assert max(delays) < 5.0, delays  # settle_seconds is an hour: only the evidence counted them
