"""What the dashboards cost at a large factory: series and query time per dashboard, and the scrape.

A simulated factory of N entries (default 500, five to a site; scenario.fleet),
exported by `gwms-obs export` and scraped by a real Prometheus with our rules
(tests/support/fleet_stack.py, the same stack as the series-budget test). For
each dashboard, every panel's queries are run as Grafana runs them on a
2-minute view (range queries for time series, instant otherwise), all
variables at "All", Top N at its default; repeated, min and median written.
Also the exporter's /metrics: samples and the time to serve it.

    .venv/bin/python benchmarks/dashboards.py [--entries 500] [--repeats 5]

Writes benchmarks/results/dashboards.md. Needs Debian's prometheus.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dashboards.gen import board as B
from dashboards.gen import dashboards as D
from tests.support.fleet_stack import fleet_stack, panel_series
from tests.support.servers import http_get

RESULTS = Path(__file__).resolve().parent / "results" / "dashboards.md"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=500)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    variables = {"entry": ".*", "client": ".*", "site": ".*", B.TOPN: str(B.TOPN_DEFAULT)}
    rows = []
    with tempfile.TemporaryDirectory() as tmp, fleet_stack(Path(tmp), a.entries) as stack:
        scrape = []
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            body = http_get(stack.exporter)
            scrape.append(time.perf_counter() - t0)
        samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
        for board in D.boards():
            times, series, over = [], 0, 0
            for _ in range(a.repeats):
                t0 = time.perf_counter()
                counts = [panel_series(stack.prometheus, s, variables) for s in board.specs]
                times.append(time.perf_counter() - t0)
            series = sum(counts)
            over = sum(1 for s, n in zip(board.specs, counts, strict=True) if n > s.budget)
            worst = max(zip(counts, (s.title for s in board.specs), strict=True))
            rows.append((board.uid, len(board.specs), series, over, worst, min(times), statistics.median(times)))
            print(f"{board.uid}: {series} series, {min(times) * 1000:.0f} ms", flush=True)
    load = os.getloadavg()
    lines = [
        "# Dashboards at a large factory",
        "",
        f"`benchmarks/dashboards.py --entries {a.entries} --repeats {a.repeats}`, "
        f"{time.strftime('%Y-%m-%d', time.gmtime())}, {platform.node()}: {os.cpu_count()} cores, "
        f"load {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min) at the end, Prometheus "
        "(Debian package) and the exporter on the same machine.",
        "",
        f"A simulated factory of {a.entries} entries on {a.entries // 5} sites, 3 pilots per entry, "
        "exported and scraped every 5 s with the recording and alert rules. Every panel query as Grafana "
        f"runs it on a 2-minute view (range queries for time series, 5 s steps), all variables at All, "
        f"Top N = {B.TOPN_DEFAULT}. Time: all of a dashboard's queries one after the other (Grafana runs "
        "them in parallel, so a browser waits less); min and median of the repeats.",
        "",
        "| dashboard | panels | series drawn | panels over budget | largest panel (series) | min | median |",
        "|---|---|---|---|---|---|---|",
    ]
    for uid, panels, series, over, (n, title), tmin, tmed in rows:
        times = f"{tmin * 1000:,.0f} ms | {tmed * 1000:,.0f} ms"
        lines.append(f"| `{uid}` | {panels} | {series:,} | {over} | {title} ({n}) | {times} |")
    lines += [
        "",
        f"The exporter's /metrics at {a.entries} entries: {samples:,} samples, {len(body) / 1e6:.1f} MB, "
        f"served in {min(scrape) * 1000:,.0f} ms (min) / {statistics.median(scrape) * 1000:,.0f} ms (median) "
        "while it rescans every 5 s. The prometheus role scrapes every 30 s by default, well above that; the "
        "1 s interval the small live tests use is too short here.",
        "",
        "The pilot-phase panels read the collector's span metrics; no collector runs here, so they draw "
        "nothing (their budgets are checked only for shape). Their cost grows with span names x entries, "
        "bounded the same way by Top N.",
        "",
    ]
    a.out.write_text("\n".join(lines))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
