"""One-shot accounting report: a table for operators, tidy CSV, JSON, and a plot."""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..accounting.pilot import PilotAccount
from ..catalogue import Accuracy, Category, Outcome, Resource

CSV_HEADER = ("entry", "client", "category", "resource", "seconds")
CATEGORY_ORDER = [c.value for c in Category]


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
        if a.partition.accuracy is not Accuracy.EXACT:
            self.approximate[a.entry] += sum(a.partition.cpu.values())

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
            widths = [max(len(r[i]) for r in table) for i in range(len(head))]
            for i, row in enumerate(table):
                cols = zip(row, widths, strict=True)
                out.append("  ".join(x.ljust(w) if j < 2 else x.rjust(w) for j, (x, w) in enumerate(cols)))
                if i == 0 or i == len(table) - 2:
                    out.append("  ".join("-" * w for w in widths))
            out.append("")
        if self.accuracy:
            out.append("pilots by accuracy: " + ", ".join(f"{k} {v}" for k, v in sorted(self.accuracy.items())))
            out.append("approx = share of the entry's CPU time not from per-job records (docs/accounting.md)")
        return "\n".join(out) if out else "no pilots in range\n"

    def plot(self, path: str) -> bool:
        """Stacked bars of the CPU categories per entry (canonical hours) into PNG ``path``.

        False, and no file written, when there is no CPU time to draw: an empty
        chart would pass for a report.
        """
        cpu = {k: v for k, v in self.cells.items() if k[3] == Resource.CPU.value and v > 0}
        if not cpu:
            return False
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        entries = sorted({k[0] for k in cpu})
        cats = [c for c in CATEGORY_ORDER if any(k[2] == c for k in cpu)]
        colors = {
            "goodput": "#2ca02c",
            "overhead": "#7f7f7f",
            "validation_failed": "#d62728",
            "decision_problem": "#ff7f0e",
            "misconfiguration_badput": "#9467bd",
            "preemption_badput": "#8c564b",
            "unknown": "#c7c7c7",
        }
        fig, ax = plt.subplots(figsize=(12, 0.5 * len(entries) + 2))
        left = [0.0] * len(entries)
        for c in cats:
            vals = [sum(v for (e, _cl, cat, _r), v in cpu.items() if e == en and cat == c) / 3600 for en in entries]
            ax.barh(entries, vals, left=left, label=c, color=colors.get(c))
            left = [a + b for a, b in zip(left, vals, strict=True)]
        ax.set_xlabel("canonical CPU hours (1 core + 2 GB)")
        ax.set_title("Pilot time by category and entry")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")  # outside: never over a bar
        fig.tight_layout()
        try:
            fig.savefig(path, dpi=100)
        finally:
            plt.close(fig)
        return True
