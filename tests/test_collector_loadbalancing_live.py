"""Scale-out (issue 13): an agent collector in front of a pool of two gateways, keyed by trace id.

Real processes on 127.0.0.1: one agent, two gateways (mutual TLS from the
agent, certificates from tests/support/tls.py), a standalone collector fed the
very same requests, a Jaeger (memory storage) behind each of the three, and
one Prometheus receiving every collector's span metrics by remote write. The
configs are the role's one template in its three roles (tools.render).
Every wait is a bounded poll; every process is stopped.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from gwms_obs import catalogue
from tests.support.collector_pool import agent_config, cut, gateway_config, spans_of
from tests.support.otlp_spans import complete_trace, pilot_trace
from tests.support.servers import prom_query, prometheus
from tests.support.tls import Pki, make_pki
from tools import render, tracing_backends
from tools.polling import poll as wait_for

FAST = {
    "otel_collector_spanmetrics_flush_interval": "1s",
    "otel_collector_retry_max_interval": "1s",
    "otel_collector_retry_initial_interval": "200ms",
    "otel_collector_batch_timeout": "100ms",
}
GATEWAYS = ("gateway-a", "gateway-b")
STANDALONE = "standalone"
TRACES = 90  # 540 spans; P(a gateway gets < 20% of them) ~ 1e-8 for a fair split
PARTS = 3  # each trace reaches the agent in 3 requests, each shared with 29 other traces
ID_LABEL = "collector_instance_id"
KEY = (
    catalogue.SPAN_LABEL_SPAN_NAME,
    catalogue.SPAN_LABEL_STATUS,
    catalogue.SPAN_LABEL_ENTRY,
    catalogue.SPAN_LABEL_PHASE,
)


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


# --- render: the three roles, and the refusals (no binary) --------------------------------------------
def _pki(tmp: Path) -> Pki:
    return make_pki(tmp / "pki", "localhost", "127.0.0.1")


def _tls(pki: Pki) -> dict[str, str]:
    return {
        "otel_collector_gateway_tls_ca_pem": pki.ca,
        "otel_collector_gateway_tls_cert_pem": pki.client_cert,
        "otel_collector_gateway_tls_key_pem": pki.client_key,
    }


PROD = {"otel_collector_pilot_tokens": ["a-long-random-production-token"]}


def test_standalone_is_the_default_role() -> None:
    assert render.role_defaults("otel_collector")["otel_collector_role"] == "standalone"
    assert render.render("otel_collector", "config.yaml.j2", **PROD) == render.render(
        "otel_collector", "config.yaml.j2", otel_collector_role="standalone", **PROD
    )


def test_roles_split_the_pipeline_between_edge_and_backend(tmp_path: Path) -> None:
    pki = _pki(tmp_path)
    agent = render.render(
        "otel_collector",
        "config.yaml.j2",
        otel_collector_role="agent",
        otel_collector_gateways=["gw1.example.org:4317", "gw2.example.org:4317"],
        **_tls(pki),
        **PROD,
    )
    gateway = render.render("otel_collector", "config.yaml.j2", otel_collector_role="gateway", **_tls(pki))
    a, g = yaml.safe_load(agent), yaml.safe_load(gateway)
    # the agent: the pilots' auth, gwmsguard and redaction; then trace-id routing, nothing computed twice
    assert a["service"]["pipelines"] == {
        "traces": {
            "receivers": ["otlp"],
            "processors": ["memory_limiter", "gwmsguard", "redaction/secrets", "batch"],
            "exporters": ["load_balancing/gateways"],
        }
    }
    assert "connectors" not in a and set(a["exporters"]) == {"load_balancing/gateways"}
    lb = a["exporters"]["load_balancing/gateways"]
    assert lb["routing_key"] == "traceID"
    assert lb["resolver"] == {"static": {"hostnames": ["gw1.example.org:4317", "gw2.example.org:4317"]}}
    assert lb["sending_queue"]["storage"] == "file_storage/queue"
    assert lb["protocol"]["otlp"]["tls"]["cert_pem"] == pki.client_cert
    assert a["receivers"]["otlp"]["protocols"]["http"]["auth"] == {"authenticator": "bearertokenauth/pilots"}
    # the gateway: mutual TLS in (gRPC only), no pilot credential, no edge processing; Jaeger and spanmetrics out
    grpc = g["receivers"]["otlp"]["protocols"]
    assert set(grpc) == {"grpc"} and "auth" not in grpc["grpc"] and "client_ca_file" in grpc["grpc"]["tls"]
    assert set(g["extensions"]) == {"file_storage/queue", "health_check"}
    assert g["service"]["pipelines"]["traces"]["processors"] == ["memory_limiter", "batch"]
    assert set(g["processors"]) == {"memory_limiter", "batch"}
    # the backend is the standalone collector's, exactly
    standalone = yaml.safe_load(render.render("otel_collector", "config.yaml.j2", **PROD))
    for part in ("connectors", "exporters"):
        assert g[part] == standalone[part], part
    assert g["service"]["pipelines"]["metrics/spanmetrics"] == standalone["service"]["pipelines"]["metrics/spanmetrics"]
    assert g["service"]["pipelines"]["traces"]["exporters"] == standalone["service"]["pipelines"]["traces"]["exporters"]
    assert "a-long-random-production-token" not in gateway


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"otel_collector_role": "relay"}, "must be standalone, agent or gateway"),
        ({"otel_collector_role": "agent", "tls": True}, "an agent needs otel_collector_gateways"),
        (
            {"otel_collector_role": "agent", "otel_collector_gateways": ["", ""], "tls": True},
            "needs otel_collector_gateways",
        ),
        ({"otel_collector_role": "agent", "otel_collector_gateways": ["gw:4317"]}, "mutual TLS only"),
        ({"otel_collector_role": "gateway"}, "mutual TLS only"),
        # an agent is an edge: the pilots' credentials are checked as on a standalone collector
        (
            {"otel_collector_role": "agent", "otel_collector_gateways": ["gw:4317"], "tls": True, "prod": False},
            "development token",
        ),
    ],
)
def test_render_refuses(tmp_path: Path, values: dict[str, Any], message: str) -> None:
    values = dict(values)
    extra = {**(_tls(_pki(tmp_path)) if values.pop("tls", False) else {}), **(PROD if values.pop("prod", True) else {})}
    with pytest.raises(jinja2.UndefinedError, match=message):
        render.render("otel_collector", "config.yaml.j2", **values, **extra)


@pytest.mark.live
def test_every_role_validates(otelcol: Path, tmp_path: Path) -> None:
    pki = _pki(tmp_path)
    gw = gateway_config(
        tmp_path / "gw", pki, jaeger_otlp_grpc="127.0.0.1:9", remote_write_url="http://x/", instance_id="gw"
    )
    agent = agent_config(tmp_path / "agent", pki, gateways=["gw1.example.org:4317", "gw2.example.org:4317"])
    for cfg in (gw.path, agent.path):
        r = tracing_backends.validate(otelcol, cfg)
        assert r.returncode == 0, r.stdout + r.stderr
        said = [ln for ln in (r.stdout + r.stderr).splitlines() if re.search(r"deprecat|legacy|\bwarn", ln, re.I)]
        assert not said, said


# --- live: one agent, two gateways, and a standalone collector for the same input ---------------------
@contextlib.contextmanager
def jaeger_proc(binary: Path, work: Path, name: str) -> Iterator[tracing_backends.JaegerConfig]:
    cfg = tracing_backends.jaeger_config(work / name)
    with tracing_backends.run(binary, cfg.path, cfg.health, work / f"{name}.log"):
        wait_for(f"{name} query API", lambda: tracing_backends._get(f"{cfg.query}/api/services"))
        yield cfg


def accepted(cfg: tracing_backends.CollectorConfig) -> float:
    return tracing_backends.metric_sum(tracing_backends.scrape(cfg.telemetry), catalogue.OTELCOL_ACCEPTED_SPANS)


def by_key(prom: str, expr: str, *extra: str) -> dict[tuple[str, ...], float]:
    """``sum by (collector_instance_id, KEY..., extra...) (expr)`` as {(labels...): value}."""
    labels = (ID_LABEL, *KEY, *extra)
    out: dict[tuple[str, ...], float] = {}
    for s in prom_query(prom, f"sum by ({', '.join(labels)}) ({expr})"):
        out[tuple(s["metric"].get(lb, "") for lb in labels)] = float(s["value"][1])
    return out


def split(series: dict[tuple[str, ...], float]) -> tuple[dict[tuple[str, ...], float], dict[tuple[str, ...], float]]:
    """(the standalone's, the gateways' summed), keyed without the instance label.

    A gateway's collector_instance_id is its otel_collector_instance_id; the standalone's
    is its own (the role's default, not a gateway's).
    """
    alone: dict[tuple[str, ...], float] = {}
    pool: dict[tuple[str, ...], float] = {}
    for (inst, *rest), v in series.items():
        into = pool if inst in GATEWAYS else alone
        into[tuple(rest)] = into.get(tuple(rest), 0.0) + v
    return alone, pool


@pytest.mark.live
def test_a_traces_spans_meet_on_one_gateway_and_span_metrics_are_unchanged(
    otelcol: Path, jaeger: Path, tmp_path: Path
) -> None:
    pki = _pki(tmp_path)
    traces = [pilot_trace(f"ENTRY_lb_{i % 4}", phase_ms=80 + 53 * i) for i in range(TRACES)]
    span_ids = {tid: {s["spanId"] for s in spans_of(body)} for tid, body, _ in traces}
    total = sum(len(ids) for ids in span_ids.values())
    # three rounds of requests; in round k every trace sends its k-th part, so each trace's
    # spans reach the agent in three requests (and leave it in three batches, see below)
    groups = [[body for _, body, _ in traces[g : g + 30]] for g in range(0, TRACES, 30)]
    rounds = [[cut(group, PARTS)[k] for group in groups] for k in range(PARTS)]

    with (
        prometheus(
            tmp_path / "prom", "global: {scrape_interval: 1s}\n", ["--web.enable-remote-write-receiver"]
        ) as prom,
        jaeger_proc(jaeger, tmp_path, "jaeger-a") as ja,
        jaeger_proc(jaeger, tmp_path, "jaeger-b") as jb,
        jaeger_proc(jaeger, tmp_path, "jaeger-standalone") as js,
    ):
        rw = f"{prom}/api/v1/write"
        ga, gb = (
            gateway_config(
                tmp_path / name, pki, jaeger_otlp_grpc=j.otlp_grpc, remote_write_url=rw, instance_id=name, **FAST
            )
            for name, j in zip(GATEWAYS, (ja, jb), strict=True)
        )
        agent = agent_config(tmp_path / "agent", pki, gateways=[ga.otlp_grpc, gb.otlp_grpc], **FAST)
        alone = tracing_backends.collector_config(
            tmp_path / STANDALONE, jaeger_otlp_grpc=js.otlp_grpc, remote_write_url=rw, instance_id=STANDALONE, **FAST
        )
        with contextlib.ExitStack() as procs:
            for name, cfg in (*zip(GATEWAYS, (ga, gb), strict=True), ("agent", agent), (STANDALONE, alone)):
                procs.enter_context(tracing_backends.run(otelcol, cfg.path, cfg.health, tmp_path / f"{name}.log"))

            def reached(n: int) -> bool:
                return accepted(ga) + accepted(gb) >= n

            sent = 0
            for k, requests in enumerate(rounds):
                for body in requests:
                    assert tracing_backends.post_otlp(agent.traces_url, body, agent.token) == 200
                    assert tracing_backends.post_otlp(alone.traces_url, body, alone.token) == 200
                    sent += len(spans_of(body))
                # this round has reached the gateways before the next one is sent: a trace's
                # parts go through the agent's load balancer in different batches
                wait_for(f"round {k} at the gateways", partial(reached, sent), 30)
            assert sent == total

            # --- traces: each one whole on exactly one gateway (its own Jaeger), none lost or doubled
            wait_for(
                "every span sent on by the gateways",
                lambda: (
                    sum(
                        tracing_backends.metric_sum(
                            tracing_backends.scrape(g.telemetry),
                            catalogue.OTELCOL_SENT_SPANS,
                            exporter=catalogue.JAEGER_EXPORTER,
                        )
                        for g in (ga, gb)
                    )
                    >= total
                ),
                30,
            )

            def where(tid: str, n: int) -> dict[str, list[str]] | None:
                on = {
                    name: [s["spanID"] for s in tracing_backends.jaeger_trace(j.query, tid)]
                    for name, j in zip(GATEWAYS, (ja, jb), strict=True)
                }
                return on if sum(map(len, on.values())) >= n else None

            home: dict[str, str] = {}
            for tid, ids in span_ids.items():
                wait_for(
                    f"trace {tid} in the standalone's Jaeger", partial(complete_trace, js.query, tid, len(ids)), 30
                )
                # (Jaeger batches before it stores: a span acknowledged is not yet one found)
                on = wait_for(f"trace {tid} in the gateways' Jaegers", partial(where, tid, len(ids)), 30)
                holders = [name for name, got in on.items() if got]
                assert len(holders) == 1, f"trace {tid} on {holders}: {on}"
                home[tid] = holders[0]
                got = on[holders[0]]
                assert sorted(got) == sorted(ids), f"trace {tid}: {got} != {ids}"  # none lost, none twice
            share = Counter(home.values())
            assert all(share[g] >= 0.2 * TRACES for g in GATEWAYS), share
            # the gateways received exactly the spans sent, no more (a resent batch would show here)
            assert accepted(ga) + accepted(gb) == total
            assert {g: accepted(cfg) for g, cfg in zip(GATEWAYS, (ga, gb), strict=True)} == {
                g: sum(len(span_ids[t]) for t, h in home.items() if h == g) for g in GATEWAYS
            }

            # --- span metrics: the gateways' series summed equal the standalone's, series by series
            expected = Counter(
                (s["name"], ("STATUS_CODE_ERROR" if s["status"]["code"] == 2 else "STATUS_CODE_OK"))
                for _, body, _ in traces
                for s in spans_of(body)
            )

            seen: dict[str, Any] = {}

            def calls() -> tuple[dict[tuple[str, ...], float], dict[tuple[str, ...], float]] | None:
                seen["series"] = by_key(prom, catalogue.SPANMETRICS_CALLS)
                a, p = split(seen["series"])
                return (a, p) if sum(a.values()) == total and sum(p.values()) == total else None

            try:
                alone_calls, pool_calls = wait_for("every span counted in Prometheus", calls, 60)
            except TimeoutError as e:
                raise AssertionError(f"{e}: {total} spans sent; the last sums seen: {seen}") from None
            assert pool_calls == alone_calls
            per_name: Counter[tuple[str, str]] = Counter()
            for (name, status, *_), v in alone_calls.items():
                per_name[(name, status)] += int(v)
            assert per_name == expected
            # each gateway writes its own series (collector_instance_id): no two writers share one
            ids = {inst for inst, *_ in by_key(prom, catalogue.SPANMETRICS_CALLS)}
            assert set(GATEWAYS) < ids and len(ids) == len(GATEWAYS) + 1, ids

            a_count, p_count = split(by_key(prom, catalogue.SPANMETRICS_DURATION_COUNT))
            assert a_count == p_count == alone_calls
            a_bucket, p_bucket = split(by_key(prom, catalogue.SPANMETRICS_DURATION_BUCKET, "le"))
            assert a_bucket == p_bucket and len(a_bucket) > len(alone_calls)
            a_sum, p_sum = split(by_key(prom, catalogue.SPANMETRICS_DURATION_SUM))
            assert a_sum.keys() == p_sum.keys()
            assert all(math.isclose(a_sum[k], p_sum[k], rel_tol=1e-9) for k in a_sum), (a_sum, p_sum)
    # nothing deprecated in the agent's and the gateways' configs, no export ever failed
    for name in ("agent", *GATEWAYS):
        bad = [
            ln
            for ln in (tmp_path / f"{name}.log").read_text().splitlines()
            if re.search(r"\t(warn|error)\t|deprecat", ln, re.I)
        ]
        assert not bad, (name, bad)
