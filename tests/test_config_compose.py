"""ExportConfig composes the IngestConfig its scans get (issue 32): the file's keys stay the same."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gwms_obs.accounting.partition import Rules
from gwms_obs.accounting.plausible import Limits
from gwms_obs.config import from_dict
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.settings import ConfigError

FILE_KEYS = (
    "checkpoint, clients, completed_total, discovery, factory_dir, factory_name, frontend_clients, "
    "frontend_monitor_dir, full_scan_seconds, interval, limits, listen, lost_after_seconds, monitor_dir, "
    "pilot_traces, rules, settle_seconds, tick_seconds, trace_spans_per_second"
)


def test_the_ingest_keys_set_the_ingest_config(tmp_path: Path) -> None:
    cfg = from_dict(
        {
            "factory_dir": str(tmp_path),
            "monitor_dir": str(tmp_path / "m"),
            "checkpoint": str(tmp_path / "c.json"),
            "settle_seconds": 5,
            "lost_after_seconds": 60,
            "rules": {"grace_seconds": 120},
            "completed_total": "raw",
            "clients": {"u": "fe"},
            "limits": {"max_cpus": 8},
            "interval": 7,
        }
    )
    assert cfg.ingest == IngestConfig(
        factory_dir=str(tmp_path),
        monitor_dir=str(tmp_path / "m"),
        checkpoint=str(tmp_path / "c.json"),
        settle_seconds=5.0,
        lost_after_seconds=60.0,
        rules=Rules(grace_seconds=120.0),
        completed_total="raw",
        client_map={"u": "fe"},
        limits=Limits(max_cpus=8),
    )
    assert cfg.interval == 7.0 and cfg.get("clients") == {"u": "fe"} and cfg.get("interval") == 7.0
    # A flag overrides a key where it is kept, as export's --factory-dir does.
    cfg.set("factory_dir", "/elsewhere")
    assert cfg.ingest.factory_dir == "/elsewhere"


def test_the_defaults_are_the_ingest_defaults() -> None:
    """Nothing read from a file: the scans get IngestConfig's defaults, at the exporter's factory dir."""
    cfg = from_dict({})
    assert cfg.ingest == IngestConfig(factory_dir="/var/log/gwms-factory")


@pytest.mark.parametrize("key", ["ingest", "client_map", "reset_checkpoint", "workers", "final", "max_file_bytes"])
def test_the_ingest_configs_other_fields_are_no_keys(key: str) -> None:
    """reset_checkpoint and workers are flags for one start; a key would hold them for every restart."""
    with pytest.raises(ConfigError) as e:
        from_dict({key: 1})
    assert str(e.value) == f"config: unknown key {key!r} (known: {FILE_KEYS})"


def test_check_config_messages_name_the_files_keys() -> None:
    from gwms_obs.config import value_problems

    cfg = from_dict({"settle_seconds": -1, "rules": {"grace_seconds": -2}, "factory_dir": ""})
    assert value_problems(cfg) == [
        "factory_dir must be a non-empty string",
        "settle_seconds must be a finite number of seconds >= 0, got -1.0",
        "rules.grace_seconds must be a finite number of seconds >= 0, got -2.0",
    ]
    assert dataclasses.replace(cfg.ingest, workers=3).workers == 3 and cfg.ingest.workers == 1
