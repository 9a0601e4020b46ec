"""The exporter daemon and the one-shot report give the same numbers, as real processes.

A pilot whose .out is in the directory listing is accounted from its .out
(+ .err) once its files have settled, whether they were young or old when the
daemon first saw them; its completed_jobs line and event-log end wait for it.
So a daemon started on a factory of young files, which then sees them age,
ends with the totals of `gwms-obs report` on the final tree: per entry ×
category × resource within 0.5 %, and the same pilots per entry.

Numbers are compared per (entry, category, resource), summed over client,
site and accuracy (the report's CSV has no site or accuracy).
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gwms_obs import catalogue
from gwms_obs.catalogue import Outcome, Resource
from gwms_obs.config import ExportConfig
from gwms_obs.outputs.report import CSV_HEADER
from gwms_obs.simulate.factory import simulate
from tests.support.servers import export_command, free_port, have, process, prom_query, prometheus
from tests.test_scan_property import Cell, cell_mismatches
from tools.polling import http_get
from tools.polling import poll as wait_for

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not have("prometheus"), reason="Debian prometheus not installed"),
]

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Numbers:
    cells: dict[Cell, float] = field(default_factory=dict)  # (entry, category, resource) -> unit-seconds
    pilots: dict[str, int] = field(default_factory=dict)  # entry -> pilots
    last_scan: float | None = None

    def add(self, cell: Cell, v: float) -> None:
        if v:
            self.cells[cell] = self.cells.get(cell, 0.0) + v

    def by_entry(self, resource: Resource) -> dict[str, float]:
        out: dict[str, float] = {}
        for (e, _cat, r), v in self.cells.items():
            if r == resource.value:
                out[e] = out.get(e, 0.0) + v
        return out


def scrape(url: str) -> Numbers:
    """The daemon's /metrics, summed over client, site and accuracy."""
    n = Numbers()
    scanned = False
    for fam in text_string_to_metric_families(http_get(url).decode()):
        for s in fam.samples:
            if s.name == catalogue.CPU_SECONDS.name:
                n.add((s.labels["entry"], s.labels["category"], Resource.CPU.value), s.value)
            elif s.name == catalogue.GPU_SECONDS.name:
                n.add((s.labels["entry"], s.labels["category"], Resource.GPU.value), s.value)
            elif s.name == catalogue.PILOTS.name:
                n.pilots[s.labels["entry"]] = n.pilots.get(s.labels["entry"], 0) + int(s.value)
            elif s.name == catalogue.LAST_SCAN.name:
                n.last_scan = s.value
            elif s.name == catalogue.SCAN_DURATION.name:
                scanned = True
    # Before the first scan ends the timestamp is the exporter's start (for the stalled alert).
    if not scanned:
        n.last_scan = None
    return n


def parse_csv(text: str) -> Numbers:
    """The report's CSV (entry,client,category,resource,seconds), summed over client."""
    n = Numbers()
    rows = list(csv.reader(io.StringIO(text)))
    assert rows and tuple(rows[0]) == CSV_HEADER, rows[:1]
    for entry, _client, category, resource, seconds in rows[1:]:
        n.add((entry, category, resource), float(seconds))
    return n


def gwms_obs(*args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "gwms_obs.cli", *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def report(factory: Path) -> Numbers:
    """`gwms-obs report` as a subprocess: cells from its CSV, pilots per entry from its JSON."""
    n = parse_csv(gwms_obs("report", "--factory-dir", str(factory), "--format", "csv"))
    doc = json.loads(gwms_obs("report", "--factory-dir", str(factory), "--format", "json"))
    for row in doc["pilots"]:
        n.pilots[row["entry"]] = n.pilots.get(row["entry"], 0) + sum(row[o.value] for o in Outcome)
    return n


def age(root: Path, seconds: float) -> None:
    """Every file under root last written ``seconds`` ago: the factory's files have settled."""
    t = time.time() - seconds
    for dirpath, _, names in os.walk(root):
        for name in names:
            os.utime(os.path.join(dirpath, name), (t, t))


def agree(got: Numbers, want: Numbers) -> list[str]:
    bad = [f"pilots per entry: daemon {got.pilots}, report {want.pilots}"] if got.pilots != want.pilots else []
    return bad + cell_mismatches(got.cells, want.cells)


def test_daemon_on_young_files_equals_report(tmp_path: Path) -> None:
    factory = tmp_path / "factory"
    simulate(factory, 400, seed=33)  # every file just written: young
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    log = tmp_path / "exporter.log"
    # settle 3600: nothing settles by the clock during the test, only by the aging below
    cmd = export_command(factory, port, tmp_path / "checkpoint.json", interval=1, settle=3600)
    with process(cmd, log) as daemon:

        def alive() -> None:
            if daemon.poll() is not None:
                raise RuntimeError(f"the exporter exited with {daemon.returncode}:\n{log.read_text()[-3000:]}")

        def scanned() -> float | None:
            alive()
            return scrape(url).last_scan

        wait_for("the first scan", scanned, 120)
        age(factory, 2 * 3600)  # the factory's files settle
        want = report(factory)  # on the final tree
        assert sum(want.pilots.values()) > 300, want.pilots
        last = wait_for("a scan", scanned, 30)  # may have seen the tree half aged
        scans = 0

        def caught_up() -> Numbers | None:
            nonlocal last, scans
            alive()
            n = scrape(url)
            if n.last_scan is not None and n.last_scan > last:
                scans, last = scans + 1, n.last_scan
            return n if scans >= 2 and sum(n.pilots.values()) >= sum(want.pilots.values()) else None

        got = wait_for("two scans after the aging, with all of the report's pilots", caught_up, 120, 0.2)

        # The same numbers through a real Prometheus scraping the daemon.
        cfg = f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: gwms-obs
    static_configs: [{{targets: ["127.0.0.1:{port}"]}}]
"""
        daemon_cpu = scrape(url).by_entry(Resource.CPU)

        def prom_cpu_by_entry(prom: str) -> dict[str, float] | None:
            res = prom_query(prom, f"sum by (entry) ({catalogue.CPU_SECONDS.name})")
            d = {r["metric"]["entry"]: float(r["value"][1]) for r in res}
            return d if d == pytest.approx(daemon_cpu, rel=1e-9) else None

        with prometheus(tmp_path / "prom", cfg) as prom:
            wait_for("the daemon's CPU seconds per entry in Prometheus", lambda: prom_cpu_by_entry(prom), 60, 0.25)
    bad = agree(got, want)
    assert not bad, "daemon (/metrics) vs report, per (entry, category, resource):\n" + "\n".join(bad)
    assert daemon_cpu == pytest.approx(want.by_entry(Resource.CPU), rel=0.005)  # what Prometheus holds


def csv_block(stdout: str) -> str | None:
    """The report's CSV inside make's stdout (command echoes and the simulator's summary around it)."""
    lines = stdout.splitlines()
    header = ",".join(CSV_HEADER)
    if header not in lines:
        return None
    block = [header]
    for line in lines[lines.index(header) + 1 :]:
        if len(line.split(",")) != len(CSV_HEADER):
            break
        block.append(line)
    return "\n".join(block) + "\n"


def test_make_run_table_and_metrics_agree(tmp_path: Path) -> None:
    """`make run`'s two steps (report, then export) as the Makefile runs them, on a sample of 300 pilots."""
    if not have("make"):
        pytest.skip("make not installed")
    bindir = Path(sys.executable).parent  # the venv running the tests: make uses it and never builds one
    if not (bindir / "gwms-obs").exists():
        pytest.skip(f"{bindir} has no gwms-obs (tests not run from the project's venv)")
    sample = tmp_path / "sample"
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    interval = 2.0
    settle = ExportConfig().ingest.settle_seconds  # make run passes none: the exporter's default
    cmd = [
        "make",
        "-C",
        str(REPO),
        "-o",
        f"{bindir}/.stamp",  # never (re)build the venv from a test
        "run",
        f"BIN={bindir}",
        f"SAMPLE={sample}",
        "SAMPLE_PILOTS=300",
        f"LISTEN=127.0.0.1:{port}",
        "RUN_FORMAT=csv",
        # a short interval keeps the test short; a checkpoint of its own, not build/sample-checkpoint.json
        f"RUN_ARGS=--interval {interval:g} --checkpoint {tmp_path / 'checkpoint.json'}",
    ]
    out, err = tmp_path / "make-run.stdout", tmp_path / "make-run.stderr"
    with open(out, "wb") as fo, open(err, "wb") as fe:
        make = subprocess.Popen(cmd, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL, start_new_session=True)
    try:

        def alive() -> None:
            if make.poll() is not None:
                raise RuntimeError(f"make run exited with {make.returncode}:\n{err.read_text()[-3000:]}")

        def serving() -> str | None:
            alive()
            text = out.read_text()
            return csv_block(text) if "serving http://" in text else None  # echoed after the report

        want = parse_csv(wait_for("make run's report", serving, 300, 0.2))
        assert want.cells, out.read_text()[-3000:]
        newest = max(p.stat().st_mtime for p in sample.rglob("*") if p.is_file())

        def scan_after(t: float) -> float | None:
            alive()
            n = scrape(url).last_scan
            return n if n is not None and n > t else None

        # A scan that ended after every file settled, then one more: that one started after.
        first = wait_for("a scan after the sample settled", lambda: scan_after(newest + settle), 120 + settle, 0.2)
        wait_for("one more scan", lambda: scan_after(first), 60, 0.2)
        got = scrape(url)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGTERM)
            try:
                make.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(make.pid, signal.SIGKILL)
                make.wait(5)
    bad = cell_mismatches(got.cells, want.cells)
    assert not bad, "make run: export (/metrics) vs report (CSV), per (entry, category, resource):\n" + "\n".join(bad)
