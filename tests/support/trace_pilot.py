"""Run a glidein-like bash script that sources pilot/gwms-trace.sh, and read its spool.

The script has the shape of glidein_startup.sh (formats doc §6.3): phases
init, pre_setup, setup (validation scripts, really executed, one of them
failing when asked), main, cleanup, then gwms_trace_flush with the glidein's
exit code. Used by the unit tests, the live end-to-end tests and
benchmarks/trace_shell.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "pilot" / "gwms-trace.sh"

# How the library is forced onto its bash-4 paths on this bash 5.2 (no bash 4 binary here).
MODES: dict[str, dict[str, str]] = {
    "bash5": {},
    "bash4-uptime": {"GWMS_TRACE_COMPAT": "4"},
    "bash4-date": {"GWMS_TRACE_COMPAT": "4", "GWMS_TRACE_CLOCK": "date"},
}

SCRIPTS = ("main/setup_script.sh", "main/cat_consts.sh", "entry/check_os.sh", "main/validate_node.sh")

GLIDEIN = r"""
set -euo pipefail
source "$GWMS_TRACE_LIB"
gwms_trace_init "$PWD/spool.jsonl"
gwms_trace_resource gwms.glidein.uuid "$GLIDEIN_UUID"
gwms_trace_phase init
gwms_trace_event work_dir_created "path=$PWD"
gwms_trace_phase pre_setup
gwms_trace_attr -i gwms.files 4
gwms_trace_phase setup
rc=0
for s in $SCRIPTS; do
  if ! gwms_trace_script "$s" "./$s" glidein_config; then
    rc=1
    gwms_trace_event validation_error "script=$s"
    break
  fi
done
if ((rc)); then
  gwms_trace_phase_end 1
else
  gwms_trace_phase main
  gwms_trace_script condor_startup.sh true
fi
gwms_trace_phase cleanup
gwms_trace_phase_end 0
echo "payload-link $GWMS_PILOT_TRACEPARENT"
gwms_trace_flush "$rc"
echo "result $GWMS_TRACE_RESULT"
exit "$rc"
"""


@dataclass
class PilotRun:
    workdir: Path
    returncode: int
    stdout: str
    stderr: bytes
    spool: bytes

    def spans(self) -> list[dict[str, Any]]:
        return spool_spans(self.spool)

    def resources(self) -> list[dict[str, Any]]:
        return [attrs(rs.get("resource", {}).get("attributes", [])) for rs in _resource_spans(self.spool)]


def _resource_spans(spool: bytes) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line in spool.splitlines():
        if line.strip():
            out.extend(json.loads(line)["resourceSpans"])
    return out


def spool_spans(spool: bytes) -> list[dict[str, Any]]:
    return [s for rs in _resource_spans(spool) for ss in rs["scopeSpans"] for s in ss["spans"]]


def attrs(kvs: list[dict[str, Any]]) -> dict[str, Any]:
    """OTLP/JSON KeyValues as a plain dict (int64 strings as int)."""
    out: dict[str, Any] = {}
    for kv in kvs:
        ((t, v),) = kv["value"].items()
        out[kv["key"]] = int(v) if t == "intValue" else v
    return out


def write_scripts(workdir: Path, fail: str | None, fail_rc: int = 3) -> None:
    for name in SCRIPTS:
        p = workdir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        rc = fail_rc if name == fail else 0
        p.write_text(f"#!/bin/bash\necho running {name} >&2\nexit {rc}\n")
        p.chmod(0o755)


def run_pilot(
    workdir: Path,
    *,
    fail: str | None = "entry/check_os.sh",
    env: dict[str, str] | None = None,
    traceparent: str | None = None,
    uuid: str = "5f3c3a9e-1b2c-4d5e-8f90-a1b2c3d4e5f6",
    timeout: float = 60.0,
) -> PilotRun:
    workdir.mkdir(parents=True, exist_ok=True)
    write_scripts(workdir, fail)
    e = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "LANG": "C.UTF-8",
        "GWMS_TRACE_LIB": str(LIB),
        "GLIDEIN_UUID": uuid,
        "SCRIPTS": " ".join(SCRIPTS),
        "OTEL_RESOURCE_ATTRIBUTES": "gwms.factory=OSG,gwms.entry=CMSHTPC_T2_US_Nebraska_red,"
        "gwms.client=CMSG-v1_0.main-token,gwms.site=Nebraska,gwms.condor.cluster=10176598,gwms.condor.proc=3",
        **(env or {}),
    }
    if traceparent is not None:
        e["TRACEPARENT"] = traceparent
    p = subprocess.run(
        ["/bin/bash", "-c", GLIDEIN], cwd=workdir, env=e, capture_output=True, timeout=timeout, check=False
    )
    spool_path = workdir / "spool.jsonl"
    return PilotRun(
        workdir, p.returncode, p.stdout.decode(), p.stderr, spool_path.read_bytes() if spool_path.exists() else b""
    )
