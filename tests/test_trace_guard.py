"""The gwmsguard processor: its sources pinned in the manifest, its Go tests, the factory's ledger and tokens."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gwms_obs.tracing import conventions as C
from gwms_obs.tracing.credentials import ANY_TRACE, PilotSigner, generate_key, prune
from gwms_obs.tracing.factory import FactoryTracer, make_provider
from gwms_obs.tracing.ledger import LedgerIndex
from tests.support.traceparent import decode_unverified, parse_traceparent

ROOT = Path(__file__).resolve().parents[1]
GUARD = ROOT / "otel-collector" / "gwmsguardprocessor"


def guard_sources_sha256() -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in GUARD.iterdir() if p.is_file() and p.suffix in (".go", ".mod", ".sum")):
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def test_manifest_pins_the_processor_sources() -> None:
    """The Makefile names the binary by the manifest's hash only: a source change must change the manifest."""
    manifest = (ROOT / "otel-collector" / "builder-config.yaml").read_text()
    assert f"# gwmsguardprocessor sources sha256: {guard_sources_sha256()}" in manifest, (
        "otel-collector/gwmsguardprocessor changed: update its sha256 line in builder-config.yaml"
    )


@pytest.mark.slow
def test_processor_go_tests() -> None:
    if shutil.which("go") is None:
        pytest.skip("no Go toolchain")
    cache = Path(os.environ.get("GWMS_OBS_CACHE_DIR", Path.home() / ".cache" / "gwms-obs" / "v1"))
    env = {**os.environ, "GOMODCACHE": str(cache / "go" / "mod"), "GOCACHE": str(cache / "go" / "build"),
           "GOFLAGS": "-buildvcs=false -modcacherw"}  # fmt: skip
    # The processor's module, then configtest/, a module of its own (testdata/config.yaml through the factory,
    # metadata.yaml against it) that `./...` does not enter.
    for d in (GUARD, GUARD / "configtest"):
        r = subprocess.run(["go", "test", "./..."], cwd=d, env=env, capture_output=True, text=True, timeout=900,
                           check=False)  # fmt: skip
        assert r.returncode == 0, f"{d.name}: " + r.stdout[-3000:] + r.stderr[-3000:]
        assert "no test files" not in r.stdout, r.stdout


def test_processor_has_the_contrib_component_files() -> None:
    """metadata.yaml, README.md and testdata/config.yaml, as each opentelemetry-collector-contrib component
    (their Go test is in configtest/: a .go file here would change the manifest's pin and rename the binary)."""
    for f in ("metadata.yaml", "README.md", "testdata/config.yaml", "configtest/config_test.go"):
        assert (GUARD / f).is_file(), f


def test_factory_writes_ledger_and_per_glidein_token_files(tmp_path: Path) -> None:
    generate_key(tmp_path / "k.pem", tmp_path / "jwks.json")
    signer = PilotSigner(tmp_path / "k.pem", lifetime=3600)
    mem = InMemorySpanExporter()
    ft = FactoryTracer("OSG", "inst", make_provider("OSG", "inst", mem), signer=signer, token_dir=tmp_path / "tok")
    with ft.submit_cluster("Entry_A", "fe.main", 3, log_dir=str(tmp_path)) as sc:
        env = dict(e.split("=", 1) for e in sc.submit_env())
        sc.submitted(77, 2)  # one of three not queued
    tps = [parse_traceparent(t) for t in env[C.ENV_TRACEPARENT_LIST].split(",")]
    issued = LedgerIndex().lookup(tmp_path, 77, 1)
    assert issued is not None and tps[1] is not None
    assert issued.trace_id == tps[1].trace_id and issued.parent_span_id == tps[1].span_id
    assert issued.resource[C.ENTRY] == "Entry_A" and LedgerIndex().lookup(tmp_path, 77, 2) is None
    d = Path(env["GLIDEIN_TRACE_TOKEN_DIR"])
    tokens = [(d / str(i) / "gwms-trace.jwt").read_text().strip() for i in range(3)]
    assert len(set(tokens)) == 3  # not shared across pilots
    claims = decode_unverified(tokens[1])
    assert claims["gwms_trace_id"] == tps[1].trace_id and claims["gwms_entry"] == "Entry_A"
    assert 3500 <= claims["exp"] - time.time() <= 3600
    assert all(tok not in v for tok in tokens for v in env.values())  # files, never the environment
    assert (d / "1" / "gwms-trace.jwt").stat().st_mode & 0o777 == 0o600
    assert decode_unverified(signer.mint_service("exporter"))["gwms_trace_id"] == ANY_TRACE
    assert prune(tmp_path / "tok", time.time() + 7200) == 1 and not d.exists()  # expired tokens go
    ft.shutdown()
