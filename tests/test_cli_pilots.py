"""The CLI's paths from a number to its pilots, through the real `gwms-obs` (subprocess).

``inspect PATH`` prints the pilot's trace id with its Jaeger and pilot-page
links; ``report --pilots ENTRY:CATEGORY`` lists the pilots behind one cell of
the report's table with their seconds, outcome and trace id. Their seconds
add up to the cell, their trace ids are inspect's, and (live) they are the
traces the exporter sent to Jaeger. Wrong flags are a clear error, exit 2.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing import conventions as C
from tests.support.pilot_pages import SEED, populated

FAIL_ENTRY = "OSG_US_FAIL_VALIDATION_ce1"
CATEGORY = "validation_failed"


def gwms_obs(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gwms_obs.cli", *args], capture_output=True, text=True,
                          timeout=300, check=False, env=env)  # fmt: skip


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cli-pilots") / "factory"
    now = time.time()
    simulate(out, 40, seed=SEED, start=now - 4 * 86400, span_hours=24)
    return out


def _outs(factory: Path, entry: str) -> dict[str, Path]:
    """cluster.proc -> the pilot's .out, of one entry."""
    return {".".join(p.name.split(".")[1:3]): p for p in factory.glob(f"client/*/*/entry_{entry}/job.*.out")}


def _inspect(path: Path, *extra: str) -> dict[str, Any]:
    r = gwms_obs("inspect", str(path), *extra)
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(r.stdout)
    return doc


def test_report_lists_a_cells_pilots_whose_seconds_make_the_cell(factory: Path) -> None:
    r = gwms_obs("report", "--factory-dir", str(factory), "--pilots", f"{FAIL_ENTRY}:{CATEGORY}", "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["entry"], doc["category"], doc["factory_name"]) == (FAIL_ENTRY, CATEGORY, "OSG")
    pilots = doc["pilots"]
    assert pilots and all(p["cpu_seconds"] > 0 for p in pilots)
    assert [p["cpu_seconds"] for p in pilots] == sorted((p["cpu_seconds"] for p in pilots), reverse=True)
    # the cell of the report's own table (its CSV: seconds per entry, client, category, resource)
    r = gwms_obs("report", "--factory-dir", str(factory), "--format", "csv")
    cells: dict[tuple[str, str, str], float] = defaultdict(float)
    for row in csv.DictReader(io.StringIO(r.stdout)):
        cells[(row["entry"], row["category"], row["resource"])] += float(row["seconds"])
    assert sum(p["cpu_seconds"] for p in pilots) == pytest.approx(cells[(FAIL_ENTRY, CATEGORY, "cpu")], abs=0.01)
    # each listed pilot's trace id is the one inspect prints for its .out
    outs = _outs(factory, FAIL_ENTRY)
    for p in pilots[:3]:
        shown = _inspect(outs[p["pilot"]])
        assert shown["trace_id"] == p["trace_id"] and len(p["trace_id"]) == 32
    # the table and the csv say the same
    r = gwms_obs("report", "--factory-dir", str(factory), "--pilots", f"{FAIL_ENTRY}:{CATEGORY}", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert [(x["pilot"], x["trace_id"]) for x in rows] == [(p["pilot"], p["trace_id"]) for p in pilots]
    r = gwms_obs("report", "--factory-dir", str(factory), "--pilots", f"{FAIL_ENTRY}:{CATEGORY}")
    assert r.stdout.startswith(f"{len(pilots)} pilots of {FAIL_ENTRY} with {CATEGORY} time")
    assert all(p["trace_id"] in r.stdout for p in pilots)
    # a cell with no time: said so, not an error
    r = gwms_obs("report", "--factory-dir", str(factory), "--pilots", "no_such_entry:goodput")
    assert r.returncode == 0 and r.stdout == "no pilot of no_such_entry in range has goodput time\n"
    # --factory-name is the name in the ids, as export's factory_name
    r = gwms_obs("report", "--factory-dir", str(factory), "--pilots", f"{FAIL_ENTRY}:{CATEGORY}", "--format", "json",
                 "--factory-name", "gfactory-2")  # fmt: skip
    other = json.loads(r.stdout)["pilots"]
    assert {p["pilot"] for p in other} == {p["pilot"] for p in pilots}
    assert not {p["trace_id"] for p in other} & {p["trace_id"] for p in pilots}


def test_inspect_prints_the_links_with_the_configured_urls(factory: Path, tmp_path: Path) -> None:
    path = next(iter(_outs(factory, FAIL_ENTRY).values()))
    doc = _inspect(path)
    tid = doc["trace_id"]
    assert doc["factory_name"] == "OSG"
    assert doc["jaeger_link"] == f"http://127.0.0.1:16686/trace/{tid}" and "pilot_page" not in doc
    env = {"PATH": "/usr/bin:/bin", "GWMS_OBS_JAEGER_URL": "https://jaeger.example.org/",
           "GWMS_OBS_CONTROLLER_URL": "https://ctl.example.org"}  # fmt: skip
    r = gwms_obs("inspect", str(path), env=env)
    doc = json.loads(r.stdout)
    assert doc["jaeger_link"] == f"https://jaeger.example.org/trace/{tid}"
    assert doc["pilot_page"] == f"https://ctl.example.org/pilots/{tid}"
    # the exporter's configuration names the factory as export would
    cfg = tmp_path / "exporter.toml"
    cfg.write_text('factory_name = "gfactory-2"\n')
    other = _inspect(path, "--config", str(cfg))
    assert other["factory_name"] == "gfactory-2" and other["trace_id"] != tid
    assert _inspect(path, "--factory-name", "gfactory-2")["trace_id"] == other["trace_id"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("report", "--pilots", "nocolon"), "expected ENTRY:CATEGORY"),
        (("report", "--pilots", f"{FAIL_ENTRY}:bogus"), "category 'bogus': one of validation_failed"),
        (("report", "--pilots", ":goodput"), "expected ENTRY:CATEGORY"),
        (("report", "--pilots", f"{FAIL_ENTRY}:goodput", "--format", "openmetrics"), "--pilots lists the pilots"),
        (("report", "--pilots", f"{FAIL_ENTRY}:goodput", "--plot", "x.png"), "--pilots lists the pilots"),
        (("inspect", "PATH", "--jaeger-url", "ftp://x"), "expected an http(s) URL"),
        (("inspect", "PATH", "--controller-url", "127.0.0.1:9830"), "expected an http(s) URL"),
        (("inspect", "PATH", "--config", "CONFIG"), "unknown key"),
    ],
)
def test_wrong_flags_are_a_clear_error(factory: Path, tmp_path: Path, args: tuple[str, ...], says: str) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("no_such_key = 1\n")
    path = str(next(iter(_outs(factory, FAIL_ENTRY).values())))
    argv = [{"PATH": path, "CONFIG": str(cfg)}.get(x, x) for x in args]
    if argv[0] == "report":
        argv[1:1] = ["--factory-dir", str(factory)]
    r = gwms_obs(*argv)
    assert r.returncode == 2, r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


@pytest.mark.live
def test_the_ids_printed_are_the_traces_the_exporter_sent(tmp_path: Path) -> None:
    """inspect's and report --pilots' trace ids are the exporter's: Jaeger holds each, for that pilot."""
    with populated(tmp_path) as jg:
        by_id = {t["traceID"]: jg.resource(t) for t in jg.traces}
        r = gwms_obs("report", "--factory-dir", str(jg.factory), "--pilots", f"{FAIL_ENTRY}:{CATEGORY}",
                     "--format", "json")  # fmt: skip
        pilots = json.loads(r.stdout)["pilots"]
        assert pilots
        for p in pilots:
            res = by_id[p["trace_id"]]
            assert (res[C.ENTRY], f"{res[C.CONDOR_CLUSTER]}.{res[C.CONDOR_PROC]}") == (FAIL_ENTRY, p["pilot"])
        outs = _outs(jg.factory, FAIL_ENTRY)
        seen = {
            f"{r[C.CONDOR_CLUSTER]}.{r[C.CONDOR_PROC]}": tid for tid, r in by_id.items() if r[C.ENTRY] == FAIL_ENTRY
        }
        assert seen
        for job, tid in seen.items():
            assert _inspect(outs[job])["trace_id"] == tid
