"""An :class:`~.result.Analysis` as a table, tidy CSV, JSON, and a PNG (the conventions of ``report``)."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import TYPE_CHECKING, Any, Final

from ..outputs.text import aligned, utc_minute
from . import actions as A
from . import outliers as O
from .distributions import Key
from .result import Analysis

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CSV_HEADER: Final = (
    "entry",
    "site",
    "kind",
    "phase",
    "name",
    "count",
    "pilots",
    "p50_s",
    "p90_s",
    "p99_s",
    "mean_s",
    "fleet_median_s",
    "robust_z",
    "ratio",
    "action_rank",
    "share_of_validation",
    "excess_core_hours_per_week",
)
MAX_PLOT_ACTIONS: Final = 20
MAX_TABLE_FLAGS: Final = 20
MAX_JSON_FLAGS: Final = 1000


def _num(v: float, digits: int = 1) -> str:
    if math.isnan(v):
        return ""
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:,.{digits}f}"


def _csv_num(v: float | None) -> str:
    if v is None or math.isnan(v):
        return ""
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.0f}" if v == int(v) else f"{v:.3f}"


def _json_num(v: float | None) -> float | str | None:
    if v is None or math.isnan(v):
        return None
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"  # JSON has no infinity
    return round(v, 3)


def _sorted_keys(an: Analysis) -> list[Key]:
    return sorted(an.dists, key=lambda k: (k.entry, k.kind != "phase", k.phase, k.name))


def _aligned(rows: list[list[str]], left: int) -> list[str]:
    return [line.rstrip() for line in aligned(rows, left)]  # an empty last cell leaves no trailing blanks


def summary(an: Analysis) -> str:
    d = an.data
    traced = sum(an.traced.values())
    text = (
        f"{traced:,} traced pilots of {sum(d.pilots.values()):,} in the accounting, {len(d.pilots):,} entries; "
        f"{d.spools:,} spools from the tree, {d.jaeger_spans:,} spans from Jaeger; "
        f"{d.weeks * 7:,.1f} days"
    )
    lo = d.since if d.since is not None else d.first_end
    hi = d.until if d.until is not None else d.last_end
    if lo is not None and hi is not None:
        text += f" (pilots that ended {utc_minute(lo)} – {utc_minute(hi)} UTC)"
    return text


def to_table(an: Analysis) -> str:
    out = [summary(an), ""]
    if an.entry_actions:
        out.append("entries whose glideins do not run (held, condor_submit failing, a slow queue):")
        out += [f"{a.rank:>3}. {a.text}" for a in an.entry_actions]
        out.append("")
    health = an.data.health.table()
    if len(health) > 1:
        out.append("holds by class and time in queue per entry (minutes; CE: from the CE accepting the glidein)")
        out += [*_aligned(health, 2), ""]
    if an.actions:
        out.append(
            f"actions, by excess cost (median ≥ {A.ACTION_RATIO:g}× the fleet median and robust z ≥ {A.ACTION_Z:g}):"
        )
        out += [f"{a.rank:>3}. {a.sentence()}" for a in an.actions]
        out.append("")
        rows = [["#", "entry", "site", "name", "median s", "fleet s", "ratio", "z", "share", "pilots/wk", "core-h/wk"]]
        rows += [
            [
                str(a.rank),
                a.entry,
                a.site,
                a.name,
                _num(a.median),
                _num(a.fleet_median),
                _num(a.ratio),
                _num(a.z),
                f"{100 * a.share:.0f}%" if not math.isnan(a.share) else "",
                _num(a.pilots_per_week, 0),
                _num(a.core_hours_per_week),
            ]
            for a in an.actions
        ]
        out += [*_aligned(rows, 4), ""]
    else:
        out += [
            f"no actions: no entry's median is ≥ {A.ACTION_RATIO:g}× the fleet median with robust z ≥ {A.ACTION_Z:g}",
            "",
        ]
    if an.dists:
        out.append("durations per entry and phase or script, seconds (z: the entry's median against the fleet's)")
        rows = [["entry", "site", "kind", "phase", "name", "count", "p50", "p90", "p99", "mean", "fleet p50", "z"]]
        for k in _sorted_keys(an):
            d = an.dists[k]
            f = an.fleet.get((k.kind, k.phase, k.name))
            sc = an.scores.get(k)
            rows.append(
                [
                    k.entry,
                    d.site,
                    k.kind,
                    k.phase,
                    k.name,
                    f"{d.count:,}",
                    _num(d.p50),
                    _num(d.p90),
                    _num(d.p99),
                    _num(d.mean),
                    _num(f.median) if f else "",
                    _num(sc.z) if sc else "",
                ]
            )
        out += [*_aligned(rows, 5), ""]
    else:
        out += ["no spans: no spool in the tree's .err files and nothing from Jaeger", ""]
    if an.flags:
        shown = an.flags[:MAX_TABLE_FLAGS]
        out.append(
            f"pilots flagged within their entry (robust z ≥ {O.PILOT_Z:g} and ≥ {O.PILOT_RATIO:g}× the entry's "
            f"median): {len(an.flags):,}" + (f", worst {len(shown)}" if len(shown) < len(an.flags) else "")
        )
        rows = [["pilot", "name", "seconds", "entry p50", "z"]]
        rows += [[f.pilot, f.name, _num(f.duration), _num(f.entry_median), _num(f.z)] for f in shown]
        out += [*_aligned(rows, 2), ""]
    return "\n".join(out)


def to_csv(an: Analysis) -> str:
    """One row per entry × phase or script: its distribution, its score, and its action if any."""
    by_key = {(a.entry, a.kind, a.name): a for a in an.actions}
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_HEADER)
    for k in _sorted_keys(an):
        d = an.dists[k]
        f = an.fleet.get((k.kind, k.phase, k.name))
        sc = an.scores.get(k)
        a = by_key.get((k.entry, k.kind, k.name)) if A.is_candidate(k) else None
        w.writerow(
            [
                k.entry,
                d.site,
                k.kind,
                k.phase,
                k.name,
                d.count,
                len(d.pilots),
                _csv_num(d.p50),
                _csv_num(d.p90),
                _csv_num(d.p99),
                _csv_num(d.mean),
                _csv_num(f.median if f else None),
                _csv_num(sc.z if sc else None),
                _csv_num(sc.ratio if sc else None),
                a.rank if a else "",
                _csv_num(a.share if a else None),
                _csv_num(a.core_hours_per_week if a else None),
            ]
        )
    return buf.getvalue()


def to_json(an: Analysis) -> str:
    d = an.data
    doc: dict[str, Any] = {
        "since": d.since,
        "until": d.until,
        "window_seconds": d.window_seconds,
        "unit": "seconds; cost in canonical CPU core-hours per week (1 core + 2048 MB)",
        "thresholds": {
            "action_z": A.ACTION_Z,
            "action_ratio": A.ACTION_RATIO,
            "action_min_excess_seconds": A.ACTION_MIN_EXCESS_SECONDS,
            "min_entries": A.MIN_ENTRIES,
            "min_samples": O.MIN_SAMPLES,
            "pilot_z": O.PILOT_Z,
            "pilot_ratio": O.PILOT_RATIO,
        },
        "pilots": dict(sorted(d.pilots.items())),
        "traced_pilots": dict(sorted(an.traced.items())),
        "spools": d.spools,
        "jaeger_spans": d.jaeger_spans,
        "actions": [
            {
                "rank": a.rank,
                "entry": a.entry,
                "site": a.site,
                "kind": a.kind,
                "name": a.name,
                "median_s": _json_num(a.median),
                "fleet_median_s": _json_num(a.fleet_median),
                "ratio": _json_num(a.ratio),
                "robust_z": _json_num(a.z),
                "share_of_validation": _json_num(a.share),
                "pilots_per_week": _json_num(a.pilots_per_week),
                "canonical_units": _json_num(a.units),
                "excess_core_hours_per_week": _json_num(a.core_hours_per_week),
                "text": a.sentence(),
            }
            for a in an.actions
        ],
        "entry_actions": [
            {
                "rank": a.rank,
                "entry": a.entry,
                "site": a.site,
                "reason": a.reason,
                "glideins": a.glideins,
                "share": _json_num(a.share),
                "hold_class": a.hold_class or None,
                "text": a.text,
            }
            for a in an.entry_actions
        ],
        "entries": d.health.to_json(),
        "distributions": [dict(zip(CSV_HEADER, row, strict=True)) for row in csv.reader(io.StringIO(to_csv(an)))][1:],
        "flagged_pilots_total": len(an.flags),
        "flagged_pilots": [
            {
                "entry": f.entry,
                "pilot": f.pilot,
                "kind": f.kind,
                "name": f.name,
                "duration_s": _json_num(f.duration),
                "entry_median_s": _json_num(f.entry_median),
                "robust_z": _json_num(f.z),
            }
            for f in an.flags[:MAX_JSON_FLAGS]
        ],
    }
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def plot_problem(an: Analysis) -> str | None:
    """Why :func:`plot` would draw nothing (None when it would draw)."""
    if any(a.core_hours_per_week > 0 for a in an.actions):
        return None
    if not an.dists:
        return "no spans (no spool in the tree's .err files, nothing from Jaeger)"
    return "no action: no entry's phase or script is an outlier against the fleet"


def figure(an: Analysis, top: int = MAX_PLOT_ACTIONS) -> Figure | None:
    """The top actions as horizontal bars of excess core-hours/week, the first at the top."""
    drawn = [a for a in an.actions if a.core_hours_per_week > 0][:top]
    if not drawn:
        return None
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(12, 0.4 * len(drawn) + 1.8), layout="constrained")
    ax = fig.add_subplot()
    ys = list(range(len(drawn)))[::-1]
    costs = [a.core_hours_per_week for a in drawn]
    ax.barh(ys, costs, color="#d62728", gid="actions")
    for y, c in zip(ys, costs, strict=True):
        ax.text(c, y, f" {c:,.1f}", va="center", fontsize="small")
    ax.set_yticks(ys, [a.label() for a in drawn])
    ax.set_xlim(0, 1.15 * max(costs))
    ax.set_ylim(-0.6, len(drawn) - 0.4)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}"))
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_xlabel("excess canonical CPU core-hours per week (entry median − fleet median)")
    n = len([a for a in an.actions if a.core_hours_per_week > 0])
    shown = f"top {len(drawn)} of {n} actions" if n > len(drawn) else "actions, largest cost at the top"
    fig.suptitle(
        f"gwms-obs analyze: validation steps slower than the fleet — {shown}\n{summary(an)}", fontsize="medium"
    )
    return fig


def plot(an: Analysis, path: str, top: int = MAX_PLOT_ACTIONS) -> bool:
    """Draw :func:`figure` into PNG ``path``; False and no file when there is nothing to draw."""
    fig = figure(an, top)
    if fig is None:
        return False
    fig.savefig(path, dpi=100)
    return True
