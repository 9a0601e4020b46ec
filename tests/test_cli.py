"""The gwms-obs command as an operator runs it: report, inspect, check-config."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from tests.support.reference import reference_file


def gwms_obs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gwms_obs.cli", *args], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("factory")
    simulate(out, 300, seed=3)
    return out


def test_report_csv_is_tidy_and_matches_the_ledger(factory: Path) -> None:
    r = gwms_obs("report", "--factory-dir", str(factory), "--format", "csv")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "entry,client,category,resource,seconds"
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    assert rows and all(float(x["seconds"]) > 0 for x in rows)
    assert {x["resource"] for x in rows} == {"cpu", "gpu"}
    assert len({(x["entry"], x["client"], x["category"], x["resource"]) for x in rows}) == len(rows)
    ing = Ingest(IngestConfig(factory_dir=str(factory), settle_seconds=0.0))
    ing.scan()
    cpu = sum(float(x["seconds"]) for x in rows if x["resource"] == "cpu")
    assert cpu == pytest.approx(sum(ing.ledger.cpu.values()), rel=1e-6)


def test_report_since_until_table_json_and_plot(factory: Path, tmp_path: Path) -> None:
    full = json.loads(gwms_obs("report", "--factory-dir", str(factory), "--format", "json").stdout)
    n_all = sum(sum(v for k, v in p.items() if k not in ("entry", "client", "site")) for p in full["pilots"])
    assert n_all > 0
    # The simulated pilots end within two days of the fixed start: half a window holds fewer.
    half = json.loads(
        gwms_obs("report", "--factory-dir", str(factory), "--format", "json", "--until", "2026-06-10T12:00").stdout
    )
    n_half = sum(sum(v for k, v in p.items() if k not in ("entry", "client", "site")) for p in half["pilots"])
    assert 0 < n_half < n_all
    none = gwms_obs("report", "--factory-dir", str(factory), "--since", "2030-01-01")
    assert "no pilots in range" in none.stdout
    png = tmp_path / "acc.png"
    table = gwms_obs("report", "--factory-dir", str(factory), "--plot", str(png))
    assert table.returncode == 0, table.stderr
    assert "canonical CPU hours" in table.stdout and "TOTAL" in table.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_inspect_real_production_stdout() -> None:
    r = gwms_obs("inspect", str(reference_file("glideFactoryLogParser_glidein_stdout.out")))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    # What GlideinWMS's own unit test expects of this file.
    assert doc["condor_started"] is True
    assert doc["validation_duration"] == 63
    assert doc["glidein_duration"] == 8376
    assert doc["condor_duration"] == 8307
    assert doc["activations_claims"] == 34
    assert doc["stats"] == {}
    assert doc["cpus"] == 8
    assert doc["memory_mb"] == 20000
    assert doc["entry"] == "CMSHTPC_T2_AT_Vienna_ce-1"
    # Empty Stats block, 34 claims: HTCondor's time is unknown, the rest overhead; 8 cores x 8376 s in all.
    assert doc["accuracy"] == "none"
    assert sum(doc["cpu_seconds"].values()) == pytest.approx(8 * 8376)
    assert doc["cpu_seconds"]["unknown"] == pytest.approx(8 * 8307)


def test_inspect_simulated_pilot_lists_jobs(factory: Path) -> None:
    out = next(iter(sorted(factory.glob("client/*/*/entry_*Nebraska*/job.*.out"))))
    doc = json.loads(gwms_obs("inspect", str(out)).stdout)
    for k in (
        "entry",
        "client",
        "glidein_duration",
        "validation_duration",
        "condor_started",
        "condor_duration",
        "activations_claims",
        "cpus",
        "memory_mb",
        "gpus",
        "jobs",
        "cpu_seconds",
    ):
        assert k in doc
    if doc["condor_started"] and doc["jobs"]:
        assert doc["accuracy"] == "exact"
        assert sum(doc["cpu_seconds"].values()) == pytest.approx(doc["cpus"] * (doc["end"] - doc["start"]))


def test_check_config(tmp_path: Path, factory: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text(
        f'factory_dir = "{factory}"\nlisten = "127.0.0.1:9822"\ninterval = 30\n'
        f'checkpoint = "{tmp_path}/ck.json"\n[rules]\ngrace_seconds = 90\n'
    )
    r = gwms_obs("check-config", str(good))
    assert r.returncode == 0 and "SUCCESS" in r.stdout
    for text, msg in (
        ("factory_dir = 3\n", "must be a string"),
        ('factroy_dir = "/x"\n', "unknown key"),
        ('factory_dir = "/nonexistent"\n', "does not exist"),
        (f'factory_dir = "{factory}"\nlisten = "nohost"\n', "HOST:PORT"),
        (f'factory_dir = "{factory}"\n[rules]\ngrace = 1\n', "unknown rules"),
        ("factory_dir = [", "Invalid value"),
    ):
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        r = gwms_obs("check-config", str(bad))
        assert r.returncode == 1, text
        assert msg in r.stderr, (text, r.stderr)


def test_simulate_a_fleet_of_entries(tmp_path: Path) -> None:
    """`simulate --entries N`: N entries, five to a site, as the 500-entry dashboard test uses."""
    out = tmp_path / "fleet"
    r = gwms_obs("simulate", "--out", str(out), "--pilots", "60", "--entries", "30", "--seed", "2")
    assert r.returncode == 0, r.stderr
    assert "60 pilots on 30 entries" in r.stdout and "30 entries on 6 sites" in r.stdout
    entries = {p.name for p in out.glob("client/*/*/entry_*")}
    assert len(entries) == 30, entries
