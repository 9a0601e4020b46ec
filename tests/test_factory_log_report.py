"""`gwms-obs report`'s factory-log numbers per entry: the window's, and without one what the daemon serves.

The report counts each record of the factory's entry logs (sources/factory_log.py) by the time the
factory logged it, in [--since, --until); the daemon's /metrics counts every record. Real
processes: the exporter daemon on 127.0.0.1 and the report command, on one simulated factory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from gwms_obs import catalogue
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.outputs.report import Report
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import DEFAULT_ENTRIES, simulate
from gwms_obs.simulate.scenario import OPERATOR_ENTRIES
from gwms_obs.sources import factory_log as fl
from tests.support.servers import export_command, first_scan_done, free_port, process
from tools.polling import http_get
from tools.polling import poll as wait_for

ENTRIES = (DEFAULT_ENTRIES[0], DEFAULT_ENTRIES[1], next(e for e in OPERATOR_ENTRIES if e.submit_fail))


def _factory(root: Path) -> Path:
    simulate(root, 600, seed=21, entries=ENTRIES)
    return root


def _metrics(url: str) -> dict[str, Any]:
    """The daemon's factory-log families per entry, shaped as the report's rows."""
    out: dict[str, Any] = {}
    for fam in text_string_to_metric_families(http_get(url).decode()):
        for s in fam.samples:
            if s.name not in (
                catalogue.GLIDEINS_SUBMITTED.name,
                catalogue.SUBMIT_FAILURES.name,
                catalogue.GLIDEINS_REMOVED.name,
            ):
                continue
            row = out.setdefault(
                s.labels["entry"],
                {"entry": s.labels["entry"], "site": s.labels["site"], "submitted": 0, "submitted_by_client": {},
                 "submit_failures": 0, "removed": {}},
            )  # fmt: skip
            n = int(s.value)
            if s.name == catalogue.GLIDEINS_SUBMITTED.name:
                row["submitted"] += n
                row["submitted_by_client"][s.labels["client"]] = n
            elif s.name == catalogue.SUBMIT_FAILURES.name:
                row["submit_failures"] += n
            elif n:
                row["removed"][s.labels["reason"]] = n
    return out


def _report(factory: Path, *args: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "gwms_obs.cli", "report", "--factory-dir", str(factory), "--format", "json", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    return {r["entry"]: r for r in json.loads(done.stdout)["factory_log"]}


def test_the_report_without_a_window_equals_the_daemons_metrics(tmp_path: Path) -> None:
    factory = _factory(tmp_path / "factory")
    want = _report(factory)
    assert {e.name for e in ENTRIES} == set(want)
    assert sum(r["submit_failures"] for r in want.values()) > 0
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    cmd = export_command(factory, port, tmp_path / "checkpoint.json", interval=1, settle=0)
    with process(cmd, tmp_path / "exporter.log"):
        wait_for("the first scan", lambda: first_scan_done(http_get(url)), 120)
        got = _metrics(url)
    for row in want.values():  # the report leaves out what is zero; the counters are served from their first
        row["submitted_by_client"] = {c: n for c, n in row["submitted_by_client"].items() if n}
    for row in got.values():
        row["submitted_by_client"] = {c: n for c, n in row["submitted_by_client"].items() if n}
    assert got == want


def test_the_window_counts_the_records_the_factory_logged_in_it(tmp_path: Path) -> None:
    factory = _factory(tmp_path / "factory")
    logs = sorted((factory / "server").glob("entry_*/*.*.log"))
    times = sorted(r.t for p in logs for r in fl.scan_buffer(p.read_bytes(), str(p), 0, ParseErrors())[0])
    since, until = times[len(times) // 3], times[2 * len(times) // 3]
    rep = Report(since=since, until=until)
    Ingest(IngestConfig(factory_dir=str(factory)), outlets=Outlets(factory_log=rep.add_factory_log)).scan()
    got = {r["entry"]: r for r in rep.factory_log_rows()}
    want: dict[str, Counter[str]] = {}
    for p in logs:
        entry = p.parent.name.removeprefix("entry_")
        for r in fl.scan_buffer(p.read_bytes(), str(p), 0, ParseErrors())[0]:
            if since <= r.t < until and r.kind is not fl.Kind.CLIENT:
                key = r.reason.value if r.reason is not None else r.kind.value
                want.setdefault(entry, Counter())[key] += r.n
    assert {e: r["submitted"] for e, r in got.items() if r["submitted"]} == {
        e: c["submitted"] for e, c in want.items() if c["submitted"]
    }
    assert {e: r["submit_failures"] for e, r in got.items() if r["submit_failures"]} == {
        e: c["submit_failed"] for e, c in want.items() if c["submit_failed"]
    }
    assert {e: r["removed"] for e, r in got.items() if r["removed"]} == {
        e: {k: v for k, v in sorted(c.items()) if k not in ("submitted", "submit_failed")}
        for e, c in want.items()
        if any(k not in ("submitted", "submit_failed") for k in c)
    }
    # and the same command line gives the same rows
    cli = _report(factory, "--since", str(since), "--until", str(until))
    assert cli == got
