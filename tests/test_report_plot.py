"""`gwms-obs report --plot`: what an operator reads off the chart, checked on the figure itself."""

from __future__ import annotations

import io
import itertools
import re
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from gwms_obs import catalogue
from gwms_obs.accounting.pilot import PilotAccount
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.outputs.report import WASTE, Report
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate

BLACKHOLE = "OSG_US_BLACKHOLE_ce"
GPU_ENTRY = "OSG_US_GPU_ce"
H = 3600.0


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("factory")
    simulate(out, 300, seed=3)
    return out


@pytest.fixture(scope="module")
def accounts(factory: Path) -> list[PilotAccount]:
    got: list[PilotAccount] = []
    Ingest(
        IngestConfig(factory_dir=str(factory), settle_seconds=0.0, final=True), outlets=Outlets(accounts=got.append)
    ).scan()
    assert got
    return got


def report_of(accounts: list[PilotAccount], since: float | None = None, until: float | None = None) -> Report:
    rep = Report(since=since, until=until)
    for a in accounts:
        rep.add(a)
    return rep


def drawn(rep: Report) -> Figure:
    """The report's figure, rendered once as savefig would, so tick labels exist."""
    fig = rep.figure()
    assert fig is not None
    fig.savefig(io.BytesIO(), format="png", dpi=50)
    return fig


def axis(fig: Figure, gid: str) -> Axes:
    found = [ax for ax in fig.axes if ax.get_gid() == gid]
    assert len(found) == 1, [ax.get_gid() for ax in fig.axes]
    return found[0]


def entries_top_down(ax: Axes) -> list[str]:
    labels = sorted(zip(ax.get_yticks(), (t.get_text() for t in ax.get_yticklabels()), strict=True))
    return [name for _y, name in reversed(labels)]


def bars(ax: Axes) -> dict[float, list[Rectangle]]:
    """The patches of each bar, by the bar's y."""
    out: dict[float, list[Rectangle]] = defaultdict(list)
    for p in ax.patches:
        assert isinstance(p, Rectangle)
        out[round(p.get_y() + p.get_height() / 2, 6)].append(p)
    return out


def waste_hours(rep: Report, resource: str = "cpu") -> dict[str, float]:
    """Waste per entry straight from the report's cells (not through the plot's code)."""
    out: dict[str, float] = defaultdict(float)
    for (e, _c, cat, r), v in rep.cells.items():
        if r == resource:
            out[e] += v / H if cat in WASTE else 0.0
    return out


def text_of(fig: Figure) -> str:
    sup = fig.get_suptitle()
    return "\n".join([sup, *(ax.get_title(loc) for ax in fig.axes for loc in ("left", "center", "right"))])


def test_waste_is_the_dashboards_waste() -> None:
    """One definition: the plot sorts by what the dashboards rank (catalogue.WASTE)."""
    assert tuple(c.value for c in catalogue.WASTE) == WASTE
    assert set(WASTE) == {
        "validation_failed",
        "decision_problem",
        "misconfiguration_badput",
        "preemption_badput",
        "overhead",
    }


def test_entries_are_ordered_by_waste_most_at_the_top(accounts: list[PilotAccount]) -> None:
    rep = report_of(accounts)
    fig = drawn(rep)
    order = entries_top_down(axis(fig, "cpu:hours"))
    waste = waste_hours(rep)
    assert sorted(order) == sorted(e for e in waste if any(k[0] == e and k[3] == "cpu" for k in rep.cells))
    assert [waste[e] for e in order] == sorted((waste[e] for e in order), reverse=True)
    assert order != sorted(order)  # by name it would be another order on this factory
    # The share panel shares the rows: same entries, same order.
    assert [round(y, 6) for y in sorted(bars(axis(fig, "cpu:share")), reverse=True)] == [
        round(y, 6) for y in sorted(axis(fig, "cpu:hours").get_yticks(), reverse=True)
    ]


def test_unknown_is_not_waste() -> None:
    rep = Report()
    rep.cells[("A_lots_unknown", "c", "unknown", "cpu")] = 1000 * H
    rep.cells[("A_lots_unknown", "c", "misconfiguration_badput", "cpu")] = 1 * H
    rep.cells[("B_some_waste", "c", "validation_failed", "cpu")] = 10 * H
    rep.cells[("B_some_waste", "c", "goodput", "cpu")] = 10 * H
    fig = drawn(rep)
    assert entries_top_down(axis(fig, "cpu:hours")) == ["B_some_waste", "A_lots_unknown"]


def test_share_panel_bars_sum_to_one_and_show_the_black_hole(accounts: list[PilotAccount]) -> None:
    rep = report_of(accounts)
    fig = drawn(rep)
    share = axis(fig, "cpu:share")
    rows = bars(share)
    assert len(rows) == len(entries_top_down(axis(fig, "cpu:hours")))
    for y, patches in rows.items():
        assert sum(p.get_width() for p in patches) == pytest.approx(1.0), y
        # 100 % stacked: each segment starts where the one before it ended.
        segs = sorted((p.get_x(), p.get_width()) for p in patches)
        assert segs[0][0] == 0.0
        for (x0, w0), (x1, _w1) in itertools.pairwise(segs):
            assert x1 == pytest.approx(x0 + w0)
    # The black hole's misconfiguration badput: a sliver of the hours axis, a visible share.
    order = entries_top_down(axis(fig, "cpu:hours"))
    y_bh = sorted(rows, reverse=True)[order.index(BLACKHOLE)]
    misconf = [p for p in rows[y_bh] if p.get_gid() == "cpu:share:misconfiguration_badput"]
    assert len(misconf) == 1
    expected = sum(v for k, v in rep.cells.items() if k[0] == BLACKHOLE and k[2:] == ("misconfiguration_badput", "cpu"))
    total = sum(v for k, v in rep.cells.items() if k[0] == BLACKHOLE and k[3] == "cpu")
    assert misconf[0].get_width() == pytest.approx(expected / total)
    assert misconf[0].get_width() > 0.01
    # Same colour for a category in both panels.
    hours_bh = [p for p in axis(fig, "cpu:hours").patches if p.get_gid() == "cpu:hours:misconfiguration_badput"]
    assert hours_bh and all(p.get_facecolor() == misconf[0].get_facecolor() for p in hours_bh)


def test_title_carries_the_range(accounts: list[PilotAccount]) -> None:
    since = datetime(2026, 6, 9, tzinfo=UTC).timestamp()
    until = datetime(2026, 6, 12, tzinfo=UTC).timestamp()
    fig = report_of(accounts, since=since, until=until).figure()
    assert fig is not None
    assert "pilots that ended 2026-06-09 00:00 – 2026-06-12 00:00 UTC" in fig.get_suptitle()
    # Without bounds: the first and last end among the pilots, and the title says where they come from.
    fig = report_of(accounts).figure()
    assert fig is not None
    lo, hi = (datetime.fromtimestamp(f(a.end for a in accounts), UTC).strftime("%Y-%m-%d %H:%M") for f in (min, max))
    assert f"pilots that ended {lo} – {hi} UTC (first and last pilot end in the logs)" in fig.get_suptitle()


def test_hours_axis_has_thousands_separators(accounts: list[PilotAccount]) -> None:
    fig = drawn(report_of(accounts))
    labels = [t.get_text() for t in axis(fig, "cpu:hours").get_xticklabels() if t.get_text()]
    assert any("," in t for t in labels), labels
    assert all(re.fullmatch(r"\d{1,3}(,\d{3})*", t) for t in labels), labels
    shares = [t.get_text() for t in axis(fig, "cpu:share").get_xticklabels() if t.get_text()]
    assert shares[0] == "0%" and shares[-1] == "100%"


def test_gpu_chart_iff_gpu_hours(accounts: list[PilotAccount]) -> None:
    rep = report_of(accounts)
    assert any(k[3] == "gpu" and v > 0 for k, v in rep.cells.items())
    fig = rep.figure()
    assert fig is not None
    assert entries_top_down(axis(fig, "gpu:hours")) == [GPU_ENTRY]
    assert axis(fig, "gpu:hours").get_xlabel() == "GPU hours (1 GPU)"
    cpu_only = report_of([a for a in accounts if a.entry != GPU_ENTRY])
    assert not any(k[3] == "gpu" for k in cpu_only.cells)
    fig = cpu_only.figure()
    assert fig is not None
    assert {ax.get_gid() for ax in fig.axes} == {"cpu:hours", "cpu:share"}


def test_gpu_time_alone_is_drawn() -> None:
    rep = Report()
    rep.cells[("G", "c", "goodput", "gpu")] = 5 * H
    fig = rep.figure()
    assert fig is not None
    assert {ax.get_gid() for ax in fig.axes} == {"gpu:hours", "gpu:share"}


def test_many_entries_top_40_and_height_grows() -> None:
    def synthetic(n: int) -> Report:
        rep = Report()
        for i in range(n):
            rep.cells[(f"E{i:03d}", "c", "goodput", "cpu")] = 100 * H
            rep.cells[(f"E{i:03d}", "c", "validation_failed", "cpu")] = i * H
        return rep

    heights = {}
    for n in (5, 20, 40, 120):
        fig = synthetic(n).figure()
        assert fig is not None
        heights[n] = fig.get_size_inches()[1]
        names = entries_top_down(axis(fig, "cpu:hours"))
        assert names == [f"E{i:03d}" for i in range(n - 1, max(n - 41, -1), -1)]
        if n > 40:
            assert f"top 40 of {n} entries by waste" in text_of(fig)
        else:
            assert "top 40" not in text_of(fig)
    assert heights[5] < heights[20] < heights[40] == heights[120]


def test_empty_report_draws_nothing(tmp_path: Path, accounts: list[PilotAccount]) -> None:
    png = tmp_path / "empty.png"
    rep = Report()
    assert rep.figure() is None
    assert rep.plot(str(png)) is False
    assert not png.exists()
    assert rep.plot_problem() == "no pilot in the logs"
    late = report_of(accounts, since=datetime(2030, 1, 1, tzinfo=UTC).timestamp())
    assert late.plot(str(png)) is False and not png.exists()
    assert late.plot_problem() == "no pilot ended at or after 2030-01-01 00:00 UTC"
    t = datetime(2030, 1, 1, tzinfo=UTC).timestamp()
    assert Report(until=t).plot_problem() == "no pilot ended before 2030-01-01 00:00 UTC"
    between = "no pilot ended between 2030-01-01 00:00 and 2030-01-01 01:00 UTC"
    assert Report(since=t, until=t + H).plot_problem() == between
    no_time = Report()
    no_time.pilots[("E", "c")] = {"lost": 2, "ran_jobs": 0}
    no_time.cells[("E", "c", "unknown", "cpu")] = 0.0
    assert no_time.figure() is None
    assert no_time.plot_problem() == "the 2 pilots in range have no CPU or GPU time"
    full = report_of(accounts)
    assert full.plot_problem() is None
    assert full.plot(str(png)) is True
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def gwms_obs(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("gwms-obs")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "gwms_obs.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("case", ["empty factory dir", "range with no pilots"])
def test_cli_writes_no_png_and_says_so(case: str, factory: Path, tmp_path: Path) -> None:
    png = tmp_path / "report.png"
    if case == "empty factory dir":
        empty = tmp_path / "factory"
        (empty / "client").mkdir(parents=True)
        (empty / "server").mkdir()
        r = gwms_obs("report", "--factory-dir", str(empty), "--plot", str(png))
    else:
        r = gwms_obs("report", "--factory-dir", str(factory), "--since", "2030-01-01", "--plot", str(png))
    assert r.returncode == 0, r.stderr  # an empty range is an answer, not an error
    assert "no pilots in range" in r.stdout
    assert not png.exists()
    warning = [line for line in r.stderr.splitlines() if str(png) in line]
    assert len(warning) == 1, r.stderr
    assert "WARNING" in warning[0] and "not written" in warning[0] and "nothing to plot" in warning[0]


def test_cli_plot_writes_the_png(factory: Path, tmp_path: Path) -> None:
    png = tmp_path / "report.png"
    r = gwms_obs("report", "--factory-dir", str(factory), "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert "not written" not in r.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
