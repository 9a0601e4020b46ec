"""What users expect of any Prometheus exporter: `<name>_build_info` and the process metrics.

`gwms-obs export` serves its own registry (not prometheus_client's global
one), so the standard `process_*`, `python_info` and `python_gc_*` series are
there only because it registers their collectors; these tests start the real
daemon and read its /metrics.
"""

from __future__ import annotations

import platform
import subprocess
import time
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

import gwms_obs
from gwms_obs import catalogue
from gwms_obs.outputs.prometheus import exporter_registry
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from gwms_obs.tracing.outbox import ForwarderStats
from tests.support.servers import export_command, first_scan_done, free_port, have, http_get, process, wait_for


def samples(text: str) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The daemon's /metrics after its first scan of a small simulated factory."""
    factory = tmp_path_factory.mktemp("factory")
    simulate(factory, 40, seed=5)
    work = tmp_path_factory.mktemp("exporter")
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    cmd = export_command(factory, port, work / "checkpoint.json", interval=3600, settle=0)

    def after_first_scan() -> bytes | None:
        body = http_get(url)
        return body if body and first_scan_done(body) else None

    with process(cmd, work / "exporter.log"):
        return wait_for("the first scan", after_first_scan, 120).decode()


@pytest.mark.live
def test_build_info_names_the_running_version(scraped: str) -> None:
    assert f"# TYPE {catalogue.BUILD_INFO.name} gauge" in scraped
    (s,) = samples(scraped)[catalogue.BUILD_INFO.name]
    assert s.value == 1
    # The daemon runs under this test's interpreter (export_command uses sys.executable).
    assert s.labels == {"version": gwms_obs.__version__, "python_version": platform.python_version()}


@pytest.mark.live
def test_process_and_python_runtime_metrics_are_served(scraped: str) -> None:
    got = samples(scraped)
    missing = [n for n in catalogue.RUNTIME_NAMES if n not in got]
    assert not missing, missing
    (cpu,) = got[catalogue.PROCESS_CPU_SECONDS]
    assert cpu.value > 0  # it simulated nothing but scanned a factory: some CPU was spent
    (rss,) = got[catalogue.PROCESS_RESIDENT_MEMORY]
    assert rss.value > 1 << 20
    (start,) = got[catalogue.PROCESS_START_TIME]
    assert time.time() - 600 < start.value <= time.time()
    (fds,) = got[catalogue.PROCESS_OPEN_FDS]
    assert fds.value >= 3
    (info,) = got[catalogue.PYTHON_INFO]
    assert info.labels["version"] == platform.python_version()
    assert {s.labels["generation"] for s in got[catalogue.PYTHON_GC_COLLECTIONS]} == {"0", "1", "2"}


@pytest.mark.live
@pytest.mark.skipif(not have("promtool"), reason="Debian prometheus not installed")
def test_promtool_accepts_the_whole_exposition(scraped: str) -> None:
    r = subprocess.run(
        ["promtool", "check", "metrics"], input=scraped.encode(), capture_output=True, timeout=60, check=False
    )
    assert r.returncode == 0 and not r.stdout.strip() and not r.stderr.strip(), (r.stdout, r.stderr)


def test_every_served_name_is_in_the_catalogue_or_a_runtime_name(tmp_path: Path) -> None:
    """Nothing reaches /metrics that the catalogue does not spell (ours) or name (prometheus_client's)."""
    simulate(tmp_path, 20, seed=3)
    ing = Ingest(IngestConfig(factory_dir=str(tmp_path), settle_seconds=0.0))
    ing.scan()
    text = generate_latest(exporter_registry(ing, ForwarderStats())).decode()
    ours = {n for m in catalogue.ALL for n in catalogue.exposition_names(m)}
    # prometheus_client adds _created to counters and histograms (and the runtime's counters).
    served = {n for n in samples(text) if not n.endswith("_created")}
    assert served - ours - set(catalogue.RUNTIME_NAMES) == set()
    assert set(catalogue.RUNTIME_NAMES) <= served
    assert catalogue.BUILD_INFO.name in served
