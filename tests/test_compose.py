"""The compose stack: generated from the roles' compose data, its configs are the Ansible
templates rendered for containers, valid for the real programs, and the compose file
agrees with the pins elsewhere."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml

from gwms_obs import catalogue
from tests.support.servers import have
from tools import compose, images, render, tracing_backends

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


def test_controller_config_is_valid_and_keeps_only_the_tokens_hashes() -> None:
    """The gwms_controller role's template for the stack: its INSECURE development tokens, as sha256 only."""
    import hashlib

    path = CONFIG / "controller.toml"
    r = run(sys.executable, "-m", "gwms_obs.cli", "controller", "check-config", "--syntax-only", str(path))
    assert r.returncode == 0, r.stdout + r.stderr
    text = path.read_text()
    tokens = compose.controller_dev_tokens()
    assert set(tokens) == {"operator", "pilot"}
    for role, token in tokens.items():
        assert "insecure-development" in token, role  # named for what it is
        assert hashlib.sha256(token.encode()).hexdigest() in text
        env = f"GWMS_OBS_CONTROLLER_{role.upper()}_TOKEN={token}"
        assert env in (ROOT / compose.TOKEN_ENV_FILE).read_text()
        for f in (compose.COMPOSE_FILE, compose.OFFLINE_FILE, f"{compose.CONFIG_DIR}/controller.toml"):
            assert token not in (ROOT / f).read_text(), f
    # the production preflight refuses them (the one list of refused secrets)
    assert set(tokens.values()) <= set(render.role_defaults("gwms_secret")["gwms_secret_bad"])


def test_prometheus_scrapes_the_controller_in_the_stack() -> None:
    from dashboards.gen import names as N

    doc = yaml.safe_load((CONFIG / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    (targets,) = (c["targets"] for c in jobs[N.JOB_CONTROLLER]["static_configs"])
    ctl = COMPOSE["services"]["controller"]
    assert targets == ["controller:9830"] and ctl["ports"] == ["127.0.0.1:${GWMS_OBS_PORT_CONTROLLER:-9830}:9830"]
    assert "/healthz" in " ".join(ctl["healthcheck"]["test"])
    # built like the exporter, from this repository, with the controller extra
    assert ctl["build"]["context"] == COMPOSE["services"]["exporter"]["build"]["context"]
    assert '"/src[controller]"' in (ROOT / "compose" / ctl["build"]["dockerfile"].split("/", 1)[1]).read_text()
    assert "controller" in {s.service for s in images.SPECS}


@pytest.mark.live
@pytest.mark.parametrize(("tool", "name"), [("otelcol", "otelcol.yaml"), ("jaeger", "jaeger.yaml")])
def test_collector_and_jaeger_configs_are_valid(tool: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GWMS_OBS_TRACES_TOKEN", compose.DEV_TOKEN)  # as compose passes it
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
    """Both read GWMS_OBS_TRACES_TOKEN from the one env file (the collector through ${env:...})."""
    assert "${env:GWMS_OBS_TRACES_TOKEN}" in (CONFIG / "otelcol.yaml").read_text()
    assert {s for s, spec in COMPOSE["services"].items() if "env_file" in spec} == {"exporter", "otelcol"}


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


def _compose_v2() -> str | None:
    r = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=30, check=False)
    return None if r.returncode == 0 else f"docker compose v2 not installed (make compose-plugin): {r.stderr[:200]}"


@pytest.mark.live
@pytest.mark.parametrize("variant", ["registry", "offline"])
def test_docker_compose_accepts_both_variants(variant: str, tmp_path: Path) -> None:
    """`docker compose config` (no engine needed): the registry file alone, and with the offline override."""
    why = _compose_v2()
    assert why is None, why
    files = ["-f", str(ROOT / compose.COMPOSE_FILE)]
    if variant == "offline":
        env = tmp_path / "images.env"
        env.write_text("".join(f"{images.env_var(s.service)}=gwms-obs/{s.service}:test\n" for s in images.SPECS))
        files = ["--env-file", str(env), *files, "-f", str(ROOT / compose.OFFLINE_FILE)]
    r = run("docker", "compose", *files, "config", "--format", "json")
    assert r.returncode == 0, r.stdout + r.stderr
    services = json.loads(r.stdout)["services"]
    for name, spec in services.items():
        assert spec.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        for dep, cond in (spec.get("depends_on") or {}).items():
            assert cond["condition"] == "service_healthy", (name, dep)
        if variant == "offline":
            assert spec["image"].startswith("gwms-obs/") or name == "grafana", (name, spec["image"])
            assert "build" not in spec, name


def test_every_service_is_hardened_and_the_token_is_in_the_env_file_only() -> None:
    for name, spec in COMPOSE["services"].items():
        if name != "grafana":  # its image's user (472) writes its own data; see grafana/compose.yml
            assert spec["user"] not in ("0", "root") and spec["read_only"] is True, name
    for f in (compose.COMPOSE_FILE, compose.OFFLINE_FILE, *(f"{compose.CONFIG_DIR}/{n}" for n in ("otelcol.yaml",))):
        assert compose.DEV_TOKEN not in (ROOT / f).read_text(), f
    assert f"GWMS_OBS_TRACES_TOKEN={compose.DEV_TOKEN}" in (ROOT / compose.TOKEN_ENV_FILE).read_text()
    for svc in ("exporter", "otelcol"):
        assert COMPOSE["services"][svc]["env_file"] == [Path(compose.TOKEN_ENV_FILE).name]
