"""/metrics at a large factory: the cached exposition (issue 34) against the old per-scrape render.

A simulated factory of N entries (default 500, 3 pilots each, as benchmarks/dashboards.py),
scanned once; then the same Ingest is served by the old app (prometheus_client's ``make_wsgi_app``
over ``exporter_registry``: every family built under the ingest lock on every scrape) and by the
new one (``Exposition``: the ledger's families rendered once per change, served as bytes), both
behind the daemon's MetricsServer in this process, and by the new one as the daemon serves it
("child": outputs/serve.py's process of its own, handed each render and the per-scrape families).
Scrapes alternate between them, one at a time, over HTTP on 127.0.0.1, as Prometheus asks (OpenMetrics,
gzip) and in the classic text; first idle, then while the daemon's scan runs back to back
in a thread (steady state: the same tree walked and stat-ed, the GIL shared). Each
scrape is timed from connect to its last byte, by a client process of its own, alternating with a
floor: the same bytes from a minimal server in a process of its own (what the shared machine gives
any server at that moment). ``--no-old`` leaves the old app out (its scrapes take seconds).

    .venv/bin/python benchmarks/metrics_render.py [--entries 500] [--scrapes 40]

Before the scrapes, it times the CPU of a render after one pilot's change (``--renders`` of each,
alternating): the whole ledger encoded, as a render was before it encoded only what changed, against
``Exposition.refresh`` now.

It also takes the hand-off's CPU (the daemon's side: ServingChild.publish_cpu; the child's: its
utime + stime) per render, per scrape and per idle second.

Writes benchmarks/results/metrics-render.md. ``--serve old|new --factory DIR`` runs one app
alone (the factory simulated into DIR once, then scanned, then scraped ``--scrapes`` times as
Prometheus asks): a whole process to time, the two paired by a process timer.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import choose_encoder

from gwms_obs.accounting.ledger import Ledger
from gwms_obs.accounting.partition import Partition
from gwms_obs.accounting.pilot import PilotAccount
from gwms_obs.catalogue import Category, Outcome
from gwms_obs.daemon import Heap
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.outputs.http import MetricsServer, SharedRenders, exposition_app, listen
from gwms_obs.outputs.prometheus import Exposition, _encode, _snapshot, exporter_registry, ledger_families
from gwms_obs.outputs.serve import ServingChild
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.scenario import fleet
from tools.tracing_backends import free_port

RESULTS = Path(__file__).resolve().parent / "results" / "metrics-render.md"
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)
KINDS = {"OpenMetrics, gzip (as Prometheus asks)": (PROMETHEUS_ACCEPT, True), "text, plain": ("", False)}


def scrape(port: int, accept: str, gz: bool) -> tuple[float, bytes]:
    """One GET on a fresh connection: (seconds from connect to the last byte, the body, decompressed)."""
    head = f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAccept: {accept}\r\n"
    head += "Accept-Encoding: gzip\r\n\r\n" if gz else "\r\n"
    t0 = time.perf_counter()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(head.encode())
        chunks = []
        while chunk := s.recv(1 << 20):
            chunks.append(chunk)
    took = time.perf_counter() - t0
    body = b"".join(chunks).split(b"\r\n\r\n", 1)[1]
    return took, gzip.decompress(body) if gz else body


def raw(port: int, accept: str, gz: bool) -> bytes:
    """One answer's body as sent (gzipped when asked), for the floor to serve the same bytes."""
    head = f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nAccept: {accept}\r\n"
    head += "Accept-Encoding: gzip\r\n\r\n" if gz else "\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        s.sendall(head.encode())
        chunks = []
        while chunk := s.recv(1 << 20):
            chunks.append(chunk)
    return b"".join(chunks).split(b"\r\n\r\n", 1)[1]


FLOOR = """import socket, sys
body = open(sys.argv[1], "rb").read()
head = b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n" % len(body)
srv = socket.create_server(("127.0.0.1", 0), backlog=128)
print(srv.getsockname()[1], flush=True)
while True:
    c, _ = srv.accept()
    data = b""
    while b"\\r\\n\\r\\n" not in data and (d := c.recv(65536)):
        data += d
    c.sendall(head + body)
    c.close()
"""


def floor_server(body: bytes, tmp: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The floor: ``body`` served by a minimal server in a process of its own (no scan, no GIL shared,
    no HTTP parsing): what the machine, shared as it is, gives any server at that moment."""
    path = tmp / f"floor-{len(body)}"
    path.write_bytes(body)
    p = subprocess.Popen([sys.executable, "-c", FLOOR, str(path)], stdout=subprocess.PIPE)
    assert p.stdout is not None
    return p, int(p.stdout.readline())


def scrapes_from_another_process(ports: dict[str, int], accept: str, gz: bool, n: int) -> dict[str, list[float]]:
    """``n`` scrapes of each server, alternating, by a client process of its own (as Prometheus is: a client
    thread here would wait for the GIL the scan holds and time that instead of the server)."""
    code = (
        "import json, sys; sys.path.insert(0, 'benchmarks'); from metrics_render import scrape; "
        f"t = {{k: [] for k in {ports!r}}}\n"
        f"for _ in range({n}):\n"
        f"    for k, port in {ports!r}.items():\n"
        f"        t[k].append(scrape(port, {accept!r}, {gz})[0])\n"
        "print(json.dumps(t))"
    )
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True, timeout=1200
    )
    times: dict[str, list[float]] = json.loads(out.stdout)
    return times


def q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p * (len(xs) - 1)))]


def arrive(led: Ledger, rng: random.Random) -> None:
    """A pilot's worth of change, through Ledger.add (which marks what it changes for the renderer):
    one pool's CPU, pilots, user jobs, lifetime, validation and last pilot."""
    entry, client, site = rng.choice(list(led.lifetime))
    part = Partition({Category.GOODPUT: rng.uniform(1e3, 1e5), Category.OVERHEAD: rng.uniform(10, 1e3)})
    part.jobs[Category.GOODPUT] = rng.randrange(1, 9)
    end = time.time()
    start = end - rng.uniform(600, 200_000)
    cluster = rng.randrange(10**6)
    led.add(PilotAccount(entry, client, site, cluster, 0, Outcome.RAN_JOBS, start, end, 8, None, 0, 120.0, part))


def full_render(ing: Ingest) -> None:
    """What a render was before it encoded only what changed: every family, text and OpenMetrics, and
    the OpenMetrics gzipped (as Prometheus asks), from a snapshot taken under the ingest lock."""
    with ing.lock:
        snap = _snapshot(ing.ledger)
    families = ledger_families(snap, "benchfactory")
    for accept in ("", PROMETHEUS_ACCEPT):
        data = _encode(choose_encoder(accept)[0], families)
        if accept:
            gzip.compress(data, 6)


def render_costs(ing: Ingest, expo: Exposition, child: ServingChild, n: int) -> dict[str, list[float]]:
    """CPU of a render after one pilot's change: the whole ledger encoded (as before) against what
    Exposition.refresh does now (its publishing for the child included, and taken apart), alternating,
    ``n`` of each."""
    rng = random.Random(5)
    out: dict[str, list[float]] = {"whole": [], "changed": [], "units": [], "publish": []}
    for _ in range(n):
        arrive(ing.ledger, rng)
        c = time.process_time()
        full_render(ing)
        out["whole"].append(time.process_time() - c)
        c, p = time.process_time(), child.publish_cpu
        assert expo.refresh()
        out["changed"].append(time.process_time() - c)
        out["publish"].append(child.publish_cpu - p)
        out["units"].append(expo.last_units)
    return out


TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid: int) -> float:
    """utime + stime of process ``pid`` (seconds)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def child_cpu(child: ServingChild) -> float:
    assert child.proc is not None
    return cpu_of(child.proc.pid)


def serve_alone(which: str, root: Path, entries: int, scrapes: int) -> int:
    """Scan the factory, serve it with one app, scrape it ``scrapes`` times; print the scrapes' p50/p99."""
    if not root.exists():
        simulate(root, 3 * entries, seed=3, start=time.time() - 48 * 3600, entries=fleet(entries))
    ing = Ingest(IngestConfig(str(root), settle_seconds=0))
    ing.scan()
    port = free_port()
    expo = Exposition(ing, factory="benchfactory")
    app = exposition_app(expo) if which == "new" else make_wsgi_app(exporter_registry(ing, factory="benchfactory"))
    server = MetricsServer("127.0.0.1", port, SharedRenders(app))
    try:
        if which == "new":
            expo.start()
        times = [scrape(port, PROMETHEUS_ACCEPT, True)[0] for _ in range(scrapes)]
    finally:
        server.close()
        expo.stop()
    print(f"{which}: {scrapes} scrapes, p50 {q(times, 0.5) * 1e3:.1f} ms, p99 {q(times, 0.99) * 1e3:.1f} ms")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entries", type=int, default=500)
    ap.add_argument("--scrapes", type=int, default=40, help="of each app, each kind, each phase")
    ap.add_argument("--renders", type=int, default=20, help="renders after a pilot's change, of each kind")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--serve", choices=("old", "new"), help="one app alone, for a process timer")
    ap.add_argument("--factory", type=Path, help="with --serve: the simulated factory (made once)")
    ap.add_argument("--no-old", action="store_true", help="leave the old app out (its scrapes take seconds)")
    ap.add_argument("--idle-seconds", type=float, default=30.0, help="the hand-off's CPU at rest, over this long")
    a = ap.parse_args()
    if a.serve:
        return serve_alone(a.serve, a.factory, a.entries, a.scrapes)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "factory"
        simulate(root, 3 * a.entries, seed=3, start=time.time() - 48 * 3600, entries=fleet(a.entries))
        ing = Ingest(IngestConfig(str(root), checkpoint=str(Path(tmp) / "cp.json"), settle_seconds=0))
        t0 = time.perf_counter()
        ing.scan()
        first_scan = time.perf_counter() - t0
        heap = Heap()
        heap.after_full_scan()  # as the daemon does after its first full scan
        expo = Exposition(ing, factory="benchfactory")
        servers = {"new": MetricsServer("127.0.0.1", 0, SharedRenders(exposition_app(expo)))}
        child = ServingChild(expo, listen("127.0.0.1", 0))  # as the daemon serves: publishes from the first render
        if not a.no_old:
            old_app = make_wsgi_app(exporter_registry(ing, factory="benchfactory"))
            servers["old"] = MetricsServer("127.0.0.1", 0, SharedRenders(old_app))
        new_port = servers["new"].port
        floors = {}
        t0 = time.perf_counter()
        expo.refresh()
        first_render = time.perf_counter() - t0
        costs = render_costs(ing, expo, child, a.renders)  # before the renderer's thread, which would take them
        print("render CPU after one pilot's change", {k: f"{q(v, 0.5):.4f}" for k, v in costs.items()})
        expo.start()
        child.start()
        ports_of = {k: srv.port for k, srv in servers.items()} | {"child": child.sock.getsockname()[1]}
        # The hand-off at rest: the per-scrape families looked at every second, no scrape, no render.
        scrape(ports_of["child"], PROMETHEUS_ACCEPT, True)
        c_parent, c_child, t_idle = child.publish_cpu, child_cpu(child), time.monotonic()
        time.sleep(a.idle_seconds)
        t_idle = time.monotonic() - t_idle
        idle = {"parent": (child.publish_cpu - c_parent) / t_idle, "child": (child_cpu(child) - c_child) / t_idle}
        print("hand-off CPU at rest, per second", idle)
        # phase, kind, the daemon's hand-off s/s, the child's s a scrape, the floor's s a scrape
        handoff: list[tuple[str, str, float, float, float]] = []
        stop = threading.Event()
        scans: list[float] = []

        def scanning() -> None:
            while not stop.is_set():
                t = time.perf_counter()
                ing.scan()
                scans.append(time.perf_counter() - t)
                expo.changed()  # as the daemon does after each scan (no render: nothing changed)

        try:
            body = scrape(new_port, PROMETHEUS_ACCEPT, True)[1]
            samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
            size = len(body)
            for kind, (accept, gz) in KINDS.items():
                floors[kind] = floor_server(raw(new_port, accept, gz), Path(tmp))
            for phase in ("idle", "during back-to-back scans"):
                scanner = threading.Thread(target=scanning) if phase != "idle" else None
                if scanner is not None:
                    scanner.start()
                for kind, (accept, gz) in KINDS.items():
                    ports = ports_of | {"floor": floors[kind][1]}
                    c_parent, c_child, t_phase = child.publish_cpu, child_cpu(child), time.monotonic()
                    c_floor = cpu_of(floors[kind][0].pid)
                    times = scrapes_from_another_process(ports, accept, gz, a.scrapes)
                    t_phase = time.monotonic() - t_phase
                    handoff.append(
                        (
                            phase,
                            kind,
                            (child.publish_cpu - c_parent) / t_phase,
                            (child_cpu(child) - c_child) / a.scrapes,
                            (cpu_of(floors[kind][0].pid) - c_floor) / a.scrapes,
                        )
                    )
                    rows.append((phase, kind, times))
                    print(
                        phase, kind, {k: f"{q(v, 0.5) * 1e3:.1f}/{q(v, 0.99) * 1e3:.1f} ms" for k, v in times.items()}
                    )
                if scanner is not None:
                    stop.set()
                    scanner.join(600)
        finally:
            stop.set()
            for srv in servers.values():
                srv.close()
            restarts = child.restarts
            child.close()
            for fp, _ in floors.values():
                fp.kill()
                fp.wait()
            expo.stop()
            heap.close()
    load = os.getloadavg()
    lines = [
        "# /metrics rendered once per change",
        "",
        f"`.venv/bin/python benchmarks/metrics_render.py --entries {a.entries} --scrapes {a.scrapes}"
        f"{' --no-old' if a.no_old else ''}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}: {os.cpu_count()} cores shared "
        f"with other work, load {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min) at the end.",
        "",
        f"A simulated factory of {a.entries} entries, 3 pilots each, scanned once ({first_scan:.1f} s); its "
        f"/metrics is {samples:,} samples, {size / 1e6:.2f} MB of text. "
        + ("The" if a.no_old else "The old app (every family built under the ingest lock on each scrape) and the")
        + " new one (the ledger rendered once per change, "
        f"first render {first_render * 1e3:,.0f} ms, {expo.renders} render(s) in all) "
        + ("serves the Ingest" if a.no_old else "serve the same Ingest in one process, each")
        + ' behind the daemon\'s MetricsServer in this process; "child": the new one as the daemon serves it, '
        "from outputs/serve.py's process of its own (the renders and per-scrape families handed to it "
        f'through files; {restarts} restart(s)); "floor": the new one\'s answer, the same '
        "bytes, from a minimal "
        "server in a process of its own (what the shared machine gives any server then). Scrapes "
        "alternate between them, one at a time, from a client process of its own, timed from connect to "
        'the last byte. "During scans": the daemon\'s scan of the same tree (its checkpoint written at '
        f"each of its steps; the heap frozen after the first scan, as the daemon does) runs back to back in "
        f"a thread ({len(scans)} scans, median "
        f"{statistics.median(scans) if scans else 0:.2f} s).",
        "",
        "| phase | scrape | server | p50 | p99 | max |",
        "|---|---|---|---|---|---|",
    ]
    for phase, kind, times in rows:
        for name, ts in times.items():
            lines.append(
                f"| {phase} | {kind} | {name} | {q(ts, 0.5) * 1e3:,.1f} ms | {q(ts, 0.99) * 1e3:,.1f} ms | "
                f"{max(ts) * 1e3:,.1f} ms |"
            )
    wh, ch = costs["whole"], costs["changed"]
    lines += [
        "",
        f"Render after one pilot's change (a pool's CPU, pilots, lifetime and last pilot rows), CPU "
        f"(process time), {a.renders} of each, alternating: the whole ledger encoded, text and OpenMetrics "
        f"and the OpenMetrics gzipped, as a render was before it encoded only what changed: median "
        f"{statistics.median(wh) * 1e3:,.1f} ms (max {max(wh) * 1e3:,.1f}); `Exposition.refresh` now, "
        f"{statistics.median(costs['units']):.0f} rows encoded (OpenMetrics alone: the text is rendered with "
        "every change only while scraped) and the gzip members of the "
        f"chunks they are in: median {statistics.median(ch) * 1e3:,.1f} ms (max {max(ch) * 1e3:,.1f}), "
        f"{statistics.median(wh) / statistics.median(ch):,.0f}x less.",
    ]
    pub = costs["publish"]
    lines += [
        "",
        "The hand-off to the child, CPU (the daemon's side: ServingChild.publish_cpu, thread time; the child's: "
        "its utime + stime, in clock ticks of 10 ms, so a per-scrape figure is over the phase's scrapes): "
        f"publishing a render (the OpenMetrics gzip members joined and written) median "
        f"{statistics.median(pub) * 1e3:,.2f} ms (max {max(pub) * 1e3:,.2f}), in the render's figure above; "
        f"at rest (no scrape, no render, {a.idle_seconds:g} s) the daemon {idle['parent'] * 1e3:,.3f} ms "
        f"and the child {idle['child'] * 1e3:,.3f} ms of CPU a second.",
        "",
        "| phase | scrape | daemon's hand-off, CPU a second | child, CPU a scrape | floor, CPU a scrape |",
        "|---|---|---|---|---|",
    ]
    for phase, kind, parent_rate, per_scrape, floor_cpu in handoff:
        lines.append(
            f"| {phase} | {kind} | {parent_rate * 1e3:,.3f} ms | {per_scrape * 1e3:,.2f} ms | "
            f"{floor_cpu * 1e3:,.2f} ms |"
        )
    lines += [
        "",
        f"p99 of {a.scrapes} scrapes is their largest but one or the largest (nearest rank). The aim of issue 34: "
        "/metrics at 500 entries served in <= 20 ms (p99), also during a scan.",
        "",
    ]
    old_text = a.out.read_text() if a.out.exists() else ""
    kept = old_text[old_text.index("\n## ") :] if "\n## " in old_text else ""  # the sections written by hand
    a.out.write_text("\n".join(lines) + kept)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
