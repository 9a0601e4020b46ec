"""The pilot-trace switch and the span pacing, from the Ansible variables to the exporter's config.

gwms_exporter_pilot_traces and gwms_exporter_trace_spans_per_second render into
exporter.toml (Ansible's template module and tools.render agree, compose's
rendered copy carries them) and load into ExportConfig; bad values are refused
by check-config.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gwms_obs.config import check, from_dict, load
from gwms_obs.settings import ConfigError
from tools import render

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "ansible/roles/gwms_exporter"


def _render(tmp_path: Path, **values: object) -> Path:
    factory = tmp_path / "factory"
    (factory / "client").mkdir(parents=True, exist_ok=True)
    text = render.render(
        "gwms_exporter",
        "exporter.toml.j2",
        gwms_exporter_factory_dir=str(factory),
        gwms_exporter_state_dir=str(tmp_path),
        **values,
    )
    out = tmp_path / "exporter.toml"
    out.write_text(text)
    return out


@pytest.mark.parametrize(("switch", "rate"), [(True, 300), (False, 0), ("false", 50), ("yes", 1000)])
def test_the_role_renders_the_switch_and_the_rate_both_ways(tmp_path: Path, switch: object, rate: int) -> None:
    cfg = load(str(_render(tmp_path, gwms_exporter_pilot_traces=switch, gwms_exporter_trace_spans_per_second=rate)))
    assert cfg.pilot_traces is (switch in (True, "yes"))
    assert cfg.trace_spans_per_second == rate
    assert check(cfg) == []


def test_the_defaults_are_on_and_paced_and_compose_renders_them() -> None:
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    assert defaults["gwms_exporter_pilot_traces"] is True
    assert defaults["gwms_exporter_trace_spans_per_second"] > 30  # room above a 100k-pilot/day factory
    compose = load(str(ROOT / "compose/config/exporter.toml"))
    assert (
        compose.pilot_traces is True
        and compose.trace_spans_per_second == defaults["gwms_exporter_trace_spans_per_second"]
    )


def test_a_rate_that_is_not_a_rate_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="trace_spans_per_second must be a number"):
        from_dict({"trace_spans_per_second": "fast"})
    assert any(
        "trace_spans_per_second" in p for p in check(from_dict({"trace_spans_per_second": -1}), filesystem=False)
    )
    cfg = _render(tmp_path, gwms_exporter_trace_spans_per_second=300)
    cfg.write_text(cfg.read_text().replace("trace_spans_per_second = 300", "trace_spans_per_second = -5"))
    r = subprocess.run(
        [sys.executable, "-m", "gwms_obs.cli", "check-config", str(cfg)], capture_output=True, text=True, check=False
    )
    assert r.returncode != 0 and "trace_spans_per_second" in r.stderr


def test_ansibles_template_module_renders_the_same(tmp_path: Path) -> None:
    ansible = Path(sys.prefix) / "bin/ansible-playbook"
    if not ansible.exists():
        pytest.skip("ansible-playbook is not installed in this venv")
    out = tmp_path / "ansible.toml"
    values = {
        "gwms_exporter_pilot_traces": False,
        "gwms_exporter_trace_spans_per_second": 75,
        "gwms_exporter_factory_dir": "/f",
        "gwms_exporter_state_dir": "/s",
    }
    play = tmp_path / "play.yml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Render exporter.toml",
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "vars_files": [str(ROLE / "defaults/main.yml")],
                    "tasks": [
                        {
                            "name": "Render",
                            "ansible.builtin.template": {
                                "src": str(ROLE / "templates/exporter.toml.j2"),
                                "dest": str(out),
                                "mode": "0644",
                            },
                        }
                    ],
                }
            ]
        )
    )
    extra = {**values, "ansible_python_interpreter": sys.executable}
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible/ansible.cfg"), "PATH": f"{Path(sys.prefix) / 'bin'}:/usr/bin:/bin"}
    r = subprocess.run(
        [str(ansible), "-i", "localhost,", str(play), "-e", json.dumps(extra)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # The host Ansible renders for is "localhost": its inventory name names a factory nothing else names.
    ours = render.render("gwms_exporter", "exporter.toml.j2", inventory_hostname="localhost", **values)
    assert out.read_text().splitlines()[1:] == ours.splitlines()[1:]  # only the managed-by line may differ
    assert "pilot_traces = false" in ours and "trace_spans_per_second = 75" in ours
    assert 'factory_name = "localhost"' in ours


@pytest.mark.parametrize("own", [True, False])
def test_the_units_environment_turns_the_exporters_own_spans_on_or_off(own: bool) -> None:
    from gwms_obs.outputs import self_trace

    def env(**values: object) -> dict[str, str]:
        text = render.render("gwms_exporter", "exporter.env.j2", **values)
        return dict(ln.split("=", 1) for ln in text.splitlines() if ln and not ln.startswith("#"))

    on = env(
        gwms_exporter_otlp_endpoint="https://otelcol:4318", gwms_exporter_otlp_token="t", gwms_exporter_own_spans=own
    )
    assert self_trace.wanted(on) is own
    assert on["OTEL_SERVICE_NAME"] == self_trace.SERVICE and on["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert not self_trace.wanted(env(gwms_exporter_own_spans=own))  # no endpoint: nothing at all


def test_export_paces_its_forwarder_at_the_configured_rate(tmp_path: Path) -> None:
    """The key reaches the forwarder: export says the rate it sends at (nothing listens: drained at once)."""
    from gwms_obs.simulate.factory import simulate

    simulate(tmp_path / "factory", 3, seed=2)
    cfg = tmp_path / "exporter.toml"
    for rate, said in ((50, "at most 50 spans/s"), (0, "unpaced")):
        cfg.write_text(f'factory_dir = "{tmp_path / "factory"}"\ntrace_spans_per_second = {rate}\n')
        r = subprocess.run(
            [
                *(sys.executable, "-m", "gwms_obs.cli", "export", "--once", "--config", str(cfg)),
                *("--traces-endpoint", "http://127.0.0.1:9/v1/traces", "--traces-drain-seconds", "0"),
                *("--traces-outbox", str(tmp_path / f"outbox{rate}")),
            ],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        )
        assert said in r.stderr, r.stderr[-2000:]
