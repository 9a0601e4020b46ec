"""The exporter's own scans as spans, configured from OTEL_* through opentelemetry-distro.

`gwms-obs export --once` on a small simulated factory, with the OTEL_* variables naming
our real collector (in front of real Jaeger, 127.0.0.1): Jaeger then lists the service
gwms-obs-exporter with a `scan` span (pilots counted, files read, errors) whose children
are the steps of each source. Without the variables, or with OTEL_TRACES_EXPORTER=none,
the SDK is not configured at all.

Needs `make otelcol jaeger` (skipped, with the reason, without them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.outputs import self_trace as S
from gwms_obs.simulate.factory import simulate
from tests.support.trace_stack import stack
from tools.polling import poll

pytestmark = [pytest.mark.live, pytest.mark.slow]


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
    ],
)
def test_own_spans_only_where_the_otel_variables_ask_for_traces(env: dict[str, str], want: bool) -> None:
    assert S.wanted(env) is want


def _export(factory: Path, tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    cmd = [
        *(sys.executable, "-m", "gwms_obs.cli", "export", "--once", "--factory-dir", str(factory)),
        *("--settle-seconds", "0", "--lost-after-seconds", "0"),
    ]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=180, env={**clean, **env})


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_the_exporters_scans_are_spans_of_its_own_service_in_jaeger(tmp_path: Path) -> None:
    now = time.time()
    factory = tmp_path / "factory"
    simulate(factory, 20, seed=4, start=now - 2 * 86400, span_hours=12)
    with stack(tmp_path) as st:
        env = {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": st.col.traces_url,
            "GWMS_OBS_TRACES_TOKEN": st.col.token,  # the exporter's own credential, for its spans too
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test",
        }
        r = _export(factory, tmp_path / "a", env)
        assert r.returncode == 0, r.stderr[-3000:]
        assert "own spans: service gwms-obs-exporter" in r.stderr

        def scans() -> list[dict[str, Any]] | None:
            q = f"{st.jaeger.query}/api/traces?service={S.SERVICE}&operation={S.SPAN_SCAN}&limit=10"
            data = _get(q).get("data") or []
            return data or None

        (t,) = poll("the exporter's scan in Jaeger", scans, timeout=60, step=0.5)
        spans = {s["spanID"]: s for s in t["spans"]}
        (scan,) = (s for s in spans.values() if s["operationName"] == S.SPAN_SCAN)
        tags = {x["key"]: x["value"] for x in scan["tags"]}
        assert tags[S.PILOTS] > 0 and tags[S.FILES_READ] > 0 and tags[S.BYTES_READ] > 0 and S.ERRORS in tags
        process = {x["key"]: x["value"] for x in t["processes"][scan["processID"]]["tags"]}
        assert process["deployment.environment"] == "test" and "service.version" in process
        steps = [s for s in spans.values() if s is not scan]
        assert {s["references"][0]["spanID"] for s in steps} == {scan["spanID"]}  # each step is the scan's child
        names = {s["operationName"] for s in steps}
        assert {"glidein_out read", "condor_event_log read", "completed_jobs read"} <= names, names
        for s in steps:  # inside the scan
            assert scan["startTime"] <= s["startTime"] and s["startTime"] + s["duration"] <= (
                scan["startTime"] + scan["duration"]
            )

        # OTEL_TRACES_EXPORTER=none: the SDK is not configured (the pilots' traces still go to the forwarder).
        r = _export(factory, tmp_path / "b", {**env, "OTEL_TRACES_EXPORTER": "none"})
        assert r.returncode == 0 and "own spans" not in r.stderr
