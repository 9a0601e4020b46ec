"""The labels of a simulated tree's anomalies: ``<out>/anomalies.json``, so detection can be measured.

``simulate(..., anomalies=True)`` writes it beside client/, server/ and
monitor/ (the exporter reads only those). One label per anomalous entry and
kind, in entry order::

    {
      "version": 1,
      "seed": 5, "start": 1781000000, "end": 1781604800, "snapshot": 1781615600,
      "kinds": ["black_hole", "slow_script", "resource_hog", "drift", "held", "ce_unreachable", "queue_slow",
                "submit_failing"],
      "not_simulated": {"leak": "<why>"},
      "anomalies": [
        {"kind": "black_hole", "entry": "OSG_US_BLACKHOLE_ce", "site": "BlackHoleSite", "unit": "pilot",
         "params": {"share": 0.8}, "pilots": ["10176601.0", ...]},
        {"kind": "slow_script", "entry": ..., "site": ..., "unit": "pilot",
         "params": {"script": "main/cvmfs_setup.sh", "factor": 6.0}, "pilots": [...]},
        {"kind": "resource_hog", "entry": ..., "site": ..., "unit": "job",
         "params": {"share": 0.3, "memory_factor": [1.5, 3.0], "cpu_factor": [1.6, 3.0]},
         "jobs": [{"pilot": "10176650.2", "global_job_id": "vocms0253.cern.ch#123.0#1781003600",
                   "memory": true, "cpu": false, "request_memory_mb": 4000, "memory_usage_mb": 9100,
                   "request_cpus": 2, "wall_seconds": 5400, "cpu_seconds": 8000}, ...]},
        {"kind": "drift", "entry": ..., "site": ..., "unit": "entry",
         "params": {"validation_failure_start": 0.02, "validation_failure_end": 0.62}},
        {"kind": "held", "entry": "OSG_US_AUTHFAIL_ce", ..., "unit": "entry",
         "params": {"share": 0.9, "class": "auth_failed"}},
        {"kind": "ce_unreachable", ..., "unit": "entry", "params": {"down": 1781302400, "up": 1781306000}},
        {"kind": "queue_slow", ..., "unit": "entry", "params": {"factor": 8.0, "since": 1781086400}},
        {"kind": "submit_failing", "entry": "OSG_US_AUTHFAIL_ce", ..., "unit": "entry", "params": {"share": 0.35}}
      ]
    }

``unit`` is what a detector is scored on: ``entry`` (the label is the entry),
``pilot`` (``pilots``: "cluster.proc" of every pilot that shows it, i.e. whose
.out/.err is in the tree: a black-hole pilot that ran jobs, a pilot that ran
the slow script) or ``job`` (``jobs``: every hog job whose ad is in the tree).
The other pilots and jobs of a labelled entry are the negatives.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..catalogue import HoldClass
from .plan import SimPilot, script_times
from .scenario import CLIENTS, EntrySpec, outage
from .usage import HOG_CPU, HOG_MEMORY

FILE = "anomalies.json"
VERSION = 1
KINDS = ("black_hole", "slow_script", "resource_hog", "drift", "held", "ce_unreachable", "queue_slow", "submit_failing")
NOT_SIMULATED = {
    "leak": (
        "a pilot's own memory over its life is in no file the factory gets back: the .err returns job ads "
        "with one peak MemoryUsage each and daemon logs without memory samples (MonitorSelfResidentSetSize "
        "is in the VO collector's startd ad), so a leaking pilot is not observable from this tree"
    )
}


def _kinds(spec: EntrySpec) -> list[str]:
    kinds = []
    if spec.blackhole:
        kinds.append("black_hole")
    if spec.slow_script:
        kinds.append("slow_script")
    if spec.hog:
        kinds.append("resource_hog")
    if spec.drift:
        kinds.append("drift")
    if spec.refuse:
        kinds.append("held")
    if spec.ce_down_hours:
        kinds.append("ce_unreachable")
    if spec.queue_slow != 1.0:
        kinds.append("queue_slow")
    if spec.submit_fail:
        kinds.append("submit_failing")
    return kinds


class Labels:
    """Collects, pilot by pilot, what each anomalous entry's label lists; renders anomalies.json."""

    def __init__(self, entries: Sequence[EntrySpec], seed: int, start: int, end: int, snapshot: int) -> None:
        self.head: dict[str, Any] = {"version": VERSION, "seed": seed, "start": start, "end": end}
        self.head["snapshot"] = snapshot
        self.labels: dict[tuple[str, str], dict[str, Any]] = {}
        for spec in entries:
            for kind in _kinds(spec):
                self.labels[spec.name, kind] = {
                    "kind": kind,
                    "entry": spec.name,
                    "site": spec.site,
                    **_unit_and_params(spec, kind, start, end - start, snapshot),
                }

    def pilot(self, p: SimPilot, spec: EntrySpec) -> None:
        """Label what the pilot shows (call once its files are written, before its jobs are dropped)."""
        if not p.has_out:
            return
        pid = f"{p.cluster}.{p.proc}"
        if spec.blackhole and p.blackhole and p.jobs:
            self.labels[spec.name, "black_hole"]["pilots"].append(pid)
        if spec.slow_script and p.slow_script and any(n == p.slow_script for n, _, _ in script_times(p)):
            self.labels[spec.name, "slow_script"]["pilots"].append(pid)
        if spec.hog:
            submit_host = next(CLIENTS[k].submit_host for k in spec.clients if CLIENTS[k].log_name == p.client)
            for j in p.jobs:
                if j.usage is None or not j.usage.hog:
                    continue
                end = j.end if j.end is not None else p.condor_end
                assert end is not None
                self.labels[spec.name, "resource_hog"]["jobs"].append(
                    {
                        "pilot": pid,
                        # as the ad's GlobalJobId (glidein_err.startd_history)
                        "global_job_id": f"{submit_host}#{j.cluster}.{j.proc}#{j.start - 3600}",
                        "memory": j.usage.hog_memory,
                        "cpu": j.usage.hog_cpu,
                        "request_memory_mb": j.memory_mb,
                        "memory_usage_mb": j.usage.memory_mb,
                        "request_cpus": j.cpus,
                        "wall_seconds": end - j.start,
                        "cpu_seconds": j.usage.user_cpu + j.usage.sys_cpu,
                    }
                )

    def count(self) -> dict[str, int]:
        """Labels per kind (for the summary)."""
        out: dict[str, int] = {}
        for kind in (k for _, k in self.labels):
            out[kind] = out.get(kind, 0) + 1
        return out

    def render(self) -> bytes:
        doc = {
            **self.head,
            "kinds": list(KINDS),
            "not_simulated": NOT_SIMULATED,
            "anomalies": list(self.labels.values()),
        }
        return (json.dumps(doc, indent=1) + "\n").encode()


def _unit_and_params(spec: EntrySpec, kind: str, start: int, span: int, snapshot: int) -> dict[str, Any]:
    if kind == "black_hole":
        return {"unit": "pilot", "params": {"share": spec.blackhole}, "pilots": []}
    if kind == "slow_script":
        return {
            "unit": "pilot",
            "params": {"script": spec.slow_script, "factor": spec.slow_script_factor},
            "pilots": [],
        }
    if kind == "resource_hog":
        params = {"share": spec.hog, "memory_factor": list(HOG_MEMORY), "cpu_factor": list(HOG_CPU)}
        return {"unit": "job", "params": params, "jobs": []}
    if kind == "submit_failing":  # condor_submit refused a share of the submissions (the entry's log)
        return {"unit": "entry", "params": {"share": spec.submit_fail}}
    if kind == "held":  # the CE refuses the factory's credentials: holds of class auth_failed
        return {"unit": "entry", "params": {"share": spec.refuse, "class": HoldClass.AUTH_FAILED.value}}
    if kind == "ce_unreachable":  # the gridmanager's 026 ... 025
        down, up = outage(spec, snapshot)
        return {"unit": "entry", "params": {"down": down, "up": up}}
    if kind == "queue_slow":
        since = start + int(span * spec.queue_slow_from)
        return {"unit": "entry", "params": {"factor": spec.queue_slow, "since": since}}
    assert kind == "drift"
    end = spec.validation_failure + spec.drift
    return {
        "unit": "entry",
        "params": {"validation_failure_start": spec.validation_failure, "validation_failure_end": round(end, 6)},
    }
