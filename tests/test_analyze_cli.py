"""`gwms-obs analyze`, the real command in a subprocess, on simulated factories.

* the simulator's slow-script site (scenario.ANOMALY_ENTRIES: cvmfs_setup.sh 6× at
  OSG_US_SLOWCVMFS_ce) is the first action, named with its script;
* a factory without it has no action above the thresholds;
* Jaeger's spans (a stand-in serving the API's JSON) give the same answer as the spools;
* misuse: one clear line and exit 2 (usage) or 1 (Jaeger unreachable), as tests/test_cli_misuse.py.
"""

from __future__ import annotations

import csv
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import ANOMALY_ENTRIES, DEFAULT_ENTRIES, FACTORY
from tests.support.servers import free_port
from tests.test_analyze import to_jaeger
from tests.test_cli_misuse import argparse_error, gwms_obs, one_line

SLOW = next(e for e in ANOMALY_ENTRIES if e.slow_script)


@pytest.fixture(scope="module")
def anomalous(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("anomalous")
    simulate(out, 600, seed=7, entries=DEFAULT_ENTRIES + ANOMALY_ENTRIES)
    return out


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("clean")
    simulate(out, 600, seed=7, entries=DEFAULT_ENTRIES + tuple(e for e in ANOMALY_ENTRIES if not e.slow_script))
    return out


def analyze_json(factory: Path, *args: str) -> dict[str, Any]:
    r = gwms_obs("analyze", "--factory-dir", str(factory), "--format", "json", *args)
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def test_the_slow_script_at_the_slow_site_is_the_first_action(anomalous: Path, tmp_path: Path) -> None:
    doc = analyze_json(anomalous)
    first = doc["actions"][0]
    assert (first["entry"], first["site"], first["name"]) == (SLOW.name, SLOW.site, SLOW.slow_script)
    assert first["ratio"] >= 2 and first["robust_z"] >= 3.5 and first["excess_core_hours_per_week"] > 0
    assert first["text"].startswith(f"entry {SLOW.name}: {SLOW.slow_script} takes")
    # the table says the same first, and the plot is drawn
    png = tmp_path / "actions.png"
    r = gwms_obs("analyze", "--factory-dir", str(anomalous), "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert f"  1. entry {SLOW.name}: {SLOW.slow_script} takes" in r.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"
    # and the CSV ranks it 1
    r = gwms_obs("analyze", "--factory-dir", str(anomalous), "--format", "csv")
    rows = [row for row in csv.DictReader(io.StringIO(r.stdout)) if row["action_rank"] == "1"]
    assert [(row["entry"], row["name"]) for row in rows] == [(SLOW.name, SLOW.slow_script)]


def test_a_factory_without_the_slow_script_has_no_action(clean: Path, tmp_path: Path) -> None:
    doc = analyze_json(clean)
    assert doc["actions"] == [], [a["text"] for a in doc["actions"]]
    assert sum(doc["traced_pilots"].values()) > 100
    png = tmp_path / "none.png"
    r = gwms_obs("analyze", "--factory-dir", str(clean), "--plot", str(png))
    assert r.returncode == 0 and not png.exists()
    assert "not written: nothing to plot (no action" in r.stderr


class FakeJaeger(BaseHTTPRequestHandler):
    traces: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:
        body = json.dumps({"data": self.traces if self.path.startswith("/api/traces?") else []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def jaeger(anomalous: Path) -> Iterator[str]:
    """Jaeger's API answering with the spools of the anomalous tree, as the exporter forwarded them."""
    from gwms_obs.sources.glidein_err import read_err

    FakeJaeger.traces = [
        to_jaeger(err.trace_spool)
        for p in sorted(anomalous.glob("client/*/*/entry_*/job.*.err"))
        if (err := read_err(str(p), None, detail=False, root=str(anomalous))) is not None and err.trace_spool
    ]
    srv = ThreadingHTTPServer(("127.0.0.1", free_port()), FakeJaeger)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_jaeger_spans_give_the_same_actions_and_count_once(anomalous: Path, jaeger: str, tmp_path: Path) -> None:
    # An empty tree's accounting, every span from Jaeger: the same first action.
    empty = tmp_path / "factory"
    (empty / "client").mkdir(parents=True)
    (empty / "server").mkdir()
    # Jaeger's spans of this factory only: a tree without descript.xml does not name it, so the flag does
    window = ("--since", "2026-01-01", "--until", "2026-12-31")
    from_jaeger = analyze_json(empty, "--jaeger", jaeger, *window, "--factory-name", FACTORY)
    assert from_jaeger["jaeger_spans"] > 0 and from_jaeger["spools"] == 0
    assert analyze_json(empty, "--jaeger", jaeger, *window, "--factory-name", "another")["jaeger_spans"] == 0
    assert (from_jaeger["actions"][0]["entry"], from_jaeger["actions"][0]["name"]) == (SLOW.name, SLOW.slow_script)
    # Both: every span once, the distributions are the spools'.
    both = analyze_json(anomalous, "--jaeger", jaeger, "--since", "2026-01-01", "--until", "2026-12-31")
    alone = analyze_json(anomalous, "--since", "2026-01-01", "--until", "2026-12-31")
    assert both["jaeger_spans"] > 0
    assert both["distributions"] == alone["distributions"]
    assert both["actions"] == alone["actions"]


def test_misuse_is_one_line_and_exit_2(anomalous: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    one_line(gwms_obs("analyze", "--factory-dir", str(missing)), 2, "--factory-dir", str(missing))
    argparse_error(gwms_obs("analyze", "--factory-dir", str(anomalous), "--jaeger", "jaeger:16686"), "--jaeger")
    argparse_error(gwms_obs("analyze", "--factory-dir", str(anomalous), "--format", "xml"), "--format")
    argparse_error(gwms_obs("analyze"), "--factory-dir")
    r = gwms_obs("analyze", "--factory-dir", str(anomalous), "--since", "2026-02-01", "--until", "2026-01-01")
    one_line(r, 2, "--since", "is not before --until")


def test_jaeger_unreachable_is_one_line_and_exit_1(anomalous: Path) -> None:
    # At WARNING: the factory's holds, logged at INFO, are not the command's problem.
    r = gwms_obs(
        "--log-level",
        "WARNING",
        "analyze",
        "--factory-dir",
        str(anomalous),
        "--jaeger",
        f"http://127.0.0.1:{free_port()}",
    )
    one_line(r, 1, "cannot read Jaeger")
