"""One value per resource attribute, the user's configuration over what we detect.

OpenTelemetry: OTEL_RESOURCE_ATTRIBUTES is user configuration and
OTEL_SERVICE_NAME beats service.name in it. gwms-trace.sh detects host.name
and process.pid and defaults service.name to `glidein`; a key the user sets
is emitted once, with the user's value. The factory's service.name is a
default in the same way; the simulator's pilot spools have each key once.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources.glidein_err import parse_err
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing.factory import make_provider
from tests.support.trace_pilot import attrs
from tests.test_trace_shell import TP, bash

PILOT = 'gwms_trace_init "$PWD/s.jsonl"; {extra} _gt_frame() {{ return 1; }}; gwms_trace_flush 0'


def resource_kvs(spool: bytes) -> list[list[dict[str, Any]]]:
    """The raw KeyValue lists of every resource in a spool (duplicates and all)."""
    out = []
    for line in spool.splitlines():
        if line.strip():
            out += [rs["resource"]["attributes"] for rs in json.loads(line)["resourceSpans"]]
    return out


def pilot_resource(tmp_path: Path, env: dict[str, str], extra: str = "") -> dict[str, Any]:
    r = bash(PILOT.format(extra=extra), tmp_path, {"TRACEPARENT": TP, "HOSTNAME": "wn-17.example.edu", **env})
    assert r.returncode == 0, r.stderr
    (kvs,) = resource_kvs((tmp_path / "s.jsonl").read_bytes())
    dup = [k for k, n in Counter(kv["key"] for kv in kvs).items() if n > 1]
    assert not dup, f"resource keys emitted more than once: {dup}"
    return attrs(kvs)


def test_detected_values_without_configuration(tmp_path: Path) -> None:
    res = pilot_resource(tmp_path, {})
    assert res[C.HOST_NAME] == "wn-17.example.edu"
    assert res[C.SERVICE_NAME] == C.SERVICE_PILOT
    assert res[C.PROCESS_PID] > 0 and res[C.CONVENTIONS] == C.VERSION


def test_user_host_name_and_service_name_win_once(tmp_path: Path) -> None:
    res = pilot_resource(
        tmp_path, {"OTEL_RESOURCE_ATTRIBUTES": "host.name=login%2Dnode,service.name=my-glidein,gwms.site=X"}
    )
    assert res[C.HOST_NAME] == "login-node"  # %-decoded, over $HOSTNAME
    assert res[C.SERVICE_NAME] == "my-glidein"
    assert res[C.SITE] == "X"


def test_otel_service_name_beats_service_name_in_resource_attributes(tmp_path: Path) -> None:
    env = {"OTEL_RESOURCE_ATTRIBUTES": "service.name=from-attrs", "OTEL_SERVICE_NAME": "from-env"}
    assert pilot_resource(tmp_path, env)[C.SERVICE_NAME] == "from-env"


def test_a_key_repeated_in_the_configuration_is_emitted_once_last_wins(tmp_path: Path) -> None:
    res = pilot_resource(tmp_path, {"OTEL_RESOURCE_ATTRIBUTES": "gwms.site=A,host.name=h1,gwms.site=B"})
    assert res[C.SITE] == "B" and res[C.HOST_NAME] == "h1"


def test_our_conventions_version_is_not_configurable(tmp_path: Path) -> None:
    assert pilot_resource(tmp_path, {"OTEL_RESOURCE_ATTRIBUTES": "gwms.conventions=9"})[C.CONVENTIONS] == C.VERSION


def test_gwms_trace_resource_replaces_a_configured_key(tmp_path: Path) -> None:
    env = {"OTEL_RESOURCE_ATTRIBUTES": "gwms.site=Nebraska,host.name=h1"}
    res = pilot_resource(tmp_path, env, "gwms_trace_resource gwms.site Nebraska_T2; gwms_trace_resource host.name h2;")
    assert res[C.SITE] == "Nebraska_T2" and res[C.HOST_NAME] == "h2"


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({}, C.SERVICE_FACTORY),
        ({"OTEL_SERVICE_NAME": "factory-a"}, "factory-a"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=factory-b,host.name=fh"}, "factory-b"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "service.name=factory-b", "OTEL_SERVICE_NAME": "factory-a"}, "factory-a"),
    ],
)
def test_factory_service_name_is_a_default(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], want: str) -> None:
    for k in ("OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    res = make_provider("OSG", "gfactory_instance").resource.attributes
    assert res[C.SERVICE_NAME] == want
    assert res[C.FACTORY] == "OSG" and res[C.CONVENTIONS] == C.VERSION


def test_simulated_pilot_spools_have_each_resource_key_once(tmp_path: Path) -> None:
    simulate(tmp_path, 60, seed=11)
    spools = 0
    for err in tmp_path.rglob("job.*.err"):
        parsed = parse_err(err.read_bytes(), str(err), ParseErrors())
        if not parsed.trace_spool:
            continue
        spools += 1
        for kvs in resource_kvs(parsed.trace_spool):
            keys = [kv["key"] for kv in kvs]
            assert len(keys) == len(set(keys)), (err, keys)
            assert C.HOST_NAME in keys and C.SERVICE_NAME in keys
    assert spools > 0
