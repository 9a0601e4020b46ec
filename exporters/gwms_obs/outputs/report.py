"""One-shot accounting report: a table for operators, tidy CSV, JSON, and a plot."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .. import catalogue
from ..accounting.pilot import PilotAccount
from ..catalogue import Accuracy, Category, Outcome, Resource
from ..ingest.outlets import FactoryLogCount
from .entry_health import EntryHealth
from .text import aligned, utc_minute

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CSV_HEADER = ("entry", "client", "category", "resource", "seconds")
CATEGORY_ORDER = [c.value for c in Category]

# The plot's waste is the dashboards' (catalogue.WASTE): every category but goodput
# and unknown (time nobody can place: drawn apart, hatched). Overhead is in it: idle
# provisioned units are what GlideinWMS's own wastemill calls "idle" waste.
WASTE = tuple(c.value for c in catalogue.WASTE)
# Left to right in a bar: the waste from the axis (overhead last), then unknown, goodput.
PLOT_ORDER = [*WASTE, Category.UNKNOWN.value, Category.GOODPUT.value]
CATEGORY_COLORS = {
    "validation_failed": "#d62728",
    "decision_problem": "#ff7f0e",
    "misconfiguration_badput": "#9467bd",
    "preemption_badput": "#8c564b",
    "unknown": "#d9d9d9",
    "overhead": "#7f7f7f",
    "goodput": "#2ca02c",
}
MAX_PLOT_ENTRIES = 40  # a factory has up to 500 entries: the plot shows the most wasteful
PILOT_COLUMNS = ("pilot", "cpu_seconds", "gpu_seconds", "outcome", "end", "trace_id")


@dataclass(frozen=True, slots=True)
class CellPilot:
    """One pilot behind a cell (entry × category) of the table: its seconds in that category."""

    cluster: int | None
    proc: int | None
    cpu_seconds: float
    gpu_seconds: float
    outcome: str
    start: float
    end: float

    @property
    def job(self) -> str:
        return f"{self.cluster}.{self.proc}" if self.cluster is not None and self.proc is not None else "?"

    def trace_id(self, factory: str, entry: str) -> str:
        """Its pilot trace id (outputs/pilot_traces.py), "" when it has no cluster.proc, hence no trace."""
        from .pilot_traces import pilot_trace_id

        if self.cluster is None or self.proc is None:
            return ""
        return pilot_trace_id(factory, entry, self.cluster, self.proc, self.start)


@dataclass
class Report:
    """Sums of canonical unit-seconds by (entry, client, category, resource)."""

    since: float | None = None
    until: float | None = None
    cells: dict[tuple[str, str, str, str], float] = field(default_factory=lambda: defaultdict(float))
    pilots: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)  # (entry, client) -> outcome counts
    accuracy: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    sites: dict[str, str] = field(default_factory=dict)
    # CPU unit-seconds per entry from a source other than the per-job ads (accuracy != exact).
    approximate: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    # The earliest and latest end of the pilots added: the range when since/until are not given.
    first_end: float | None = None
    last_end: float | None = None
    # report --pilots ENTRY:CATEGORY: the cell whose pilots are listed, and those pilots
    cell: tuple[str, Category] | None = None
    cell_pilots: list[CellPilot] = field(default_factory=list)
    # Per entry, the window's holds by class, time in queue and the factory's own entry logs' counts
    # (its outlets: health.add_hold, add_times, add_factory_log).
    health: EntryHealth = field(default_factory=EntryHealth)

    def __post_init__(self) -> None:
        self.health.since, self.health.until = self.since, self.until

    def wants(self, a: PilotAccount) -> bool:
        """A pilot belongs to the report when it ended inside [since, until)."""
        return (self.since is None or a.end >= self.since) and (self.until is None or a.end < self.until)

    def add(self, a: PilotAccount) -> None:
        if not self.wants(a):
            return
        for res, part in ((Resource.CPU, a.partition.cpu), (Resource.GPU, a.partition.gpu)):
            for cat, v in part.items():
                self.cells[(a.entry, a.client, cat.value, res.value)] += v
        counts = self.pilots.setdefault((a.entry, a.client), {o.value: 0 for o in Outcome})
        counts[a.outcome.value] += 1
        self.accuracy[a.partition.accuracy.value] += 1
        self.sites[a.entry] = a.site
        self.first_end = a.end if self.first_end is None else min(self.first_end, a.end)
        self.last_end = a.end if self.last_end is None else max(self.last_end, a.end)
        if a.partition.accuracy is not Accuracy.EXACT:
            self.approximate[a.entry] += sum(a.partition.cpu.values())
        if self.cell is not None and a.entry == self.cell[0]:
            cpu, gpu = a.partition.cpu.get(self.cell[1], 0.0), a.partition.gpu.get(self.cell[1], 0.0)
            if cpu > 0 or gpu > 0:
                self.cell_pilots.append(CellPilot(a.cluster, a.proc, cpu, gpu, a.outcome.value, a.start, a.end))

    def add_factory_log(self, c: FactoryLogCount) -> None:
        self.health.add_factory_log(c)

    def factory_log_rows(self) -> list[dict[str, Any]]:
        return self.health.factory_log_rows()

    # --- the pilots behind one cell (report --pilots) -----------------------------------------
    def pilot_rows(self, factory: str) -> list[tuple[str, float, float, str, str, str]]:
        """The cell's pilots, most seconds first: cluster.proc, CPU and GPU seconds, outcome, end, trace id."""
        if self.cell is None:
            return []
        entry = self.cell[0]
        ps = sorted(self.cell_pilots, key=lambda p: (-(p.cpu_seconds + p.gpu_seconds), p.end, p.job))
        iso = "%Y-%m-%dT%H:%M:%SZ"
        return [(p.job, p.cpu_seconds, p.gpu_seconds, p.outcome, datetime.fromtimestamp(p.end, UTC).strftime(iso),
                 p.trace_id(factory, entry)) for p in ps]  # fmt: skip

    def pilots_to_csv(self, factory: str) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(PILOT_COLUMNS)
        for job, cpu, gpu, outcome, end, tid in self.pilot_rows(factory):
            w.writerow((job, _secs(cpu), _secs(gpu), outcome, end, tid))
        return buf.getvalue()

    def pilots_to_json(self, factory: str) -> str:
        assert self.cell is not None
        doc = {
            "entry": self.cell[0],
            "category": self.cell[1].value,
            "since": self.since,
            "until": self.until,
            "factory_name": factory,
            "unit": "canonical unit-seconds (cpu: 1 core + 2048 MB; gpu: 1 GPU)",
            "pilots": [dict(zip(PILOT_COLUMNS, r, strict=True)) for r in self.pilot_rows(factory)],
        }
        return json.dumps(doc, indent=2)

    def pilots_to_table(self, factory: str) -> str:
        assert self.cell is not None
        entry, cat = self.cell
        rows = self.pilot_rows(factory)
        if not rows:
            return f"no pilot of {entry} in range has {cat.value} time\n"
        gpu = any(r[2] > 0 for r in rows)
        head = ["pilot", f"{cat.value} (s)", *(["GPU (s)"] if gpu else []), "outcome", "ended (UTC)", "trace id"]
        table = [head] + [[j, f"{c:,.0f}", *([f"{g:,.0f}"] if gpu else []), o, e, t] for j, c, g, o, e, t in rows]
        total = sum(r[1] for r in rows)
        out = [f"{len(rows)} pilots of {entry} with {cat.value} time: {total / 3600:,.1f} canonical CPU hours"]
        out += aligned(table, 1)
        return "\n".join(out) + "\n"

    # --- renderings ---------------------------------------------------------------------------
    def rows(self) -> list[tuple[str, str, str, str, float]]:
        return sorted(
            ((e, c, cat, r, v) for (e, c, cat, r), v in self.cells.items() if v > 0),
            key=lambda t: (t[0], t[1], t[3], CATEGORY_ORDER.index(t[2])),
        )

    def to_csv(self) -> str:
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_HEADER)
        for e, c, cat, r, v in self.rows():
            w.writerow((e, c, cat, r, f"{v:.0f}" if v == int(v) else f"{v:.3f}"))
        return buf.getvalue()

    def to_json(self) -> str:
        doc: dict[str, Any] = {
            "since": self.since,
            "until": self.until,
            "unit": "canonical unit-seconds (cpu: 1 core + 2048 MB; gpu: 1 GPU)",
            "pilots": [
                {"entry": e, "client": c, "site": self.sites.get(e), **n} for (e, c), n in sorted(self.pilots.items())
            ],
            "accuracy": dict(self.accuracy),
            "approximate_cpu_seconds": {e: v for e, v in sorted(self.approximate.items()) if v > 0},
            "rows": [dict(zip(CSV_HEADER, r, strict=True)) for r in self.rows()],
            # glideins, from the factory's own entry logs, by when it logged them
            "factory_log": self.factory_log_rows(),
            # holds (by when HTCondor logged them) and times in queue (of the pilots above), seconds
            "entries": self.health.to_json(),
        }
        return json.dumps(doc, indent=2)

    def to_table(self) -> str:
        """Hours per category and entry, with each category's share of the entry's time."""
        cats = [c for c in CATEGORY_ORDER if any(k[2] == c for k in self.cells)]
        out: list[str] = []
        for res in (Resource.CPU, Resource.GPU):
            by_entry: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
            for (e, _c, cat, r), v in self.cells.items():
                if r == res.value:
                    by_entry[e][cat] += v
            if not by_entry:
                continue
            unit = "canonical CPU hours (1 core + 2 GB)" if res == Resource.CPU else "GPU hours"
            out.append(f"{unit}, by entry; (%) = share of the entry's time")
            head = ["entry", "site", "pilots", *cats, "total", "approx"]
            table = [head]
            grand: dict[str, float] = defaultdict(float)
            for e in sorted(by_entry):
                tot = sum(by_entry[e].values())
                npilots = sum(sum(n.values()) for (pe, _), n in self.pilots.items() if pe == e)
                cells = [
                    f"{by_entry[e][c] / 3600:,.1f} ({100 * by_entry[e][c] / tot:.0f}%)" if tot else "0" for c in cats
                ]
                approx = self.approximate.get(e, 0.0) if res == Resource.CPU else 0.0
                share = f"{100 * approx / tot:.0f}%" if tot and res == Resource.CPU else ""
                table.append([e, self.sites.get(e, ""), str(npilots), *cells, f"{tot / 3600:,.1f}", share])
                for c in cats:
                    grand[c] += by_entry[e][c]
            gt = sum(grand.values())
            table.append(
                [
                    "TOTAL",
                    "",
                    str(sum(sum(n.values()) for n in self.pilots.values())),
                    *[f"{grand[c] / 3600:,.1f} ({100 * grand[c] / gt:.0f}%)" if gt else "0" for c in cats],
                    f"{gt / 3600:,.1f}",
                    f"{100 * sum(self.approximate.values()) / gt:.0f}%" if gt and res == Resource.CPU else "",
                ]
            )
            out += aligned(table, 2, rules_after=(0, len(table) - 2))  # a rule under the head, one over TOTAL
            out.append("")
        if self.accuracy:
            out.append("pilots by accuracy: " + ", ".join(f"{k} {v}" for k, v in sorted(self.accuracy.items())))
            out.append("approx = share of the entry's CPU time not from per-job records (docs/accounting.md)")
        health = self.health.table()
        if len(health) > 1:
            out += ["", "holds by class and time in queue (submit to first execute; CE: from the CE accepting it)"]
            out += aligned(health, 2, rules_after=(0,))
        return "\n".join(out) if out else "no pilots in range\n"

    # --- the plot -----------------------------------------------------------------------------
    def range_label(self) -> str:
        """The pilots the report holds, as "pilots that ended A – B UTC".

        The report selects pilots by their end, in [since, until). A bound the
        report was not given (no ``--since``/``--until``) is the earliest or
        latest end among the pilots it added, and the label says so. Empty when
        the report holds no pilot and has no bounds.
        """
        lo = self.since if self.since is not None else self.first_end
        hi = self.until if self.until is not None else self.last_end
        if lo is None or hi is None:
            return ""
        text = f"pilots that ended {utc_minute(lo)} – {utc_minute(hi)} UTC"
        derived = [n for n, given in (("first", self.since), ("last", self.until)) if given is None]
        if derived:
            text += f" ({' and '.join(derived)} pilot end in the logs)"
        return text

    def plot_problem(self) -> str | None:
        """Why :meth:`plot` would draw nothing (None when it would draw)."""
        if any(v > 0 for v in self.cells.values()):
            return None
        npilots = sum(sum(n.values()) for n in self.pilots.values())
        if npilots:
            return f"the {npilots} pilots in range have no CPU or GPU time"
        if self.since is None and self.until is None:
            return "no pilot in the logs"
        if self.until is None:
            return f"no pilot ended at or after {utc_minute(self.since or 0.0)} UTC"
        if self.since is None:
            return f"no pilot ended before {utc_minute(self.until)} UTC"
        return f"no pilot ended between {utc_minute(self.since)} and {utc_minute(self.until)} UTC"

    def figure(self, max_entries: int = MAX_PLOT_ENTRIES) -> Figure | None:
        """The operator's chart, or None when there is nothing to draw (see :meth:`plot_problem`).

        One row per resource with time (CPU always when there is any, GPU only
        when there are GPU hours; 1 GPU = 1 unit): on the left canonical hours
        by category, on the right each category's share of the entry's time
        (100 % stacked, so a small entry's trouble is as visible as a big one's).

        *Waste* is ``catalogue.WASTE``, what the dashboards rank: the badput
        (``validation_failed``, ``decision_problem``, ``misconfiguration_badput``,
        ``preemption_badput``) and ``overhead`` (idle provisioned units;
        docs/accounting.md). ``goodput`` is not waste. ``unknown`` is not counted as
        waste (nobody knows where that time went) but it is not good either: it
        is drawn hatched, right after the waste. Entries are sorted by their
        waste in hours, most wasteful at the top (ties: larger waste share, then
        name); each bar is drawn waste first, from the axis, so the waste of all
        entries starts at the same place. Above ``max_entries`` entries only the
        top ``max_entries`` by waste are drawn and the title says so. The
        height grows with the entries drawn.
        """
        by_res: dict[str, dict[str, dict[str, float]]] = {}
        for resource in (Resource.CPU, Resource.GPU):
            by_entry: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
            for (e, _c, cat, r), v in self.cells.items():
                if r == resource.value and v > 0:
                    by_entry[e][cat] += v / 3600
            if by_entry:
                by_res[resource.value] = by_entry
        if not by_res:
            return None
        from matplotlib.figure import Figure
        from matplotlib.patches import Patch
        from matplotlib.ticker import FuncFormatter, PercentFormatter
        from matplotlib.transforms import blended_transform_factory

        cats = [c for c in PLOT_ORDER if any(c in cs for be in by_res.values() for cs in be.values())]
        rows: list[tuple[str, list[str], int]] = []  # resource, entries drawn (top first), entries in all
        for res, by_entry in by_res.items():
            ranked = sorted(by_entry, key=lambda e: _waste_key(e, by_entry[e]))
            rows.append((res, ranked[:max_entries], len(ranked)))
        heights = [len(drawn) + 2.0 for _r, drawn, _n in rows]
        fig = Figure(figsize=(15, 0.32 * sum(heights) + 2.2), layout="constrained")
        grid = fig.add_gridspec(len(rows), 2, height_ratios=heights, width_ratios=[3, 2])
        hours_fmt = FuncFormatter(lambda x, _pos: f"{x:,.0f}")
        for i, (res, drawn, n) in enumerate(rows):
            by_entry = by_res[res]
            ax_h = fig.add_subplot(grid[i, 0])
            ax_s = fig.add_subplot(grid[i, 1], sharey=ax_h)
            ys = list(range(len(drawn)))[::-1]  # the first entry at the top
            left_h = [0.0] * len(drawn)
            left_s = [0.0] * len(drawn)
            totals = [sum(by_entry[e].values()) for e in drawn]
            for c in cats:
                hours = [by_entry[e].get(c, 0.0) for e in drawn]
                shares = [h / t for h, t in zip(hours, totals, strict=True)]
                style = _bar_style(c)
                ax_h.barh(ys, hours, left=left_h, label=c, gid=f"{res}:hours:{c}", **style)
                ax_s.barh(ys, shares, left=left_s, label=c, gid=f"{res}:share:{c}", **style)
                left_h = [a + b for a, b in zip(left_h, hours, strict=True)]
                left_s = [a + b for a, b in zip(left_s, shares, strict=True)]
            for y, t in zip(ys, totals, strict=True):
                ax_h.text(t, y, f" {t:,.0f}", va="center", fontsize="small")
            ax_h.set_xlim(0, 1.1 * max(totals))  # room for the totals
            ax_h.set_yticks(ys, drawn)
            ax_h.set_ylim(-0.6, len(drawn) - 0.4)
            ax_h.xaxis.set_major_formatter(hours_fmt)
            ax_h.grid(axis="x", alpha=0.3)
            ax_h.set_axisbelow(True)
            unit = "canonical CPU hours (1 core + 2 GB)" if res == Resource.CPU.value else "GPU hours (1 GPU)"
            ax_h.set_xlabel(unit)
            what = "CPU" if res == Resource.CPU.value else "GPU"
            shown = (
                f"top {len(drawn)} of {n} entries by waste" if n > len(drawn) else "entries by waste, most at the top"
            )
            ax_h.set_title(f"{what} time by entry and category — {shown}", loc="left", fontsize="medium")
            ax_h.set_gid(f"{res}:hours")
            ax_s.set_gid(f"{res}:share")
            ax_s.set_xlim(0, 1)
            ax_s.xaxis.set_major_formatter(PercentFormatter(xmax=1, decimals=0))
            ax_s.tick_params(axis="y", labelleft=False)
            ax_s.grid(axis="x", alpha=0.3)
            ax_s.set_axisbelow(True)
            ax_s.set_xlabel(f"share of the entry's {what} time (waste drawn first, from 0)")
            ax_s.set_title("waste share", loc="right", fontsize="small")
            right = blended_transform_factory(ax_s.transAxes, ax_s.transData)
            for y, e, t in zip(ys, drawn, totals, strict=True):
                w = sum(by_entry[e].get(c, 0.0) for c in WASTE) / t
                ax_s.text(1.01, y, f"{100 * w:.1f}%", transform=right, va="center", fontsize="small")
        handles = [Patch(label=c + (" (waste)" if c in WASTE else ""), **_bar_style(c)) for c in cats]
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize="small", frameon=False)
        title = "gwms-obs report: pilot time by entry and category"
        when = self.range_label()
        fig.suptitle(f"{title}\n{when}" if when else title)
        return fig

    def plot(self, path: str, max_entries: int = MAX_PLOT_ENTRIES) -> bool:
        """Draw :meth:`figure` into PNG ``path``.

        False, and no file written, when there is nothing to draw (no pilot
        time in range, :meth:`plot_problem` says why): an empty chart would
        pass for a report.
        """
        fig = self.figure(max_entries)
        if fig is None:
            return False
        fig.savefig(path, dpi=100)
        return True


def _waste_key(entry: str, hours: dict[str, float]) -> tuple[float, float, str]:
    """Sort key: most waste (hours) first, then the larger waste share, then the name."""
    w = sum(hours.get(c, 0.0) for c in WASTE)
    return (-w, -w / (sum(hours.values()) or 1.0), entry)


def _bar_style(cat: str) -> dict[str, Any]:
    style: dict[str, Any] = {"facecolor": CATEGORY_COLORS.get(cat, "#000000"), "edgecolor": "white", "linewidth": 0.3}
    if cat == Category.UNKNOWN.value:
        style.update(hatch="///", edgecolor="#8c8c8c")
    return style


def _secs(v: float) -> str:
    return f"{v:.0f}" if v == int(v) else f"{v:.3f}"
