"""Our collector distribution and Jaeger v2, as real processes on 127.0.0.1.

Configs are the Ansible roles' templates rendered by tools.render; the
binaries come from `make otelcol` / `make jaeger` (prerequisites of `make
test`). Every wait is a bounded poll; every process is stopped.
"""

from __future__ import annotations

import contextlib
import json
import re
import secrets
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import jinja2
import pytest

from gwms_obs import catalogue
from gwms_obs.tracing import conventions as C
from tests.support.otlp_spans import DN, JWT, complete_trace, pilot_trace
from tests.support.servers import prom_query, prometheus, wait_for
from tools import render, tracing_backends

TOKEN = "test-token-" + secrets.token_hex(8)


# --- binaries -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def otelcol() -> Path:
    try:
        return tracing_backends.find_binary("otelcol")
    except tracing_backends.ToolUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def jaeger() -> Path:
    try:
        return tracing_backends.find_binary("jaeger")
    except tracing_backends.ToolUnavailable as e:
        pytest.skip(str(e))


def prom_series(prom: str, expr: str, at_least: int = 1) -> list[dict[str, Any]] | None:
    r = prom_query(prom, expr)
    return r if len(r) >= at_least else None


# --- a stack: Prometheus (remote-write receiver, scrapes the collector) + Jaeger + collector -------
PROM_CFG = """global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: otelcol
    static_configs: [{{targets: ['{target}']}}]
"""


@contextlib.contextmanager
def jaeger_proc(binary: Path, cfg: tracing_backends.JaegerConfig, log: Path) -> Iterator[None]:
    with tracing_backends.run(binary, cfg.path, cfg.health, log):
        tracing_backends.poll("jaeger query API", lambda: tracing_backends._get(f"{cfg.query}/api/services"))
        yield


@contextlib.contextmanager
def stack(
    tmp: Path, otelcol: Path, jaeger: Path, **overrides: Any
) -> Iterator[tuple[tracing_backends.CollectorConfig, tracing_backends.JaegerConfig, str]]:
    jcfg = tracing_backends.jaeger_config(tmp / "jaeger")
    # Prometheus's port is only known once it runs, and the collector's telemetry
    # port must be in Prometheus's config: render the collector first with a
    # placeholder remote-write URL, then re-render with the real one (same ports).
    ccfg = tracing_backends.collector_config(
        tmp / "otelcol", jaeger_otlp_grpc=jcfg.otlp_grpc, remote_write_url="http://x/"
    )
    with prometheus(
        tmp / "prom", PROM_CFG.format(target=ccfg.telemetry_target), ["--web.enable-remote-write-receiver"]
    ) as prom:
        values = {**ccfg.values, "otel_collector_prometheus_remote_write_url": f"{prom}/api/v1/write", **overrides}
        render.write("otel_collector", "config.yaml.j2", ccfg.path, **values)
        ccfg.values = values
        with (
            jaeger_proc(jaeger, jcfg, tmp / "jaeger.log"),
            tracing_backends.run(otelcol, ccfg.path, ccfg.health, tmp / "otelcol.log"),
        ):
            yield ccfg, jcfg, prom


FAST = {
    "otel_collector_spanmetrics_flush_interval": "1s",
    "otel_collector_retry_max_interval": "1s",
    "otel_collector_retry_initial_interval": "200ms",
    "otel_collector_batch_timeout": "100ms",
}


# --- render: refusals need no binary ------------------------------------------------------------------
def test_render_refuses_production_without_a_real_token() -> None:
    with pytest.raises(jinja2.UndefinedError, match="development token"):
        render.render("otel_collector", "config.yaml.j2")  # defaults: production + development token
    with pytest.raises(jinja2.UndefinedError, match="production needs"):
        render.render("otel_collector", "config.yaml.j2", otel_collector_pilot_tokens=[""])
    with pytest.raises(jinja2.UndefinedError, match="no pilot token"):
        render.render(
            "otel_collector", "config.yaml.j2", otel_collector_production=False, otel_collector_pilot_tokens=[]
        )
    ok = render.render(
        "otel_collector", "config.yaml.j2", otel_collector_pilot_tokens=["a-long-random-production-token"]
    )
    assert "a-long-random-production-token" in ok
    assert "development" not in ok.split("tokens:")[1].split("file_storage")[0]


def test_metric_names_match_conventions() -> None:
    assert (
        tuple(render.role_defaults("otel_collector")["otel_collector_spanmetrics_dimensions"])
        == C.SPANMETRICS_DIMENSIONS
    )
    assert (
        catalogue.SPAN_LABEL_ENTRY == "gwms_entry"
        and catalogue.SPANMETRICS_DURATION_BUCKET == "traces_span_metrics_duration_seconds_bucket"
    )


# --- validate every rendered variant --------------------------------------------------------------------
COLLECTOR_VARIANTS: dict[str, dict[str, Any]] = {
    "production-tokens": {"otel_collector_pilot_tokens": ["tok-" + "x" * 32, "tok-" + "y" * 32]},
    "production-token-file": {"otel_collector_pilot_token_file": "/etc/otelcol-gwms/pilot-tokens"},
    "development": {"otel_collector_production": False},
    "debug-exporter": {"otel_collector_production": False, "otel_collector_debug_exporter": True},
}


@pytest.mark.live
@pytest.mark.parametrize("variant", sorted(COLLECTOR_VARIANTS))
def test_otelcol_validate(otelcol: Path, tmp_path: Path, variant: str) -> None:
    cfg = render.write(
        "otel_collector",
        "config.yaml.j2",
        tmp_path / "c.yaml",
        otel_collector_queue_dir=str(tmp_path / "q"),
        **COLLECTOR_VARIANTS[variant],
    )
    r = tracing_backends.validate(otelcol, cfg)
    assert r.returncode == 0, r.stdout + r.stderr
    said = [ln for ln in (r.stdout + r.stderr).splitlines() if re.search(r"deprecat|legacy|\bwarn", ln, re.I)]
    assert not said, said


@pytest.mark.live
def test_collector_starts_without_warnings(otelcol: Path, jaeger: Path, tmp_path: Path) -> None:
    """No deprecated or legacy configuration: `validate` does not say so, only a running collector does.

    The whole stack runs (Jaeger, Prometheus), so no warning comes from an
    unreachable backend; the telemetry resource set in the declarative form
    (service.telemetry.resource.attributes) must still be the collector's.
    """
    log = tmp_path / "otelcol.log"
    with stack(tmp_path, otelcol, jaeger) as (ccfg, _, _):
        wait_for("the collector's telemetry", lambda: tracing_backends._get(ccfg.telemetry), 30)
        wait_for("the pipelines' start", lambda: "Everything is ready" in log.read_text(), 30)
    lines = log.read_text().splitlines()
    bad = [ln for ln in lines if re.search(r"\t(warn|error)\t|deprecat", ln, re.I)]
    assert not bad, bad
    assert any('"service.instance.id": "test"' in ln and '"service.name": "otelcol-gwms"' in ln for ln in lines)


@pytest.mark.live
@pytest.mark.parametrize("storage", ["memory", "badger", "opensearch"])
def test_jaeger_validate(jaeger: Path, tmp_path: Path, storage: str) -> None:
    cfg = tracing_backends.jaeger_config(tmp_path, storage=storage)
    r = tracing_backends.validate(jaeger, cfg.path)
    assert r.returncode == 0, r.stdout + r.stderr


# --- the pipeline ----------------------------------------------------------------------------------------------
@pytest.mark.live
def test_spans_to_jaeger_token_redaction_spanmetrics(otelcol: Path, jaeger: Path, tmp_path: Path) -> None:
    with stack(tmp_path, otelcol, jaeger, **FAST) as (ccfg, jcfg, prom):
        good, body, names = pilot_trace("ENTRY_live_1", secret_attrs=True)
        refused, rbody, _ = pilot_trace("ENTRY_refused")
        # no token / wrong token: refused before any processing
        assert tracing_backends.post_otlp(ccfg.traces_url, rbody, None) == 401
        assert tracing_backends.post_otlp(ccfg.traces_url, rbody, "not-the-token") == 401
        assert tracing_backends.post_otlp(ccfg.traces_url, body, ccfg.token) == 200

        spans = wait_for("trace in Jaeger", partial(complete_trace, jcfg.query, good, len(names)), 30)
        assert sorted(s["operationName"] for s in spans) == sorted(names)
        # the refused trace went through nothing, so it is not behind the accepted one
        assert tracing_backends.jaeger_trace(jcfg.query, refused) == []

        # secrets stripped, everything else intact (resource -> Jaeger process tags)
        root = next(s for s in spans if s["operationName"] == C.SPAN_PILOT)
        tags = tracing_backends.span_tags(root)
        blob = json.dumps(spans)
        for secret in (DN, "CN=Jane Doe", JWT, "hunter2", "s3cr3tpw", "x509up_u4242"):
            assert secret not in blob, secret
        assert tags["gwms.x509.subject"] == "****" and tags["gwms.scitoken"] == "****"
        assert tags["gwms.note"].startswith("proxy at ") and "****" in tags["gwms.note"]
        assert tags["gwms.cmdline"].startswith("condor_startup.sh --") and tags["gwms.cmdline"].endswith(" -v")
        assert tags["gwms.plain"] == "keep me"
        assert tags[C.ENTRY] == "ENTRY_live_1" and tags[C.SITE] == "Test_Site"
        init = next(s for s in spans if s["operationName"] == C.PHASE_INIT)
        assert all(JWT not in json.dumps(log) for log in init.get("logs", []))

        # spanmetrics: phase-duration histograms per entry/client/site/phase in a real Prometheus
        sel = ",".join(
            (
                f'{catalogue.SPAN_LABEL_ENTRY}="ENTRY_live_1"',
                f'{catalogue.SPAN_LABEL_CLIENT}="frontend-test.main"',
                f'{catalogue.SPAN_LABEL_SITE}="Test_Site"',
            )
        )
        series = wait_for(
            "spanmetrics in Prometheus",
            partial(prom_series, prom, f"{catalogue.SPANMETRICS_DURATION_COUNT}{{{sel}}}", len(C.PHASES)),
            30,
        )
        phases = {s["metric"].get(catalogue.SPAN_LABEL_PHASE) for s in series}
        assert set(C.PHASES) <= phases
        setup = [s for s in series if s["metric"].get(catalogue.SPAN_LABEL_PHASE) == C.PHASE_SETUP]
        assert setup[0]["metric"][catalogue.SPAN_LABEL_STATUS] == "STATUS_CODE_ERROR"
        assert "ENTRY_refused" not in json.dumps(prom_query(prom, catalogue.SPANMETRICS_DURATION_COUNT))
        # the main phase lasted 4 x 1.5 s = 6 s: its median falls in the (5 s, 10 s] bucket
        q = prom_query(
            prom,
            f"histogram_quantile(0.5, sum by (le) "
            f'({catalogue.SPANMETRICS_DURATION_BUCKET}{{{sel},{catalogue.SPAN_LABEL_PHASE}="main"}}))',
        )
        assert 5 < float(q[0]["value"][1]) <= 10
        # the collector's own telemetry, scraped by the same Prometheus
        acc = wait_for(
            "otelcol telemetry",
            partial(
                prom_series,
                prom,
                f'sum({catalogue.OTELCOL_ACCEPTED_SPANS}{{job="otelcol",transport="http"}}) >= {len(names)}',
            ),
            30,
        )
        assert acc


@pytest.mark.live
def test_jaeger_outage_loses_nothing(otelcol: Path, jaeger: Path, tmp_path: Path) -> None:
    """Jaeger down, pilots keep sending, the collector even restarts: every span arrives afterwards."""
    jcfg = tracing_backends.jaeger_config(tmp_path / "jaeger")
    ccfg = tracing_backends.collector_config(
        tmp_path / "otelcol", jaeger_otlp_grpc=jcfg.otlp_grpc, remote_write_url="http://127.0.0.1:9/", **FAST
    )
    jlog, clog = tmp_path / "jaeger.log", tmp_path / "otelcol.log"
    before = [pilot_trace("ENTRY_before") for _ in range(3)]
    during = [pilot_trace(f"ENTRY_outage_{i}") for i in range(40)]
    with tracing_backends.run(otelcol, ccfg.path, ccfg.health, clog):
        with jaeger_proc(jaeger, jcfg, jlog):
            for _, body, _ in before:
                assert tracing_backends.post_otlp(ccfg.traces_url, body, ccfg.token) == 200
            for tid, _, names in before:
                wait_for("trace before outage", partial(complete_trace, jcfg.query, tid, len(names)))
        # Jaeger is down now
        for _, body, _ in during:
            assert tracing_backends.post_otlp(ccfg.traces_url, body, ccfg.token) == 200

        def queued() -> float:
            m = tracing_backends.scrape(ccfg.telemetry)
            return tracing_backends.metric_sum(m, catalogue.OTELCOL_QUEUE_SIZE, exporter=catalogue.JAEGER_EXPORTER)

        wait_for("batches held in the persistent queue", queued, 30)
    # the collector stopped with the batches still queued on disk
    assert any(ccfg.queue_dir.iterdir())
    with tracing_backends.run(otelcol, ccfg.path, ccfg.health, clog), jaeger_proc(jaeger, jcfg, jlog):
        for tid, _, names in during:
            wait_for(
                f"trace {tid} after the outage",
                partial(complete_trace, jcfg.query, tid, len(names)),
                60,
            )
        m = tracing_backends.scrape(ccfg.telemetry)
        assert tracing_backends.metric_sum(m, catalogue.OTELCOL_ENQUEUE_FAILED_SPANS) == 0
        assert tracing_backends.metric_sum(m, catalogue.OTELCOL_REFUSED_SPANS) == 0
