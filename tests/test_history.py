"""`gwms-obs report --format openmetrics`: the exporter's counters over time, for promtool's backfill."""

from __future__ import annotations

import itertools
import re
import shutil
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from gwms_obs import catalogue
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.outputs.history import History
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from tests.support import thanos_stack as T

STEP = 900.0


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("factory")
    simulate(out, 150, seed=5)
    return out


@pytest.fixture(scope="module")
def text(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("history") / "h.om"
    cmd = [sys.executable, "-m", "gwms_obs.cli", "report", "--factory-dir", str(tree), "--format", "openmetrics"]
    subprocess.run([*cmd, "--step", f"{STEP:g}", "-o", str(out)], check=True, timeout=300)
    return out.read_text()


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], list[tuple[float, float]]]:
    """Each series' (timestamp, value) in file order. (prometheus_client's OpenMetrics parser refuses
    a histogram with several timestamps, which the format and promtool allow: so by line here.)"""
    out: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = defaultdict(list)
    for line in text.splitlines():
        if line.startswith(name + "{"):
            head, value, ts = line.rsplit(" ", 2)
            labels = tuple(sorted(LABEL.findall(head[len(name) :])))
            out[labels].append((float(ts), float(value)))
    return out


LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def test_the_last_sample_is_what_the_exporter_serves(tree: Path, text: str) -> None:
    ing = Ingest(IngestConfig(factory_dir=str(tree), settle_seconds=0.0))
    ing.scan()
    led = ing.ledger
    cpu = samples(text, catalogue.CPU_SECONDS.name)
    last = {
        dict(k)["category"] + "/" + dict(k)["entry"] + "/" + dict(k)["client"] + "/" + dict(k)["accuracy"]: v[-1][1]
        for k, v in cpu.items()
    }
    want = {f"{k[3]}/{k[0]}/{k[1]}/{k[4]}": v for k, v in led.cpu.items()}
    assert last == pytest.approx(want, rel=1e-12)
    pilots = samples(text, catalogue.PILOTS.name)
    assert sum(v[-1][1] for v in pilots.values()) == sum(led.pilots.values())
    lifetime = samples(text, catalogue.PILOT_LIFETIME.name + "_count")
    assert sum(v[-1][1] for v in lifetime.values()) == sum(h.count for h in led.lifetime.values())


def test_each_series_is_a_counter_sampled_every_step(text: str) -> None:
    assert text.endswith("# EOF\n")
    for series in samples(text, catalogue.CPU_SECONDS.name).values():
        times = [t for t, _ in series]
        assert all(b - a == STEP for a, b in itertools.pairwise(times))
        assert all(t % STEP == 0 for t in times)
        values = [v for _, v in series]
        assert values == sorted(values), "a counter never goes down"
    # the history grows: its first instant counts fewer pilots than its last
    pilots = samples(text, catalogue.PILOTS.name)
    first = min(t for s in pilots.values() for t, _ in s)
    at_first = sum(v for s in pilots.values() for t, v in s if t == first)
    assert 0 < at_first < sum(s[-1][1] for s in pilots.values())


@pytest.mark.skipif(shutil.which("promtool") is None, reason="Debian prometheus not installed")
def test_promtool_backfills_it(text: str, tmp_path: Path) -> None:
    (tmp_path / "h.om").write_text(text)
    T.backfill(tmp_path / "h.om", tmp_path / "data", timeout=300)
    assert list((tmp_path / "data").glob("*/meta.json"))


def test_a_window_and_a_bad_step(tree: Path) -> None:
    whole, window = History(step=STEP), History(step=STEP)
    ing = Ingest(IngestConfig(factory_dir=str(tree), settle_seconds=0.0), outlets=Outlets(accounts=whole.add))
    ing.scan()
    ends = sorted(a.end for a in whole.accounts)
    window.since, window.until = ends[len(ends) // 4], ends[3 * len(ends) // 4]
    for a in whole.accounts:
        window.add(a)
    assert window.accounts and all(window.since <= a.end < window.until for a in window.accounts)
    assert len(window.accounts) < len(whole.accounts)
    assert window.instants()[0] >= window.since and window.instants()[-1] < window.until + STEP
    with pytest.raises(ValueError, match="step"):
        History(step=0)
    cmd = [sys.executable, "-m", "gwms_obs.cli", "report", "--factory-dir", str(tree), "--format", "openmetrics"]
    r = subprocess.run([*cmd, "--step", "-5"], capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2 and "--step" in r.stderr
    r = subprocess.run([*cmd, "--plot", "x.png"], capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 2 and "--plot" in r.stderr
