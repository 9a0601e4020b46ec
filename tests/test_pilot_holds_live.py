"""A glidein's holds and eviction, from the factory's event log, reach Jaeger through our collector
(both real, on 127.0.0.1) as its trace's held spans and evicted event, codes and class included.

A simulated factory, one of whose lost pilots (no .out: counted from the event log, which gives it
its queue) gets two holds in the CE's queue and an eviction while it ran, written into its event
log as HTCondor writes them; then `gwms-obs export --once`.
Needs `make otelcol jaeger` (skipped, with the reason, without them).
"""

from __future__ import annotations

import calendar
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gwms_obs.outputs import pilot_traces as P
from gwms_obs.simulate.factory import simulate
from gwms_obs.simulate.formats import eventlog_time
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import jaeger as J
from tests.support.trace_stack import stack
from tools.polling import poll

# The HTCondor-C GAHP's words for a CE that refused the factory's token, then could not be reached
# (src/condor_c-gahp/schedd_client.cpp, CondorError codes of condor_error_codes.h); the gridmanager
# holds with code 0 (BaseJob::JobHeld), JobHeldEvent::formatBody writes the codes line.
AUTH = "Error connecting to schedd {gk}: AUTHENTICATE:1003:Failed to authenticate with any method"
DOWN = "Error connecting to schedd {gk}: CEDAR:6001:Failed to connect to <{gk}:9619>"
_HEAD = re.compile(r"^(\d{3}) \((\d+)\.(\d+)\.\d+\) (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", re.M)


def _event(code: str, cluster: int, proc: int, t: int, body: str) -> str:
    return f"{code} ({cluster}.{proc:03d}.000) {eventlog_time(t, False)} {body}...\n"


def _add_holds(factory: Path) -> tuple[str, tuple[int, int], dict[str, int]]:
    """Into the first modern-format log with a lost pilot (it ran, no .out): two
    holds (each released) between its grid submit and execute, an eviction while it ran. Returns
    its entry, (cluster, proc) and the times written."""
    for log in sorted(factory.glob("client/*/*/entry_*/condor_activity_*.log")):
        text = log.read_text()
        times: dict[tuple[int, int, str], int] = {}
        for m in _HEAD.finditer(text):
            t = calendar.timegm(time.strptime(m.group(4), "%Y-%m-%d %H:%M:%S"))  # the simulator writes UTC
            times.setdefault((int(m.group(2)), int(m.group(3)), m.group(1)), t)
        for (cluster, proc, code), g in times.items():
            x = times.get((cluster, proc, "001"))
            ends = [e for c in ("005", "009", "012") if (e := times.get((cluster, proc, c))) is not None]
            if code != "027" or x is None or not ends or x - g < 10 or min(ends) - x < 2:
                continue
            if (log.parent / f"job.{cluster}.{proc}.out").exists():
                continue
            end = min(ends)
            job = f"({cluster}.{proc:03d}."
            gk = re.search(r"GridResource: condor (\S+)", text[text.index(f"027 {job}") :])
            assert gk is not None
            q = x - g
            w = {"held1": g + q // 5, "rel1": g + 2 * q // 5, "held2": g + 3 * q // 5, "rel2": g + 4 * q // 5}
            w["evicted"] = (x + end) // 2
            held = "Job was held.\n\t{}\n\tCode 0 Subcode 0\n"
            released = "Job was released.\n\tvia condor_release (by user fe)\n"
            holds = (
                _event("012", cluster, proc, w["held1"], held.format(AUTH.format(gk=gk[1])))
                + _event("013", cluster, proc, w["rel1"], released)
                + _event("012", cluster, proc, w["held2"], held.format(DOWN.format(gk=gk[1])))
                + _event("013", cluster, proc, w["rel2"], released)
            )
            evict = _event(
                "004",
                cluster,
                proc,
                w["evicted"],
                "Job was evicted.\n\t(0) CPU times\n\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Remote Usage\n"
                "\t\tUsr 0 00:00:00, Sys 0 00:00:00  -  Run Local Usage\n"
                "\t0  -  Run Bytes Sent By Job\n\t0  -  Run Bytes Received By Job\n",
            )
            after = text.index("...\n", text.index(f"027 {job}")) + 4
            text = text[:after] + holds + text[after:]
            after = text.index("...\n", text.index(f"001 {job}")) + 4
            log.write_text(text[:after] + evict + text[after:])
            return log.parent.name.removeprefix("entry_"), (cluster, proc), w
    raise AssertionError("no lost pilot in the simulated factory")


def _tags(kvs: list[dict[str, Any]]) -> dict[str, Any]:
    return {x["key"]: x["value"] for x in kvs}


def _job(trace: dict[str, Any], span: dict[str, Any]) -> tuple[int, int] | None:
    tags = _tags(trace["processes"][span["processID"]]["tags"])
    if C.CONDOR_CLUSTER not in tags:
        return None
    return int(tags[C.CONDOR_CLUSTER]), int(tags[C.CONDOR_PROC])


def test_holds_and_eviction_reach_jaeger(tmp_path: Path) -> None:
    now = time.time()
    factory = tmp_path / "factory"
    simulate(factory, 30, seed=5, start=now - 4 * 86400, span_hours=24)
    entry, job, w = _add_holds(factory)
    with stack(tmp_path) as st:
        token = st.work / "token"
        token.write_text(st.col.token)
        ck = tmp_path / "checkpoint.json"
        cmd = [
            *(sys.executable, "-m", "gwms_obs.cli", "export", "--once", "--factory-dir", str(factory)),
            *("--checkpoint", str(ck), "--settle-seconds", "0", "--lost-after-seconds", "0"),
            *("--traces-endpoint", st.col.traces_url, "--traces-token-file", str(token)),
        ]
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        r = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=180, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        assert f"{entry}/{job[0]}.{job[1]}" in json.loads(ck.read_text())["seen"]

        def found() -> list[dict[str, Any]] | None:
            traces = J.search(
                st.jaeger.query,
                start=now - 10 * 86400,
                end=now + 86400,
                entry=entry,
                limit=1000,
            )
            mine = [t for t in traces if any(_job(t, s) == job for s in t["spans"])]
            held = [s for t in mine for s in t["spans"] if s["operationName"] == P.SPAN_HELD]
            return mine if len(held) == 2 else None

        (trace,) = poll("the pilot's held spans in Jaeger", found, 60, step=1.0)
    spans = {s["operationName"]: s for s in trace["spans"] if s["operationName"] != P.SPAN_HELD}
    queued, run = spans[P.SPAN_QUEUED], spans[P.SPAN_RUNNING]
    held = sorted((s for s in trace["spans"] if s["operationName"] == P.SPAN_HELD), key=lambda s: s["startTime"])
    want = ((("held1", "rel1"), "auth_failed"), (("held2", "rel2"), "ce_unreachable"))
    for h, ((a, b), cls) in zip(held, want, strict=True):
        assert [x["spanID"] for x in h["references"] if x["refType"] == "CHILD_OF"] == [queued["spanID"]]
        assert (h["startTime"], h["startTime"] + h["duration"]) == (w[a] * 1_000_000, w[b] * 1_000_000)  # us
        tags = _tags(h["tags"])
        assert (tags[P.HOLD_CLASS], tags[P.HOLD_CODE], tags[P.HOLD_SUBCODE], tags[C.PHASE]) == (cls, 0, 0, "held")
        assert tags[P.HOLD_REASON].startswith("Error connecting to schedd ")
    logs = [(_tags(x["fields"]).get("event"), x["timestamp"]) for x in run.get("logs", [])]
    assert (P.EVENT_EVICTED, w["evicted"] * 1_000_000) in logs
