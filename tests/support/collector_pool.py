"""Agents and gateways of the collector pool (otel_collector_role agent|gateway), rendered for 127.0.0.1.

The configs are the role's one template rendered by tools.render, as
tools.tracing_backends.collector_config renders the standalone collector;
a gateway's TLS files are written where the role's tasks write them
(``<otel_collector_config_dir>/gateway-{server.crt,server.key,client-ca.crt}``).
Also: pilot traces cut into requests that each carry a part of many traces,
so that one trace's spans reach the agent in different requests.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.tls import Pki
from tools import render, tracing_backends


def _tls(pki: Pki, cert: str, key: str) -> dict[str, Any]:
    return {
        "otel_collector_gateway_tls_ca_pem": pki.ca,
        "otel_collector_gateway_tls_cert_pem": cert,
        "otel_collector_gateway_tls_key_pem": key,
    }


def _rerender(cfg: tracing_backends.CollectorConfig, **values: Any) -> tracing_backends.CollectorConfig:
    cfg.values = {**cfg.values, **values}
    render.write("otel_collector", "config.yaml.j2", cfg.path, **cfg.values)
    return cfg


def gateway_config(
    workdir: Path, pki: Pki, *, jaeger_otlp_grpc: str, remote_write_url: str, instance_id: str, **overrides: Any
) -> tracing_backends.CollectorConfig:
    """A gateway: OTLP/gRPC with mutual TLS from agents; Jaeger and spanmetrics out."""
    cfg = tracing_backends.collector_config(
        workdir, jaeger_otlp_grpc=jaeger_otlp_grpc, remote_write_url=remote_write_url
    )
    for name, pem in (
        ("gateway-server.crt", pki.server_cert),
        ("gateway-server.key", pki.server_key),
        ("gateway-client-ca.crt", pki.ca),
    ):
        (workdir / name).write_text(pem)
    return _rerender(
        cfg,
        otel_collector_role="gateway",
        otel_collector_config_dir=str(workdir),
        otel_collector_instance_id=instance_id,
        **_tls(pki, pki.server_cert, pki.server_key),
        **overrides,
    )


def agent_config(workdir: Path, pki: Pki, *, gateways: list[str], **overrides: Any) -> tracing_backends.CollectorConfig:
    """An agent: pilots in (bearer token), edge processing, load_balancing by trace id to ``gateways``."""
    cfg = tracing_backends.collector_config(workdir, jaeger_otlp_grpc="127.0.0.1:9", remote_write_url="http://x/")
    return _rerender(
        cfg,
        otel_collector_role="agent",
        otel_collector_gateways=gateways,
        otel_collector_instance_id="agent",
        **_tls(pki, pki.client_cert, pki.client_key),
        **overrides,
    )


def spans_of(body: bytes) -> list[dict[str, Any]]:
    """Every span of an OTLP/JSON request."""
    doc = json.loads(body)
    return [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def cut(bodies: list[bytes], parts: int) -> list[bytes]:
    """Requests ``0..parts-1``: request k carries the k-th slice of every trace's spans (with its resource).

    Each body is one pilot's trace (tests.support.otlp_spans.pilot_trace); every trace
    thus reaches the collector in ``parts`` requests, each shared with the other traces.
    """
    out = []
    for k in range(parts):
        resource_spans = []
        for body in bodies:
            rs = json.loads(body)["resourceSpans"][0]
            ss = rs["scopeSpans"][0]
            n = len(ss["spans"])
            part = ss["spans"][k * n // parts : (k + 1) * n // parts]
            if part:
                resource_spans.append({**rs, "scopeSpans": [{**ss, "spans": part}]})
        out.append(json.dumps({"resourceSpans": resource_spans}).encode())
    return out
