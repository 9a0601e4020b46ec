"""Many factories, one view: three simulated factories behind a real Thanos (issue 13).

Factories A and B each run one Prometheus; C runs an HA pair (replicas a and b,
both scraping C's exporter). Each Prometheus has a sidecar shipping to one
FILESYSTEM bucket, and two days of each factory's history were backfilled into
its data dir (``gwms-obs report --format openmetrics`` + promtool) before it
started. The global query fans out to the four sidecars and the store gateway.
Checked: the global per-frontend accounting equals the sum of the three
factories' ``report``s, live and back in history; C's pair counts once; the
history is served from the bucket by the store gateway; the compactor compacts
and downsamples the backfilled blocks; and with one factory's Prometheus
stopped, the query answers with the others and names the store it missed.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gwms_obs import catalogue
from gwms_obs.simulate.factory import simulate
from tests.support import thanos_stack as T
from tools.glideinwms_rrd_fixtures import CLIENT as RRD_CLIENT
from tools.glideinwms_rrd_fixtures import ENTRY as RRD_ENTRY
from tools.polling import http_get
from tools.polling import poll as wait_for

_why = T.unavailable()
pytestmark = [pytest.mark.live, pytest.mark.skipif(_why is not None, reason=f"Thanos stack: {_why}")]

PILOTS = 240
SPAN_HOURS = 30.0  # pilots submitted over this, ending well before now: history, not head
STEP = 600.0  # seconds between history samples
FACTORIES = {"factory-a": ("0",), "factory-b": ("0",), "factory-c": ("a", "b")}
CPU = catalogue.CPU_SECONDS.name
CLIENT = "client"
RRD_FIXTURES = Path(__file__).parent / "fixtures" / "glideinwms_rrd"


def report(tree: Path, until: float | None = None) -> dict[str, float]:
    """CPU unit-seconds per frontend from `gwms-obs report --format json`, as users run it."""
    cmd = [sys.executable, "-m", "gwms_obs.cli", "report", "--factory-dir", str(tree), "--format", "json"]
    if until is not None:
        cmd += ["--until", f"{until:.3f}"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300).stdout
    per: dict[str, float] = defaultdict(float)
    for row in json.loads(out)["rows"]:
        if row["resource"] == "cpu":
            per[row["client"]] += float(row["seconds"])
    return dict(per)


def summed(*reports: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for r in reports:
        for k, v in r.items():
            out[k] += v
    return dict(out)


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> dict[str, T.FactorySpec]:
    base = tmp_path_factory.mktemp("factories")
    # Submissions end 3 h before the simulated snapshot, which is an hour ago: pilots end in the past.
    start = time.time() - (SPAN_HOURS + 4) * 3600
    specs = {}
    for i, (name, replicas) in enumerate(FACTORIES.items()):
        tree = base / name
        simulate(tree, PILOTS, seed=70 + i, start=start, span_hours=SPAN_HOURS)
        history = T.write_history(tree, base / f"{name}.om", STEP)
        specs[name] = T.FactorySpec(name, tree, replicas, history)
    return specs


@pytest.fixture(scope="module")
def stack(trees: dict[str, T.FactorySpec], tmp_path_factory: pytest.TempPathFactory) -> Iterator[T.ThanosStack]:
    with T.thanos_stack(tmp_path_factory.mktemp("thanos"), list(trees.values())) as s:
        # every replica has scraped its exporter: then a global sum is whole
        replicas = sum(len(spec.replicas) for spec in trees.values())
        wait_for(
            f"all {replicas} Prometheus in the global view",
            lambda: len(s.query_api(f"count by (factory, replica) ({CPU})", dedup=False)["data"]["result"]) == replicas,
            60,
            0.5,
        )
        yield s


@pytest.fixture(scope="module")
def reports(trees: dict[str, T.FactorySpec]) -> dict[str, dict[str, float]]:
    return {name: report(spec.tree) for name, spec in trees.items()}


def test_global_accounting_is_the_sum_of_the_factories_reports(
    stack: T.ThanosStack, reports: dict[str, dict[str, float]]
) -> None:
    want = summed(*reports.values())
    expr = f"sum by ({CLIENT}) ({CPU})"
    got = stack.by(CLIENT, expr)
    assert got == pytest.approx(want, rel=1e-9)
    assert len(want) >= 3  # several frontends, shared by the factories
    per_factory = stack.by(catalogue.FACTORY_LABEL, f"sum by (factory) ({CPU})")
    for name, rep in reports.items():
        assert per_factory[name] == pytest.approx(sum(rep.values()), rel=1e-9)


def test_the_ha_pair_counts_once(stack: T.ThanosStack, reports: dict[str, dict[str, float]]) -> None:
    expr = f"sum by ({CLIENT}) ({CPU})"
    replicas = stack.by(catalogue.REPLICA_LABEL, f'count by (replica) ({CPU}{{factory="factory-c"}})', dedup=False)
    assert set(replicas) == {"a", "b"}, "both of C's Prometheus answer"
    raw = stack.by(CLIENT, expr, dedup=False)
    assert raw == pytest.approx(
        summed(reports["factory-a"], reports["factory-b"], reports["factory-c"], reports["factory-c"]), rel=1e-9
    )
    assert stack.by(CLIENT, expr) == pytest.approx(summed(*reports.values()), rel=1e-9)


def test_history_comes_back_from_the_bucket_through_the_store_gateway(
    stack: T.ThanosStack, trees: dict[str, T.FactorySpec]
) -> None:
    ended = [T.history_end(spec.history) for spec in trees.values() if spec.history]
    at = min(ended) - 6 * 3600  # inside every factory's history, far from the head
    at -= at % STEP
    want = summed(*(report(spec.tree, until=at + 0.5) for spec in trees.values()))
    assert sum(want.values()) > 0

    # each replica's backfilled blocks shipped by its sidecar, then loaded by the store gateway
    def shipped() -> bool:
        labels = {
            (b["thanos"]["labels"].get("factory"), b["thanos"]["labels"].get("replica")) for b in stack.bucket_blocks()
        }
        return labels >= {(r.factory, r.replica) for r in stack.replicas}

    wait_for("every sidecar's upload", shipped, 120, 0.5)
    blocks = len(stack.bucket_blocks())
    wait_for(
        "the store gateway to load the bucket",
        lambda: (
            T.metric_value(http_get(f"{stack.store_http}/metrics").decode(), "thanos_bucket_store_blocks_loaded")
            >= blocks
        ),
        120,
        0.5,
    )
    store_only = {"storeMatch[]": f'{{__address__="{stack.store_grpc}"}}'}
    got = stack.by(CLIENT, f"sum by ({CLIENT}) ({CPU})", time=at, **store_only)
    assert got == pytest.approx(want, rel=1e-9)
    assert stack.by(CLIENT, f"sum by ({CLIENT}) ({CPU})", time=at) == pytest.approx(want, rel=1e-9)


def test_the_compactor_compacts_and_downsamples_the_backfilled_blocks(stack: T.ThanosStack, tmp_path: Path) -> None:
    before = stack.bucket_blocks()
    assert before and all(b["compaction"]["level"] == 1 for b in before)
    with stack.compactor(tmp_path / "compact.log") as url:
        wait_for(
            "a compaction",
            lambda: T.metric_value(http_get(f"{url}/metrics").decode(), "thanos_compact_group_compactions_total") > 0,
            180,
            0.5,
        )
        wait_for(
            "the first pass to end",
            lambda: T.metric_value(http_get(f"{url}/metrics").decode(), "thanos_compact_iterations_total") >= 1,
            300,
            0.5,
        )
    after = stack.bucket_blocks()
    compacted = [b for b in after if b["compaction"]["level"] > 1]
    assert compacted, "no block above level 1"
    assert max(len(b["compaction"]["sources"]) for b in compacted) >= 4
    # the HA pair's blocks stay one group per replica (the query, not the compactor, dedups them)
    groups = {tuple(sorted(b["thanos"]["labels"].items())) for b in after}
    assert len(groups) == 4


def test_imported_rrd_history_and_the_live_exporter_meet_at_the_cutover(
    stack: T.ThanosStack, trees: dict[str, T.FactorySpec], tmp_path: Path
) -> None:
    """issue 35: GlideinWMS's RRD history of an entry, imported with ``--cutover`` at the instant the
    factory's Prometheus first scraped it, shipped by the sidecar and served by the store gateway,
    continues the live series through the global query: every sample before the cutover is the
    RRD's, every one from it on the exporter's, none of both, and no lookback without a sample.

    The RRD has GlideinWMS's layout (rrdtool create --template of the fixture GlideinWMS wrote)
    and is updated here by rrdtool, at times before the cutover; the import's values against what
    GlideinWMS's own writer was fed are tests/test_import_rrd.py's. The site label comes from the
    factory's descript.xml, as the exporter's does (no --site); job and instance are the scrape's,
    so history and live data are one series.
    """
    rep = stack.replica("factory-a")
    held = f'{catalogue.ENTRY_GLIDEINS.name}{{state="held"}}'
    live = json.loads(http_get(f"{rep.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": f"{held}[1d]"})))
    series = live["data"]["result"][0]
    labels = {k: series["metric"][k] for k in ("entry", "client", "site", "job", "instance")}
    cutover = float(series["values"][0][0])  # the first live sample: Prometheus's start for this series
    live_value = float(series["values"][-1][1])

    monitor = tmp_path / "monitor"
    shutil.copytree(trees["factory-a"].tree / "monitor", monitor)  # descript.xml and all
    rrd = monitor / f"entry_{labels['entry']}" / f"frontend_{labels['client']}" / "Status_Attributes.rrd"
    rrd.parent.mkdir(parents=True)
    template = RRD_FIXTURES / f"entry_{RRD_ENTRY}" / f"frontend_{RRD_CLIENT}" / "Status_Attributes.rrd"
    last = int(cutover // 300) * 300  # the last 5-minute update before the cutover (or at it: left out)
    if last >= cutover:
        last -= 300
    updates = [last - 300 * k for k in range(3 * 288, -1, -1)]  # three days of them
    subprocess.run(
        ["rrdtool", "create", str(rrd), "--start", str(updates[0] - 300), "--template", str(template)],
        check=True,
        timeout=60,
    )
    ds = subprocess.run(["rrdtool", "info", str(rrd)], check=True, capture_output=True, text=True, timeout=60).stdout
    names = sorted({line.split("[", 1)[1].split("]", 1)[0] for line in ds.splitlines() if line.startswith("ds[")})
    fed = {t: 1000 + k % 97 for k, t in enumerate(updates)}  # StatusHeld; the rest 0
    for i in range(0, len(updates), 200):
        subprocess.run(
            ["rrdtool", "update", str(rrd), "--template", ":".join(names)]
            + [
                f"{t}:" + ":".join(str(fed[t]) if n == "StatusHeld" else "0" for n in names)
                for t in updates[i : i + 200]
            ],
            check=True,
            timeout=60,
        )
    om = tmp_path / "rrd.om"
    cmd = [
        sys.executable,
        "-m",
        "gwms_obs.cli",
        "import-rrd",
        str(monitor),
        "--cutover",
        f"{cutover:.3f}",
        *("--job", labels["job"], "--instance", labels["instance"]),  # the test's scrape target, not the role's
        "-o",
        str(om),
    ]
    subprocess.run(cmd, check=True, timeout=300)
    # The blocks into a scratch dir, uploaded with the factory Prometheus's external labels, as
    # docs/migration.md says: written into Prometheus's own data dir, blocks overlapping its others
    # (here, the report history backfilled there) are compacted with them by Prometheus, and the
    # sidecar ships no compacted block.
    blocks = tmp_path / "blocks"
    T.backfill(om, blocks, max_block="4374h", timeout=300)
    made = {d.name for d in blocks.iterdir() if (d / "meta.json").is_file()}
    external = [f'--label={catalogue.FACTORY_LABEL}="factory-a"', f'--label={catalogue.REPLICA_LABEL}="{rep.replica}"']
    upload = [str(T.thanos_binary()), "tools", "bucket", "upload-blocks", f"--path={blocks}", *external]
    r = subprocess.run(
        [*upload, f"--objstore.config-file={stack.etc / 'objstore.yml'}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert made and made <= {b["ulid"] for b in stack.bucket_blocks()}

    sel = held[:-1] + "".join(f',{k}="{v}"' for k, v in labels.items()) + "}"
    at = cutover + 60

    def samples(time: float, **kw: Any) -> list[tuple[float, float]]:
        res = stack.query_api(f"{sel}[2h]", time=time, **kw)["data"]["result"]
        return [(float(t), float(v)) for t, v in res[0]["values"]] if len(res) == 1 else []

    # The history from the bucket, by the store gateway alone; then through the global query, with
    # the live data beside it.
    store_only = {"storeMatch[]": f'{{__address__="{stack.store_grpc}"}}'}
    # A lookback's window before the cutover: the query asks a store only for times it has said it
    # holds, and it learns the store's new time range on its next look (a wider window answers sooner).
    wait_for(
        "the imported history's last samples from the store gateway",
        lambda: stack.query_api(sel, time=cutover - 1, **store_only)["data"]["result"],
        120,
        0.5,
    )
    pts = samples(at)
    old = [(t, v) for t, v in pts if t < cutover]
    new = [(t, v) for t, v in pts if t >= cutover]
    # Before the cutover: the RRD's 5-minute rows, each once, with what was fed; no live sample.
    assert old == [(float(t), float(fed[t])) for t in updates if t > at - 7200]
    # From it on: the exporter's, every scrape, none of the RRD's.
    assert new and new[0][0] == cutover and all(v == live_value for _, v in new)
    assert max(b[0] - a[0] for a, b in itertools.pairwise(pts)) <= 300  # within the 5-minute lookback
    # Instant queries every 10 s across the cutover: always one answer, the RRD's then the exporter's.
    for t in range(int(cutover) - 900, int(at), 10):
        res = stack.query_api(sel, time=float(t))["data"]["result"]
        assert len(res) == 1, (t - cutover, [p for p in pts if abs(p[0] - t) < 400])
        want = live_value if t >= cutover else float(fed[max(u for u in updates if u <= t)])
        assert float(res[0]["value"][1]) == want, t


def test_a_stopped_prometheus_leaves_the_others_answering_and_is_named(
    stack: T.ThanosStack, reports: dict[str, dict[str, float]]
) -> None:
    gone = stack.stop_prometheus("factory-b")
    expr = f"sum by ({CLIENT}) ({CPU})"
    want = summed(reports["factory-a"], reports["factory-c"])

    def answered_without_b() -> dict[str, Any] | None:
        doc = stack.query_api(expr, partial_response="true")
        got = {r["metric"].get(CLIENT, ""): float(r["value"][1]) for r in doc["data"]["result"]}
        return doc if got == pytest.approx(want, rel=1e-9) and doc.get("warnings") else None

    doc = wait_for("an answer from the other factories, with a warning", answered_without_b, 60, 0.5)
    assert any(gone.sidecar_grpc in w or "factory-b" in w for w in doc["warnings"]), doc["warnings"]
    with pytest.raises((ValueError, OSError)):  # an error answer, not a partial one
        stack.query_api(expr, partial_response="false")
