"""``report --compare-glideinwms`` on a simulated factory: GlideinWMS's completed_jobs numbers
beside ours, and every difference shown carries a reason docs/accounting.md documents."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gwms_obs.outputs.compare_glideinwms import QUANTITIES, REASONS, RRD_COMPLETED, VOCABULARY, WHY, Comparison
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources import completed_jobs, layout
from tools.glideinwms_rrd_fixtures import ENTRY as RRD_ENTRY
from tools.glideinwms_rrd_fixtures import STEP, UPDATES, fed, update_time

DOC = Path(__file__).resolve().parent.parent / "docs" / "accounting.md"
RRD_FIXTURES = Path(__file__).resolve().parent / "fixtures" / "glideinwms_rrd"


def _section() -> str:
    text = DOC.read_text()
    start = text.index("## GlideinWMS's vocabulary")
    return text[start : text.index("\n## ", start + 1)]


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.mktemp("factory")
    simulate(tree, 300, seed=5)
    return tree


@pytest.fixture(scope="module")
def rows(factory: Path) -> list[dict[str, object]]:
    cmd = [sys.executable, "-m", "gwms_obs.cli", "report", "--factory-dir", str(factory)]
    out = subprocess.run([*cmd, "--compare-glideinwms", "--format", "json"], check=True, capture_output=True, text=True)
    doc = json.loads(out.stdout)
    assert doc["reasons"] == REASONS
    got: list[dict[str, object]] = doc["rows"]
    return got


def test_every_difference_carries_a_documented_reason(rows: list[dict[str, object]]) -> None:
    documented = set(re.findall(r"^\| `(\w+)` \|", _section(), re.M))
    assert documented == set(REASONS)  # the doc's table and the code's are one list
    differ = [r for r in rows if r["reasons"]]
    assert differ, "a simulated factory with nothing to explain tests nothing"
    for r in differ:
        reasons = r["reasons"]
        assert isinstance(reasons, list)
        assert "unexplained" not in reasons, r
        assert set(reasons) <= set(WHY[str(r["quantity"])]) <= documented, r
    for r in rows:
        if not r["reasons"]:  # agreeing within 1 %
            g, o = float(str(r["glideinwms"])), float(str(r["gwms_obs"]))
            assert abs(g - o) <= 0.01 * max(abs(g), abs(o), 1.0), r


def test_the_glideinwms_side_is_its_own_lines(factory: Path, rows: list[dict[str, object]]) -> None:
    """GlideinWMS's numbers are its lines' per-mille turned back into seconds on their own base."""
    errors = ParseErrors()
    want: dict[tuple[str, str], float] = {}
    for entry, path in layout.completed_logs(str(factory), errors):
        recs, _ = completed_jobs.scan_buffer(Path(path).read_bytes(), path, 0, errors, entry)
        for r in recs:
            j = completed_jobs.to_record(r, entry)
            assert not isinstance(j, str)
            if j.duration > 0:
                for q, v in (("validation", j.waste_validation * j.duration / 1000), ("goodput", j.goodput)):
                    want[(entry, q)] = want.get((entry, q), 0.0) + v
    got = {(str(r["entry"]), str(r["quantity"])): float(str(r["glideinwms"])) for r in rows}
    # Over the glideins both count: at most what the lines say, and all of it where no pilot is ours only.
    for (entry, q), v in want.items():
        assert got[(entry, q)] <= v + 1e-6
    pilots = {str(r["entry"]): r for r in rows if r["quantity"] == "pilots"}
    whole = [e for e, r in pilots.items() if "window" not in (r["reasons"] or [])]
    assert whole
    for e in whole:
        assert got[(e, "validation")] == pytest.approx(want[(e, "validation")])
        assert got[(e, "goodput")] == pytest.approx(want[(e, "goodput")])


def test_every_quantity_maps_to_our_categories_and_is_in_the_doc() -> None:
    section = _section()
    assert set(QUANTITIES[1:]) == set(VOCABULARY) == set(WHY) - {"pilots"}
    for word, cats in VOCABULARY.items():
        row = next(line for line in section.splitlines() if line.startswith(f"| {word} |"))
        if len(cats) < 4:
            assert all(f"`{c.value}`" in row for c in cats), word


def test_the_comparison_refuses_what_it_cannot_draw(factory: Path) -> None:
    cmd = [sys.executable, "-m", "gwms_obs.cli", "report", "--factory-dir", str(factory), "--compare-glideinwms"]
    r = subprocess.run([*cmd, "--format", "csv"], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "--compare-glideinwms" in r.stderr


@pytest.mark.skipif(shutil.which("rrdtool") is None, reason="Debian rrdtool not installed")
def test_the_log_completed_rrd_sums_are_what_glideinwms_was_fed() -> None:
    """Log_Completed.rrd written by GlideinWMS's own writer (tools/glideinwms_rrd_fixtures.py): the
    window's sum is what its cycles fed, from 5-minute rows and, further back, from hourly ones."""
    fine_from = update_time(UPDATES - 1) - 739 * STEP  # the oldest 5-minute row (740 rows)
    hour = 12 * STEP
    for since, until in (
        (update_time(UPDATES - 300), update_time(UPDATES - 100)),  # 5-minute rows
        ((update_time(10) // hour + 1) * hour, (update_time(10) // hour + 25) * hour),  # a day of hourly rows
    ):
        assert until <= update_time(UPDATES - 1) and (since >= fine_from or until <= fine_from)
        cmp = Comparison(since=since, until=until)
        errors = ParseErrors()
        cmp.add_rrd_tree(RRD_FIXTURES, errors)
        assert errors.total() == 0
        for ds, q in RRD_COMPLETED.items():
            want = sum(fed(k, ds) for k in range(1, UPDATES) if since < update_time(k) <= until)
            assert cmp.rrd_sums[RRD_ENTRY][q] == pytest.approx(want, rel=1e-9), (ds, since)
