"""Our collector in front of Jaeger, both real processes on 127.0.0.1, for the end-to-end trace tests.

Needs the binaries of `make otelcol` and `make jaeger` (found through
$GWMS_OBS_OTELCOL / $GWMS_OBS_JAEGER, which the Makefile exports); the test
is skipped, with the reason, when they are not built. The collector and
Jaeger configs are the Ansible roles' templates, rendered by
tools.tracing_backends.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tools import tracing_backends


def binaries() -> tuple[Path, Path]:
    try:
        return tracing_backends.find_binary("otelcol", build=False), tracing_backends.find_binary("jaeger", build=False)
    except tracing_backends.ToolUnavailable as e:
        pytest.skip(f"needs `make otelcol jaeger`: {e}")


@dataclass
class Stack:
    col: tracing_backends.CollectorConfig
    jaeger: tracing_backends.JaegerConfig
    jaeger_bin: Path
    work: Path


@contextlib.contextmanager
def stack(tmp_path: Path) -> Iterator[Stack]:
    otelcol, jaeger = binaries()
    jcfg = tracing_backends.jaeger_config(tmp_path / "jaeger")
    # Nothing listens for the spanmetrics remote write here; traces do not depend on it.
    ccfg = tracing_backends.collector_config(
        tmp_path / "col",
        jaeger_otlp_grpc=jcfg.otlp_grpc,
        remote_write_url=f"http://127.0.0.1:{tracing_backends.free_port()}/api/v1/write",
    )
    with (
        tracing_backends.run(jaeger, jcfg.path, jcfg.health, tmp_path / "jaeger.log"),
        tracing_backends.run(otelcol, ccfg.path, ccfg.health, tmp_path / "otelcol.log"),
    ):
        yield Stack(ccfg, jcfg, jaeger, tmp_path)
