"""The compose stack: generated from the roles' compose data, its configs are the Ansible
templates rendered for containers, valid for the real programs, and the compose file
agrees with the pins elsewhere."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

from gwms_obs import catalogue
from tests.support.servers import have
from tools import compose, render, tracing_backends

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "compose" / "config"
COMPOSE = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.skipif(not have("promtool"), reason="Debian prometheus (promtool) not installed")
def test_prometheus_config_is_valid() -> None:
    r = run("promtool", "check", "config", "--syntax-only", str(CONFIG / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.skipif(not have("amtool"), reason="Debian prometheus-alertmanager (amtool) not installed")
def test_alertmanager_config_is_valid() -> None:
    r = run("amtool", "check-config", str(CONFIG / "alertmanager.yml"))
    assert r.returncode == 0, r.stdout + r.stderr


def test_exporter_config_is_valid() -> None:
    r = run(sys.executable, "-m", "gwms_obs.cli", "check-config", "--syntax-only", str(CONFIG / "exporter.toml"))
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.live
@pytest.mark.parametrize(("tool", "name"), [("otelcol", "otelcol.yaml"), ("jaeger", "jaeger.yaml")])
def test_collector_and_jaeger_configs_are_valid(tool: str, name: str) -> None:
    try:
        binary = tracing_backends.find_binary(tool)
    except tracing_backends.ToolUnavailable as e:
        pytest.skip(str(e))
    r = tracing_backends.validate(binary, CONFIG / name)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_deployed_role_and_only_those_run_in_the_stack() -> None:
    """A role in a play of deploy.yml has its compose data, and compose has no role deploy.yml lacks."""
    plays = yaml.safe_load((ROOT / "ansible" / "deploy.yml").read_text())
    deployed = {r if isinstance(r, str) else r["role"] for play in plays for r in play.get("roles", [])}
    assert deployed and {c.role for c in compose.components()} == deployed
    for c in compose.components():
        assert c.configs and c.services, c.role
        for template, _ in c.configs:
            assert (render.roles_dir() / c.role / "templates" / template).is_file(), (c.role, template)


def test_the_exporters_trace_token_is_one_the_collector_accepts() -> None:
    env = COMPOSE["services"]["exporter"]["environment"]
    assert env["GWMS_OBS_TRACES_TOKEN"] == compose.DEV_TOKEN
    assert compose.DEV_TOKEN in (CONFIG / "otelcol.yaml").read_text()


def test_a_service_uses_only_variables_its_role_has() -> None:
    part = compose.Component("prometheus", (), {}, {"p": {"volumes": ["{{ prometheus_no_such_variable }}:/x"]}})
    with pytest.raises(jinja2.UndefinedError):
        compose.compose_file([part])


def test_every_mounted_file_exists_and_was_generated() -> None:
    generated = set(compose.rendered())
    for svc, spec in COMPOSE["services"].items():
        for vol in spec.get("volumes", []):
            src = vol.split(":")[0]
            if src.startswith("."):
                path = (ROOT / "compose" / src).resolve()
                assert path.exists(), (svc, vol)
                if path.is_file() and path.is_relative_to(CONFIG):
                    assert str(path.relative_to(ROOT)) in generated, (svc, vol)


def test_compose_agrees_with_the_pins_elsewhere() -> None:
    svc = COMPOSE["services"]
    # The collector runs with the gates its tests and its systemd unit use.
    cmd = " ".join(svc["otelcol"]["command"])
    assert all(g in cmd for g in catalogue.FEATURE_GATES)
    assert render.role_defaults("otel_collector")["otel_collector_feature_gates"] == list(catalogue.FEATURE_GATES)
    # Jaeger and Grafana images are the versions the Makefile builds and the role deploys.
    jaeger_v2 = re.search(r"^JAEGER_V2 := v(\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert jaeger_v2 and svc["jaeger"]["image"].endswith(":" + jaeger_v2[1])
    grafana = render.role_defaults("grafana")["grafana_version"]
    assert svc["grafana"]["image"].split(":")[1].startswith(grafana + ".")
    # The collector remote-writes its span metrics: Prometheus must accept them.
    assert "--web.enable-remote-write-receiver" in svc["prometheus"]["command"]
    # Only loopback is published.
    for name, spec in svc.items():
        for port in spec.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)


def test_docker_compose_accepts_the_file() -> None:
    try:
        import docker

        docker.from_env().ping()
    except Exception as e:  # any failure to reach an engine means: cannot run here
        pytest.skip(f"no Docker engine reachable ({type(e).__name__}); `docker compose config` not run")
    r = run("docker", "compose", "-f", str(ROOT / "compose" / "docker-compose.yml"), "config", "--quiet")
    assert r.returncode == 0, r.stdout + r.stderr
