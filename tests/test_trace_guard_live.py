"""Issue 16 live: hostile spools and secrets against the real collector and Jaeger on 127.0.0.1.

* a forged spool for another pilot's trace never reaches that trace in Jaeger;
* a span with a secret in each hiding place reaches Jaeger redacted;
* with per-pilot JWTs, a pilot's token writes only its own trace, expires,
  and names the entry, whatever the pilot claims.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing.credentials import PilotSigner, generate_key
from gwms_obs.tracing.outbox import SpoolForwarder
from tests.support.trace_pilot import run_pilot
from tests.support.trace_secrets import SECRETS, secret_request
from tests.support.trace_stack import Stack, binaries, stack
from tests.test_trace_live import _factory, _submit, _trace
from tools import tracing_backends

pytestmark = [pytest.mark.live, pytest.mark.slow]


def test_forged_spool_never_reaches_the_victims_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log_dir = tmp_path / "entry_log"
    log_dir.mkdir()
    with stack(tmp_path) as st:
        ft = _factory(st, monkeypatch)
        victim_trace, victim_tp, victim_res = _submit(ft, log_dir, cluster=100)
        _, attacker_tp, _ = _submit(ft, log_dir, cluster=200)
        victim = run_pilot(tmp_path / "victim", traceparent=victim_tp, env={"OTEL_RESOURCE_ATTRIBUTES": victim_res})
        # The attacker runs with the victim's context and identity: every span it writes claims the victim.
        forged = run_pilot(tmp_path / "attacker", traceparent=victim_tp, env={"OTEL_RESOURCE_ATTRIBUTES": victim_res},
                           uuid="00000000-0000-4000-8000-00000000beef")  # fmt: skip
        # ... and a subtler one: its own identity, the victim's trace and parent.
        subtle = forged.spool.replace(b'"gwms.condor.cluster","value":{"intValue":"100"}',
                                      b'"gwms.condor.cluster","value":{"intValue":"200"}')  # fmt: skip
        errors = ParseErrors()
        fwd = SpoolForwarder(st.col.traces_url, tmp_path / "outbox", errors, token=st.col.token)
        fwd.start()
        fwd(victim.spool, str(log_dir / "job.100.1.err"))
        fwd(forged.spool, str(log_dir / "job.200.1.err"))  # returned in the attacker's own .err
        fwd(subtle, str(log_dir / "job.200.1.err"))
        assert fwd.drain(30)
        fwd.stop()
        assert fwd.stats.sent_spans == len(victim.spans()) and fwd.stats.refused == 2
        assert errors.counts[("trace_spool", "foreign_resource")] >= len(forged.spans())
        assert errors.counts[("trace_spool", "foreign_trace")] >= len(forged.spans())
        spans = _trace(st, victim_trace, 3 + len(victim.spans()))
        ids = {s["spanID"] for s in spans}
        assert ids >= {s["spanId"] for s in victim.spans()}
        assert not ids & {s["spanId"] for s in forged.spans()}
        assert "beef" not in json.dumps(spans)
        assert attacker_tp[3:35] != victim_trace
        ft.shutdown()


def test_a_secret_in_each_hiding_place_reaches_jaeger_redacted(tmp_path: Path) -> None:
    """Posted straight to the collector (as a pilot would), no exporter in between."""
    trace_id = "5ec2e75ec2e75ec2e75ec2e75ec2e75e"
    with stack(tmp_path) as st:
        body = json.dumps(secret_request(trace_id, "")).encode()
        assert tracing_backends.post_otlp(st.col.traces_url, body, st.col.token) == 200
        spans = _trace(st, trace_id, 2)
        text = json.dumps(spans)
        leaked = [s for s in SECRETS if s in text]
        assert not leaked, leaked
        root = next(s for s in spans if s["operationName"] != "setup")
        tags = {t["key"]: t["value"] for t in root["tags"]}
        assert "****" in root["operationName"] and "****" in tags["otel.status_description"]
        assert tags["gwms.pwd"] == "****" and tags["passphrase"] == "****" and tags["db.password"] == "****"
        assert "****" in tags["otel.scope.name"] and "****" in tags["otel.scope.version"]
        assert "****" in root["logs"][0]["fields"][0]["value"]  # the event's name
        # what is not a secret is still there
        assert tags[C.PHASE] == "setup" and "run.sh" in tags["process.command_line"]


def _jwt_stack(tmp_path: Path):  # type: ignore[no-untyped-def]
    otelcol, jaeger = binaries()
    generate_key(tmp_path / "factory-key.pem", tmp_path / "jwks.json")
    jcfg = tracing_backends.jaeger_config(tmp_path / "jaeger")
    ccfg = tracing_backends.collector_config(tmp_path / "col", jaeger_otlp_grpc=jcfg.otlp_grpc,
                                remote_write_url=f"http://127.0.0.1:{tracing_backends.free_port()}/api/v1/write",
                                otel_collector_pilot_jwks_file=str(tmp_path / "jwks.json"))  # fmt: skip
    return otelcol, jaeger, jcfg, ccfg


def test_per_pilot_jwt_writes_only_its_own_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    otelcol, jaeger, jcfg, ccfg = _jwt_stack(tmp_path)
    signer = PilotSigner(tmp_path / "factory-key.pem")
    with (
        tracing_backends.run(jaeger, jcfg.path, jcfg.health, tmp_path / "jaeger.log"),
        tracing_backends.run(otelcol, ccfg.path, ccfg.health, tmp_path / "otelcol.log"),
    ):
        st = Stack(ccfg, jcfg, jaeger, tmp_path)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", ccfg.traces_url)
        from gwms_obs.tracing.factory import FactoryTracer

        ft = FactoryTracer("OSG", "gfactory_instance", signer=signer, token_dir=tmp_path / "tokens")
        victim_trace, _, _ = _submit(ft, cluster=100)
        with ft.submit_cluster("Entry_A", "fe.main", 2) as sc:
            env = dict(e.split("=", 1) for e in sc.submit_env())
            sc.submitted(200, 2)
        assert ft.flush()
        tp = env[C.ENV_TRACEPARENT_LIST].split(",")[1]
        token_file = Path(env["GLIDEIN_TRACE_TOKEN_DIR"]) / "1" / "gwms-trace.jwt"
        assert token_file.stat().st_mode & 0o077 == 0 and not any(
            token_file.read_text().strip() in v for v in env.values()
        )
        # The pilot, its token a file in its sandbox, claiming another entry: its own trace lands,
        # under the token's entry.
        pilot_dir = tmp_path / "pilot"
        pilot_dir.mkdir()
        (pilot_dir / "gwms-trace.jwt").write_text(token_file.read_text())
        run = run_pilot(pilot_dir, traceparent=tp, env={
            "OTEL_RESOURCE_ATTRIBUTES": "gwms.entry=Victim_Entry,gwms.client=victim.fe",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ccfg.traces_url})  # fmt: skip
        assert "result sent" in run.stdout, run.stderr[-2000:]
        assert not (pilot_dir / "gwms-trace.jwt").exists()  # read once, then gone from the sandbox
        spans = _trace(st, tp[3:35], 3 + len(run.spans()))
        pilot_spans = [s for s in spans if s["spanID"] in {x["spanId"] for x in run.spans()}]
        assert pilot_spans and all(
            {t["key"]: t["value"] for t in s["process"]["tags"]}[C.ENTRY] == "Entry_A" for s in pilot_spans
        )
        # The same token, spans of the victim's trace: accepted at the door, dropped by gwmsguard.
        token = token_file.read_text().strip()
        forged = secret_request(victim_trace, "")
        assert tracing_backends.post_otlp(ccfg.traces_url, json.dumps(forged).encode(), token) == 200
        mine = secret_request(tp[3:35], "")  # a marker request in the pilot's own trace, sent after
        for s in mine["resourceSpans"][0]["scopeSpans"][0]["spans"]:
            s["spanId"] = "f" + s["spanId"][1:]
            s["parentSpanId"] = "f" + s["parentSpanId"][1:] if s["parentSpanId"] else ""
        assert tracing_backends.post_otlp(ccfg.traces_url, json.dumps(mine).encode(), token) == 200
        _trace(st, tp[3:35], 3 + len(run.spans()) + 2)  # the marker arrived: the forged request was processed
        victim = tracing_backends.jaeger_trace(jcfg.query, victim_trace)
        assert victim and not {s["spanID"] for s in victim} & {"c0ffee0000000001", "c0ffee0000000002"}
        dropped = tracing_backends.metric_sum(
            tracing_backends.scrape(ccfg.telemetry), "otelcol_gwmsguard_dropped_spans", reason="foreign_trace"
        )
        assert dropped >= 2
        # Expired, wrong audience, another key, the static development token: refused at the door.
        expired = PilotSigner(tmp_path / "factory-key.pem", clock=lambda: time.time() - 30 * 86400).mint(
            tp[3:35], subject="glidein/x/1"
        )
        other_aud = PilotSigner(tmp_path / "factory-key.pem", audience="someone-else").mint(tp[3:35], subject="g")
        generate_key(tmp_path / "other-key.pem", tmp_path / "other-jwks.json")
        other_key = PilotSigner(tmp_path / "other-key.pem").mint(tp[3:35], subject="g")
        for bad in (expired, other_aud, other_key, "gwms-obs-development-token-not-for-production", None):
            assert tracing_backends.post_otlp(ccfg.traces_url, json.dumps(mine).encode(), bad) == 401
        ft.shutdown()
