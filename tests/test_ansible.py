"""The Ansible side without a managed host: lint, syntax, argument specs, sha256 refusal, secret preflight.

Nothing here manages a service: the playbooks run on this machine only where
they touch a temporary directory (the artifact role) or stop in the preflight.
The deployment itself is tested on a systemd host in test_deploy_nspawn.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from gwms_obs import catalogue
from tools import render

ROOT = Path(__file__).resolve().parents[1]
ANSIBLE = ROOT / "ansible"
BIN = Path(sys.prefix) / "bin"
ROLES = sorted(p.name for p in (ANSIBLE / "roles").iterdir() if (p / "tasks").is_dir())
INVENTORIES = sorted(p.name for p in (ANSIBLE / "inventories").iterdir())
ENV = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0", "NO_COLOR": "1"}


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} not installed (pip install -e '.[dev]')")
    return str(path)


def _run(*cmd: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ANSIBLE, env=ENV, capture_output=True, text=True, timeout=timeout, check=False)


def _specs(role: str) -> dict[str, Any]:
    doc = yaml.safe_load((ANSIBLE / "roles" / role / "meta" / "argument_specs.yml").read_text())
    specs: dict[str, Any] = doc["argument_specs"]
    return specs


def test_every_role_is_complete() -> None:
    assert set(ROLES) >= {"gwms_exporter", "otel_collector", "jaeger", "prometheus", "alertmanager", "grafana"}
    for role in ROLES:
        for part in ("tasks/main.yml", "meta/main.yml", "meta/argument_specs.yml", "defaults/main.yml"):
            assert (ANSIBLE / "roles" / role / part).is_file(), f"{role}/{part}"


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_do_not_drift(role: str) -> None:
    """Like prometheus-community's lint_arguments_spec.sh: the same keys in both files.

    Every default is a documented option; every option has a default unless it
    is required; where the spec states a default it is the defaults file's value.
    """
    defaults = render.role_defaults(role)
    options: dict[str, Any] = _specs(role)["main"]["options"]
    required = {k for k, v in options.items() if v.get("required")}
    assert set(defaults) - set(options) == set(), "in defaults/main.yml, missing from meta/argument_specs.yml"
    assert set(options) - required - set(defaults) == set(), (
        "in meta/argument_specs.yml, missing from defaults/main.yml"
    )
    assert required & set(defaults) == set(), "required options must not have a default"
    for k, v in options.items():
        assert v.get("description"), f"{k}: no description"
        if "default" in v:
            assert v["default"] == defaults[k], k


def test_yamllint() -> None:
    r = _run(_tool("yamllint"), "--strict", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_syntax_check() -> None:
    for inv in INVENTORIES:
        r = _run(_tool("ansible-playbook"), "-i", f"inventories/{inv}/hosts.yml", "deploy.yml", "--syntax-check")
        assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_ansible_lint_production_profile() -> None:
    r = _run(_tool("ansible-lint"), "--profile", "production", "--offline", "--nocolor", timeout=600)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]


ARTIFACT_PLAY = """
- name: Install one artifact into a temporary directory
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Install it
      ansible.builtin.include_role:
        name: gwms_artifact
      vars:
        gwms_artifact_file: "{{ file }}"
        gwms_artifact_sha256: "{{ sha }}"
        gwms_artifact_dir: "{{ src_dir }}"
        gwms_artifact_dest: "{{ dest }}"
"""


@pytest.mark.parametrize("how", ["matching", "mismatch", "missing-sha"])
def test_artifacts_are_refused_unless_their_sha256_matches(tmp_path: Path, how: str) -> None:
    src = tmp_path / "src"
    src.mkdir()
    blob = b"#!/bin/sh\necho otelcol\n"
    (src / "otelcol-gwms").write_bytes(blob)
    sha = {
        "matching": hashlib.sha256(blob).hexdigest(),
        "mismatch": hashlib.sha256(b"something else").hexdigest(),
        "missing-sha": "",
    }[how]
    play = tmp_path / "play.yml"
    play.write_text(ARTIFACT_PLAY)
    dest = tmp_path / "installed" / "otelcol-gwms"
    dest.parent.mkdir()
    r = _run(
        _tool("ansible-playbook"),
        "-i",
        "localhost,",
        str(play),
        "-e",
        json.dumps({"file": "otelcol-gwms", "sha": sha, "src_dir": str(src), "dest": str(dest)}),
        "-e",
        f"ansible_python_interpreter={sys.executable}",
    )
    if how == "matching":
        assert r.returncode == 0, r.stdout + r.stderr
        assert dest.read_bytes() == blob
    else:
        assert r.returncode != 0
        assert ("does not match the expected" if how == "mismatch" else "refuses to install an unchecked") in r.stdout
        assert not dest.exists()


def _preflight(
    tmp_path: Path,
    secrets: dict[str, Any],
    extra: dict[str, Any] | None = None,
    inventory: str = "single-host",
    limit: str = "all",
    playbook: str = "deploy.yml",
) -> subprocess.CompletedProcess[str]:
    """The preflight play and every role's `always` checks (argument specs, preflight), nothing else."""
    vault = tmp_path / "secrets.yml"
    vault.write_text(yaml.safe_dump(secrets))
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return _run(
        _tool("ansible-playbook"),
        "-i",
        str(ANSIBLE / "inventories" / inventory / "hosts.yml"),  # a name here, or a copy's absolute path
        playbook,
        "--tags",
        "preflight",
        "--skip-tags",
        "install,configure,run",
        "--limit",
        limit,
        "-e",
        f"@{vault}",
        "-e",
        json.dumps({**local, **(extra or {})}),
    )


def _example_vault() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(
        (ANSIBLE / "inventories/single-host/group_vars/all/vault.yml.example").read_text()
    )
    return doc


@pytest.mark.parametrize(
    "change, message",
    [
        ({}, "otel_collector_pilot_tokens"),  # the example's CHANGE_ME values as they are
        ({"vault_otel_collector_pilot_tokens": ["a-real-token-0123456789"]}, "grafana_admin_password"),
        (
            {
                "vault_otel_collector_pilot_tokens": ["gwms-obs-development-token-not-for-production"],
                "vault_grafana_admin_password": "a-long-enough-password",
            },
            "otel_collector_pilot_tokens",
        ),
        (
            {
                "vault_otel_collector_pilot_tokens": ["a-real-token-0123456789"],
                "vault_grafana_admin_password": "",
            },
            "grafana_admin_password",
        ),
        (
            {
                "vault_otel_collector_pilot_tokens": ["a-real-token-0123456789"],
                "vault_grafana_admin_password": "a-long-enough-password",
                "vault_alertmanager_smtp_auth_username": "relay-user",
                "vault_alertmanager_smtp_auth_password": "CHANGE_ME",
            },
            "alertmanager_smtp_auth_username",
        ),
    ],
)
def test_preflight_refuses_default_or_empty_secrets(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    r = _preflight(tmp_path, {**_example_vault(), **change})
    assert r.returncode != 0
    assert message in r.stdout and "refusing to deploy" in r.stdout, r.stdout[-3000:]


# The monitoring controller's tokens as the vault holds them (plaintext; the host keeps their sha256).
CONTROLLER_TOKENS = [
    {"name": "factory-ops", "role": "operator", "token": "gwmsc_operator-token-of-the-tests-0123456789"},
    {"name": "pilots", "role": "pilot", "token": "gwmsc_pilot-token-of-the-tests-0123456789abc"},
    {"name": "alice", "role": "site_admin", "sites": ["T2_US_Nebraska"], "token": "gwmsc_alice-" + "a" * 32},
]


def _real_vault() -> dict[str, Any]:
    return {
        **_example_vault(),
        "vault_otel_collector_pilot_tokens": ["a-real-token-0123456789"],
        "vault_grafana_admin_password": "a-long-enough-password",
        "vault_gwms_controller_tokens": CONTROLLER_TOKENS,
    }


def test_preflight_passes_real_secrets(tmp_path: Path) -> None:
    r = _preflight(tmp_path, _real_vault())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "failed=0" in r.stdout


@pytest.mark.parametrize("var", ["prometheus_rules_src_dir", "grafana_dashboards_src_dir"])
def test_preflight_refuses_a_missing_rules_or_dashboards_dir(tmp_path: Path, var: str) -> None:
    """The roles take their files from a directory the inventory names, never from the repository."""
    missing = tmp_path / "no-such-dir"
    r = _preflight(tmp_path, _real_vault(), {var: str(missing)})
    assert r.returncode != 0
    assert f"{var} is {missing}" in r.stdout and "refusing to deploy" in r.stdout, r.stdout[-3000:]


ROLE_ALONE_PLAY = """
- name: The collector role on its own, outside deploy.yml
  hosts: factory
  gather_facts: false
  roles: [otel_collector]
"""


@pytest.mark.parametrize("token, refused", [("gwms-obs-development-token-not-for-production", True), (None, False)])
def test_a_role_used_alone_runs_its_own_preflight(tmp_path: Path, token: str | None, refused: bool) -> None:
    play = tmp_path / "play.yml"
    play.write_text(ROLE_ALONE_PLAY)
    secrets = _real_vault() if token is None else {**_real_vault(), "vault_otel_collector_pilot_tokens": [token]}
    r = _preflight(tmp_path, secrets, playbook=str(play))
    assert "Refuse default, empty or short pilot tokens" in r.stdout, r.stdout[-3000:]
    if refused:
        assert r.returncode != 0 and "otel_collector_pilot_tokens: set real pilot tokens" in r.stdout
    else:
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]


def test_exporter_config_template_passes_check_config(tmp_path: Path) -> None:
    factory = tmp_path / "factory"
    (factory / "client").mkdir(parents=True)
    text = render.render(
        "gwms_exporter",
        "exporter.toml.j2",
        gwms_exporter_factory_dir=str(factory),
        gwms_exporter_state_dir=str(tmp_path),
    )
    cfg = tmp_path / "exporter.toml"
    cfg.write_text(text)
    r = subprocess.run(
        [sys.executable, "-m", "gwms_obs.cli", "check-config", str(cfg)], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stderr
    cfg.write_text(text.replace("interval = 60", 'interval = "often"'))
    r = subprocess.run(
        [sys.executable, "-m", "gwms_obs.cli", "check-config", str(cfg)], capture_output=True, text=True, check=False
    )
    assert r.returncode != 0


UNITS = sorted((ANSIBLE / "roles").glob("*/templates/*.service.j2"))


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_units_render_hardened(unit: Path) -> None:
    """The unit templates render with tools.render too (one template source), hardened."""
    text = render.render(unit.parent.parent.name, unit.name)
    directives = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith(("#", " "))
    )
    for key, value in {
        "NoNewPrivileges": "true",
        "ProtectSystem": "strict",
        "ProtectHome": "true",
        "PrivateTmp": "true",
        "PrivateDevices": "true",
        "CapabilityBoundingSet": "",
    }.items():
        assert directives.get(key) == value, f"{unit.name}: {key}"
    assert directives["User"] not in ("", "root")


# --- Grafana's datasources beside a site's own (grafana_server_enabled: false) ----------------


def _datasources(**overrides: Any) -> dict[str, dict[str, Any]]:
    """The grafana role's datasources.yml.j2 rendered with its defaults + overrides, by type."""
    doc = yaml.safe_load(render.render("grafana", "datasources.yml.j2", **overrides))
    return {d["type"]: d for d in doc["datasources"]}


def test_grafana_datasource_uids_are_the_ones_the_dashboards_name() -> None:
    from dashboards.gen import names as N

    d = render.role_defaults("grafana")
    assert d["grafana_datasource_uids"] == {
        "prometheus": N.DATASOURCE_PROMETHEUS,
        "jaeger": N.DATASOURCE_JAEGER,
        "alertmanager": N.DATASOURCE_ALERTMANAGER,
    }
    ds = _datasources()
    assert {t: x["uid"] for t, x in ds.items()} == d["grafana_datasource_uids"]
    assert {t: x["name"] for t, x in ds.items()} == d["grafana_datasource_names"]


@pytest.mark.parametrize("is_default", [None, False, True, "false"])
def test_grafana_datasources_never_replace_a_sites_own(is_default: bool | str | None) -> None:
    """Our own names (never plain "Prometheus") and uids; the default datasource only when asked."""
    overrides = {} if is_default is None else {"grafana_datasource_is_default": is_default}
    ds = _datasources(**overrides)
    assert set(ds) == {"prometheus", "jaeger", "alertmanager"}
    for x in ds.values():
        assert x["name"].lower() not in {"prometheus", "jaeger", "alertmanager"}, x["name"]
        assert x["name"].startswith("gwms-obs ") and x["uid"].startswith("gwms-obs-"), x
    defaults = {t for t, x in ds.items() if x.get("isDefault")}
    assert defaults == ({"prometheus"} if is_default is True else set())


def test_grafana_exemplar_link_follows_the_jaeger_uid() -> None:
    uids = {"prometheus": "site-prom", "jaeger": "site-jaeger", "alertmanager": "site-am"}
    ds = _datasources(grafana_datasource_uids=uids)
    assert {t: x["uid"] for t, x in ds.items()} == uids
    links = ds["prometheus"]["jsonData"]["exemplarTraceIdDestinations"]
    assert links == [{"name": "trace_id", "datasourceUid": "site-jaeger"}]


# --- Listeners off loopback (multi-host inventory): TLS and auth or no deployment -------------


def _multi_host_vault(tmp_path: Path) -> dict[str, Any]:
    from tests.support import tls

    pki = tls.make_pki(tmp_path / "pki", "monitor01.example.org", "192.0.2.1")
    doc: dict[str, Any] = yaml.safe_load(
        (ANSIBLE / "inventories/multi-host/group_vars/all/vault.yml.example").read_text()
    )
    return {
        **doc,
        "vault_grafana_admin_password": "a-long-enough-password",
        "vault_otel_collector_pilot_tokens": ["a-real-token-0123456789"],
        "vault_gwms_tls_ca": pki.ca,
        "vault_gwms_monitoring_tls_cert": pki.server_cert,
        "vault_gwms_monitoring_tls_key": pki.server_key,
        "vault_otel_collector_tls_client_cert": pki.client_cert,
        "vault_otel_collector_tls_client_key": pki.client_key,
        "vault_prometheus_password": "grafana-and-self-0123",
        "vault_prometheus_remote_write_password": "remote-write-0123456",
        "vault_gwms_controller_tokens": CONTROLLER_TOKENS,
    }


def test_multi_host_inventory_passes_with_tls_and_passwords(tmp_path: Path) -> None:
    r = _preflight(tmp_path, _multi_host_vault(tmp_path), inventory="multi-host")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "failed=0" in r.stdout
    # every monitoring role's listener check ran (and passed) before anything else
    for check in (
        "Refuse a web listener off loopback",
        "Refuse an OTLP receiver off loopback",
        "Refuse the query API, UI",
        "Refuse Grafana off",
        "Refuse Alertmanager off loopback",
    ):
        assert check in r.stdout, check


@pytest.mark.parametrize(
    "extra, message",
    [
        # the example's CHANGE_ME certificates as they are
        ({"vault_gwms_monitoring_tls_cert": "-----BEGIN CERTIFICATE-----\nCHANGE_ME\n"}, "placeholder"),
        ({"vault_prometheus_password": "short"}, "prometheus_web_users: every password"),
        ({"prometheus_web_users": {}}, "prometheus_web_listen_address is 0.0.0.0:9090 (not loopback)"),
        ({"prometheus_web_tls_key": ""}, "prometheus_web_listen_address is 0.0.0.0:9090 (not loopback)"),
        ({"jaeger_otlp_tls_client_ca": ""}, "jaeger_listen_host is 0.0.0.0 (not loopback)"),
        ({"grafana_tls_key": ""}, "grafana_http_addr is 0.0.0.0 (not loopback)"),
        ({"jaeger_query_host": "0.0.0.0"}, "jaeger_query_host is 0.0.0.0 (not loopback)"),
        ({"alertmanager_web_listen_address": "0.0.0.0:9093"}, "alertmanager_web_listen_address is 0.0.0.0:9093"),
        ({"otel_collector_jaeger_insecure": True}, "leaves this host without TLS"),
        (
            {"otel_collector_prometheus_remote_write_url": "http://monitor01.example.org:9090/api/v1/write"},
            "leaves this host without TLS",
        ),
    ],
)
def test_multi_host_refuses_a_listener_or_sender_off_loopback_without_tls_or_auth(
    tmp_path: Path, extra: dict[str, Any], message: str
) -> None:
    secrets = _multi_host_vault(tmp_path)
    vault_keys = {k: v for k, v in extra.items() if k.startswith("vault_")}
    # the monitoring host's checks, or a factory host's for the collector's
    limit = "factory01.example.org" if any(k.startswith("otel_collector") for k in extra) else "monitor01.example.org"
    others = {k: v for k, v in extra.items() if not k.startswith("vault_")}
    r = _preflight(tmp_path, {**secrets, **vault_keys}, others, inventory="multi-host", limit=limit)
    assert r.returncode != 0
    assert message in r.stdout and "refusing to deploy" in r.stdout, r.stdout[-4000:]


def test_one_hosts_refusal_stops_every_host_before_any_change(tmp_path: Path) -> None:
    """Only the factory hosts fail their checks; the monitoring host, which passed, is not deployed either."""
    r = _preflight(tmp_path, _multi_host_vault(tmp_path), {"otel_collector_jaeger_insecure": True}, "multi-host")
    assert r.returncode != 0 and "leaves this host without TLS" in r.stdout, r.stdout[-3000:]
    assert "PLAY [Monitoring host" not in r.stdout and "PLAY [Factory hosts" not in r.stdout, r.stdout[-3000:]


def test_loopback_listeners_need_no_tls() -> None:
    """The single-host inventory keeps everything but the collector on loopback: no TLS, no web users."""
    text = render.render("prometheus", "web-config.yml.j2")
    assert "tls_server_config" not in text and "basic_auth_users" not in text
    assert "tls:" not in render.render("jaeger", "config.yaml.j2")
    assert "GF_SERVER_PROTOCOL" not in render.render(
        "grafana", "grafana-server.env.j2", grafana_admin_password="x" * 12
    )


BCRYPT = ANSIBLE / "roles" / "prometheus" / "files" / "bcrypt_hashes.py"


def _bcrypt(req: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BCRYPT)], input=json.dumps(req), capture_output=True, text=True, timeout=60, check=False
    )


def test_bcrypt_hashes_are_kept_while_the_password_is_unchanged(tmp_path: Path) -> None:
    first = _bcrypt({"users": {"a": "password-of-a-0123", "b": "password-of-b-0123"}, "cost": 4})
    assert first.returncode == 0, first.stderr
    got = json.loads(first.stdout)
    assert sorted(got["new"]) == ["a", "b"] and all(h.startswith("$2b$04$") for h in got["hashes"].values())
    again = json.loads(
        _bcrypt({"users": {"a": "password-of-a-0123", "b": "changed-password-0123"}, "existing": got["hashes"]}).stdout
    )
    assert again["hashes"]["a"] == got["hashes"]["a"] and again["new"] == ["b"]
    assert again["hashes"]["b"] != got["hashes"]["b"]
    # promtool accepts the web config with these hashes
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    web = tmp_path / "web.yml"
    web.write_text(render.render("prometheus", "web-config.yml.j2", prometheus_web_password_hashes=again["hashes"]))
    r = subprocess.run([promtool, "check", "web-config", str(web)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    for bad in ("", "x" * 73):
        r = _bcrypt({"users": {"a": bad}})
        assert r.returncode == 1 and "1-72 bytes" in r.stderr


# --- The monitoring controller (gwms_controller) -----------------------------------------------


def _controller_toml(tmp_path: Path, **overrides: Any) -> Path:
    cfg = tmp_path / "controller.toml"
    cfg.write_text(
        render.render(
            "gwms_controller", "controller.toml.j2", **{"gwms_controller_tokens": CONTROLLER_TOKENS, **overrides}
        )
    )
    return cfg


def _check_config(cfg: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gwms_obs.cli", "controller", "check-config", *flags, str(cfg)],
        capture_output=True,
        text=True,
        check=False,
    )


def test_controller_config_template_passes_check_config_and_keeps_only_hashes(tmp_path: Path) -> None:
    cfg = _controller_toml(tmp_path, gwms_controller_scopes=[{"factory": "f1", "entry": "E1", "site": "S1"}])
    r = _check_config(cfg, "--syntax-only")
    assert r.returncode == 0, r.stderr
    text = cfg.read_text()
    for t in CONTROLLER_TOKENS:
        assert t["token"] not in text
        assert f'sha256 = "{hashlib.sha256(t["token"].encode()).hexdigest()}"' in text
    # the role's defaults: loopback, SQLite in the state dir, phases by default under a commands ceiling
    from gwms_obs.controller import config as C

    c = C.load(cfg)
    assert (c.listen, c.database) == ("127.0.0.1:9830", "sqlite:////var/lib/gwms-obs-controller/controller.db")
    assert (c.default.verbosity.label, c.ceiling.verbosity.label) == ("phases", "commands")
    assert {t.principal.name: t.principal.role.value for t in c.tokens} == {
        "factory-ops": "operator", "pilots": "pilot", "alice": "site_admin"
    }  # fmt: skip
    # with the files it names in place, the full check passes too (as the role's validate runs it)
    secret = tmp_path / "controller.secret"
    secret.write_text("s" * 48)
    cfg = _controller_toml(
        tmp_path, gwms_controller_session_secret_file=str(secret), gwms_controller_state_dir=str(tmp_path)
    )
    r = _check_config(cfg)
    assert r.returncode == 0, r.stderr
    # a default above the ceiling is refused, as check-config refuses it before any restart
    cfg = _controller_toml(tmp_path, gwms_controller_default={"verbosity": "commands"},
                           gwms_controller_ceiling={"verbosity": "phases"})  # fmt: skip
    assert _check_config(cfg, "--syntax-only").returncode != 0


def test_controller_config_with_postgresql_puts_the_vault_password_in_the_url(tmp_path: Path) -> None:
    password = "p@ss/w:rd%-from-the-vault"
    cfg = _controller_toml(
        tmp_path,
        gwms_controller_database_url="postgresql+psycopg://gwms@db.example.org:5432/controller",
        gwms_controller_database_password=password,
    )
    assert _check_config(cfg, "--syntax-only").returncode == 0
    from sqlalchemy.engine import make_url

    from gwms_obs.controller import config as C

    url = make_url(C.load(cfg).database)
    assert (url.username, url.password, url.host, url.port, url.database) == (
        "gwms", password, "db.example.org", 5432, "controller"
    )  # fmt: skip


def test_controller_template_renders_the_same_with_ansible(tmp_path: Path) -> None:
    """tools.render (compose, these tests) and Ansible's template module agree, the sha256 filter included."""
    play = tmp_path / "play.yml"
    out = tmp_path / "ansible.toml"
    play.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Render controller.toml",
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "vars_files": [str(ANSIBLE / "roles/gwms_controller/defaults/main.yml")],
                    "tasks": [
                        {
                            "name": "Render",
                            "ansible.builtin.template": {
                                "src": str(ANSIBLE / "roles/gwms_controller/templates/controller.toml.j2"),
                                "dest": str(out),
                                "mode": "0600",
                            },
                        }
                    ],
                }
            ]
        )
    )
    extra = {"gwms_controller_tokens": CONTROLLER_TOKENS, "ansible_python_interpreter": sys.executable}
    r = _run(_tool("ansible-playbook"), "-i", "localhost,", str(play), "-e", json.dumps(extra))
    assert r.returncode == 0, r.stdout + r.stderr
    ours = render.render("gwms_controller", "controller.toml.j2", gwms_controller_tokens=CONTROLLER_TOKENS)
    # only the managed-by line may differ (Ansible's ansible_managed)
    assert out.read_text().splitlines()[1:] == ours.splitlines()[1:]


def _tasks(role: str, name: str = "main.yml") -> list[dict[str, Any]]:
    """Every task of a role's task file, blocks flattened."""
    out: list[dict[str, Any]] = []

    def walk(tasks: list[dict[str, Any]]) -> None:
        for t in tasks:
            out.append(t)
            walk(t.get("block", []))

    walk(yaml.safe_load((ANSIBLE / "roles" / role / "tasks" / name).read_text()))
    return out


def test_controller_secrets_are_never_logged() -> None:
    tasks = {t["name"]: t for t in _tasks("gwms_controller")}
    for name in (
        "Write the session secret from Ansible Vault",
        "Make a random session secret on the host, once",
        "Write the TLS certificate and key",
    ):
        assert tasks[name]["no_log"] is True, name
    # controller.toml holds the database password when there is one
    assert "gwms_controller_database_password" in str(
        tasks["Write controller.toml (checked with gwms-obs controller check-config)"]["no_log"]
    )
    opts = _specs("gwms_controller")["main"]["options"]
    for var in ("gwms_controller_tokens", "gwms_controller_database_password", "gwms_controller_session_secret",
                "gwms_controller_tls_key"):  # fmt: skip
        assert opts[var].get("no_log") is True, var
    assert opts["gwms_controller_tokens"]["options"]["token"]["no_log"] is True


def test_controller_config_is_validated_before_it_is_put_in_place_and_migrations_report_change() -> None:
    tasks = {t["name"]: t for t in _tasks("gwms_controller")}
    tpl = tasks["Write controller.toml (checked with gwms-obs controller check-config)"]["ansible.builtin.template"]
    assert tpl["validate"].endswith("gwms-obs controller check-config %s") and tpl["mode"] == "0640"
    assert tpl["group"] == "{{ gwms_controller_user }}" and tpl["owner"] == "root"
    migrate = tasks["Create or upgrade the database schema (gwms-obs controller migrate)"]
    assert migrate["ansible.builtin.command"]["argv"][-4:] == [
        "controller", "migrate", "--config", "{{ gwms_controller_config_dir }}/controller.toml"
    ]  # fmt: skip
    # changed only when the schema moved: `schema X -> Y` with X != Y
    import re

    same = re.compile(migrate["vars"]["gwms_controller_same_schema"], re.M)
    assert same.search("schema 0002_audit -> 0002_audit")
    assert not same.search("schema empty -> 0002_audit") and not same.search("schema 0001 -> 0002_audit")
    # every change is applied by the one restart handler, which runs after the validated writes
    assert {t.get("notify") for t in tasks.values() if "notify" in t} == {"restart gwms_controller"}


def test_controller_unit_is_hardened_like_the_exporters() -> None:
    ctl = render.render("gwms_controller", "gwms-obs-controller.service.j2")
    exp = render.render("gwms_exporter", "gwms-obs-exporter.service.j2")

    def hardening(text: str) -> set[str]:
        keep = ("Protect", "Restrict", "NoNewPrivileges", "PrivateTmp", "PrivateDevices", "Capability", "Ambient",
                "SystemCall", "LockPersonality", "RemoveIPC", "UMask")  # fmt: skip
        return {line for line in text.splitlines() if line.startswith(keep)}

    assert hardening(exp) <= hardening(ctl)
    assert "StateDirectory=gwms-obs-controller" in ctl and "User=gwms-obs-controller" in ctl
    assert "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX" in ctl and "MemoryMax=1G" in ctl


@pytest.mark.parametrize(
    "tokens, message",
    [
        (None, "gwms_controller_tokens: every token"),  # the example's CHANGE_ME tokens as they are
        (
            [{"name": "ops", "role": "operator", "token": "gwms-obs-insecure-development-controller-operator-token"}],
            "gwms_controller_tokens: every token",
        ),
        ([{"name": "ops", "role": "operator", "token": "too-short"}], "gwms_controller_tokens: every token"),
        ([{"name": "p", "role": "pilot", "token": "p" * 40}], "one at least must be an operator"),
        ([{"name": "a", "role": "site_admin", "token": "a" * 40}], "site_admin with its"),
        ([{"name": "a", "role": "king", "token": "a" * 40}], "a role of operator, site_admin"),
        (
            [{"name": "a", "role": "operator", "token": "a" * 40}, {"name": "b", "role": "pilot", "token": "a" * 40}],
            "two holders have the same token",
        ),
    ],
)
def test_preflight_refuses_bad_controller_tokens(tmp_path: Path, tokens: Any, message: str) -> None:
    vault = {
        **_real_vault(),
        "vault_gwms_controller_tokens": tokens or _example_vault()["vault_gwms_controller_tokens"],
    }
    r = _preflight(tmp_path, vault)
    assert r.returncode != 0
    assert message in r.stdout, r.stdout[-3000:]
    for t in tokens or []:
        if len(t["token"]) >= 32:
            assert t["token"] not in r.stdout + r.stderr  # a refused token is not printed


@pytest.mark.parametrize(
    "extra, message",
    [
        ({"gwms_controller_listen": "0.0.0.0:9830"}, "gwms_controller_listen is 0.0.0.0:9830: off loopback"),
        ({"gwms_controller_database_url": "postgresql+psycopg://gwms:pw@db:5432/c"}, "without the password"),
        ({"gwms_controller_database_url": "postgresql+psycopg://gwms@db:5432/c"}, "without the password"),
        (
            {
                "gwms_controller_database_url": "postgresql+psycopg://gwms@db:5432/c",
                "gwms_controller_database_password": "changeme",
            },
            "gwms_controller_database_password is a default",
        ),
        ({"gwms_controller_session_secret": "short"}, "gwms_controller_session_secret is a default or shorter"),
    ],
)
def test_preflight_refuses_a_controller_off_loopback_without_tls_or_a_bad_database(
    tmp_path: Path, extra: dict[str, Any], message: str
) -> None:
    r = _preflight(tmp_path, _real_vault(), extra)
    assert r.returncode != 0
    assert message in r.stdout and "refusing to deploy" in r.stdout, r.stdout[-3000:]


def test_prometheus_scrapes_the_controller_over_https_when_it_serves_tls() -> None:
    from dashboards.gen import names as N

    def job(**overrides: Any) -> dict[str, Any] | None:
        doc = yaml.safe_load(render.render("prometheus", "prometheus.yml.j2", **overrides))
        return next((j for j in doc["scrape_configs"] if j["job_name"] == N.JOB_CONTROLLER), None)

    assert job() is None  # no controller, no job
    plain = job(prometheus_controller_targets=["localhost:9830"])
    assert plain and plain["static_configs"] == [{"targets": ["localhost:9830"]}] and "scheme" not in plain
    tls = job(
        prometheus_controller_targets=["mon:9830"], prometheus_controller_scheme="https", prometheus_web_tls_cert="C"
    )
    assert tls and tls["scheme"] == "https" and tls["tls_config"]["ca_file"].endswith("/web-ca.crt")


# What the per-component variables rendered before prometheus_scrape_configs: the jobs its default builds
# (and the factory's name on the exporter's series, from the compose stack's `factory` external label).
_STACK_JOBS = [
    {
        "job_name": "gwms-obs",
        "honor_labels": True,
        "static_configs": [{"targets": ["exporter:9822"], "labels": {catalogue.FACTORY_LABEL: "laptop"}}],
    },
    {"job_name": "otel-collector", "honor_labels": True, "static_configs": [{"targets": ["otelcol:8888"]}]},
    {"job_name": "gwms-controller", "static_configs": [{"targets": ["controller:9830"]}]},
    {"job_name": "prometheus", "static_configs": [{"targets": ["localhost:9090"]}]},
    {"job_name": "alertmanager", "static_configs": [{"targets": ["alertmanager:9093"]}]},
]


def test_prometheus_scrape_configs_default_is_the_per_component_jobs() -> None:
    """The compose stack's variables (the role's compose.yml) render the same jobs as before the list;
    without a collector or controller target there is no such job."""
    compose_vars = yaml.safe_load((ANSIBLE / "roles/prometheus/compose.yml").read_text())["vars"]
    doc = yaml.safe_load(render.render("prometheus", "prometheus.yml.j2", **compose_vars))
    assert doc["scrape_configs"] == _STACK_JOBS
    alone = yaml.safe_load(
        render.render(
            "prometheus", "prometheus.yml.j2", prometheus_collector_targets=[], prometheus_controller_targets=[]
        )
    )
    assert [j["job_name"] for j in alone["scrape_configs"]] == ["gwms-obs", "prometheus", "alertmanager"]
    assert "labels" not in alone["scrape_configs"][0]["static_configs"][0]  # no factory named: no label


def test_the_exporters_traces_and_its_series_name_the_factory_alike() -> None:
    """The pilot traces' factory (the exporter's factory_name) is the label its Prometheus gives its series,
    both from the host's `factory` external label, so a dashboard row's Jaeger search is that factory's."""
    labels = {"prometheus_external_labels": {catalogue.FACTORY_LABEL: "fnal", "replica": "a"}}
    prom = yaml.safe_load(render.render("prometheus", "prometheus.yml.j2", **labels))
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "gwms-obs"]
    assert job["static_configs"][0]["labels"] == {catalogue.FACTORY_LABEL: "fnal"}
    toml = tomllib.loads(render.render("gwms_exporter", "exporter.toml.j2", **labels))
    assert toml["factory_name"] == "fnal"
    # a factory nothing names: its host's inventory name, in both
    host = {"inventory_hostname": "factory01.example.org"}
    prom = yaml.safe_load(render.render("prometheus", "prometheus.yml.j2", **host))
    (job,) = [j for j in prom["scrape_configs"] if j["job_name"] == "gwms-obs"]
    assert job["static_configs"][0]["labels"] == {catalogue.FACTORY_LABEL: "factory01.example.org"}
    # a central Prometheus scraping other hosts' exporters: its own name is none of theirs
    targets = {"prometheus_exporter_targets": ["factory01.example.org:9822", "factory02.example.org:9822"]}
    prom = yaml.safe_load(render.render("prometheus", "prometheus.yml.j2", **host, **targets))
    assert "labels" not in prom["scrape_configs"][0]["static_configs"][0]
    assert (
        tomllib.loads(render.render("gwms_exporter", "exporter.toml.j2", **host))["factory_name"]
        == host["inventory_hostname"]
    )


def test_prometheus_scrape_configs_takes_any_component_as_given() -> None:
    """A new component is one list entry: its scrape_config is written as given, before the role's own jobs."""
    node = {
        "job_name": "node",
        "scrape_interval": "1m",
        "relabel_configs": [{"source_labels": ["__address__"], "target_label": "host", "regex": "([^:]+):.*"}],
        "static_configs": [{"targets": ["f1:9100", "f2:9100"], "labels": {"role": "factory"}}],
    }
    doc = yaml.safe_load(render.render("prometheus", "prometheus.yml.j2", prometheus_scrape_configs=[node]))
    assert doc["scrape_configs"][0] == node
    assert [j["job_name"] for j in doc["scrape_configs"]] == ["node", "prometheus", "alertmanager"]
    with pytest.raises(Exception, match="no job_name"):
        render.render("prometheus", "prometheus.yml.j2", prometheus_scrape_configs=[{"static_configs": []}])


def test_prometheus_config_renders_the_same_with_ansible(tmp_path: Path) -> None:
    """Ansible turns prometheus_scrape_configs' default (one expression) into a list that passes the role's
    argument_specs, and its template module writes what tools.render writes (the multi-host inventory's
    https controller with the CA, and the compose stack's jobs)."""
    specs = _specs("prometheus")["main"]["options"]
    compose_vars = yaml.safe_load((ANSIBLE / "roles/prometheus/compose.yml").read_text())["vars"]
    cases = {
        "compose": compose_vars,
        "https": {
            "prometheus_controller_targets": ["mon:9830"],
            "prometheus_controller_scheme": "https",
            "prometheus_web_tls_cert": "C",
            "prometheus_collector_targets": [],
        },
    }
    for name, extra in cases.items():
        out = tmp_path / f"{name}.yml"
        play = tmp_path / f"{name}-play.yml"
        play.write_text(
            yaml.safe_dump(
                [
                    {
                        "name": "Render prometheus.yml",
                        "hosts": "localhost",
                        "connection": "local",
                        "gather_facts": False,
                        "vars_files": [str(ANSIBLE / "roles/prometheus/defaults/main.yml")],
                        "tasks": [
                            {
                                "name": "Validate",
                                "ansible.builtin.validate_argument_spec": {
                                    "argument_spec": {"prometheus_scrape_configs": specs["prometheus_scrape_configs"]}
                                },
                            },
                            {
                                "name": "Render",
                                "ansible.builtin.template": {
                                    "src": str(ANSIBLE / "roles/prometheus/templates/prometheus.yml.j2"),
                                    "dest": str(out),
                                    "mode": "0600",
                                },
                            },
                        ],
                    }
                ]
            )
        )
        args = {**extra, "ansible_python_interpreter": sys.executable}
        r = _run(_tool("ansible-playbook"), "-i", "localhost,", str(play), "-e", json.dumps(args))
        assert r.returncode == 0, r.stdout + r.stderr
        # the play's host: its inventory name names a factory nothing else names (the https case)
        assert out.read_text() == render.render(
            "prometheus", "prometheus.yml.j2", **extra, inventory_hostname="localhost"
        )


# --- Many factories, one view (thanos role, multi-factory inventory) ----------------------------


def _multi_factory_vault(tmp_path: Path) -> dict[str, Any]:
    from tests.support import tls

    pki = tls.make_pki(tmp_path / "pki", "thanos-store.example.org", "192.0.2.1")
    doc: dict[str, Any] = yaml.safe_load(
        (ANSIBLE / "inventories/multi-factory/group_vars/all/vault.yml.example").read_text()
    )
    return {
        **doc,
        "vault_grafana_admin_password": "a-long-enough-password",
        "vault_otel_collector_pilot_tokens": ["a-real-token-0123456789"],
        "vault_thanos_s3_access_key": "gwms-thanos",
        "vault_thanos_s3_secret_key": "a-real-s3-secret-0123456789",
        "vault_thanos_grpc_tls_ca": pki.ca,
        "vault_thanos_grpc_tls_cert": pki.server_cert,
        "vault_thanos_grpc_tls_key": pki.server_key,
        "vault_thanos_grpc_tls_client_cert": pki.client_cert,
        "vault_thanos_grpc_tls_client_key": pki.client_key,
        "vault_gwms_central_tls_cert": pki.server_cert,
        "vault_gwms_central_tls_key": pki.server_key,
    }


def test_the_roles_thanos_labels_are_the_catalogues() -> None:
    """The external labels the prometheus role requires and the label the query dedups by."""
    from gwms_obs import catalogue

    constants = yaml.safe_load((ANSIBLE / "roles/prometheus/vars/main.yml").read_text())
    assert constants["prometheus_thanos_required_labels"] == [catalogue.FACTORY_LABEL, catalogue.REPLICA_LABEL]
    assert render.role_defaults("thanos")["thanos_query_replica_label"] == catalogue.REPLICA_LABEL
    hosts = yaml.safe_load((ANSIBLE / "inventories/multi-factory/hosts.yml").read_text())
    labels = [h["prometheus_external_labels"] for h in hosts["all"]["children"]["factory"]["hosts"].values()]
    assert all(set(x) == {catalogue.FACTORY_LABEL, catalogue.REPLICA_LABEL} for x in labels), labels
    # three factories, one of them an HA pair (same factory, its own replica each)
    factories = [x[catalogue.FACTORY_LABEL] for x in labels]
    assert len(set(factories)) == 3 and len(factories) == 4
    assert len({tuple(sorted(x.items())) for x in labels}) == len(labels)


def test_prometheus_runs_without_local_compaction_only_beside_a_sidecar() -> None:
    def flags(**overrides: Any) -> str:
        return render.render("prometheus", "prometheus.service.j2", **overrides)

    two_h = "--storage.tsdb.min-block-duration=2h \\\n  --storage.tsdb.max-block-duration=2h"
    assert "block-duration" not in flags()
    assert two_h in flags(thanos_components=["sidecar"])
    assert "block-duration" not in flags(thanos_components=["query", "store"])


def _thanos_unit(component: str, **overrides: Any) -> dict[str, list[str]]:
    text = render.render("thanos", f"thanos-{component}.service.j2", **overrides)
    out: dict[str, list[str]] = {}
    body = text.split("ExecStart=", 1)[1].split("\n")
    exec_lines = []
    for line in body:
        exec_lines.append(line.rstrip(" \\").strip())
        if not line.endswith("\\"):
            break
    out["exec"] = exec_lines
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", " ", "ExecStart")):
            k, v = line.split("=", 1)
            out.setdefault(k, []).append(v)
    return out


def test_thanos_units_carry_each_components_flags() -> None:
    side = _thanos_unit("sidecar")
    assert side["exec"][0] == "/usr/local/bin/thanos sidecar"
    assert {"--prometheus.url=http://127.0.0.1:9090", "--tsdb.path=/var/lib/prometheus/metrics2",
            "--objstore.config-file=/etc/thanos/objstore.yml", "--grpc-address=127.0.0.1:10901",
            "--http-address=127.0.0.1:10902"} <= set(side["exec"])  # fmt: skip
    # the TSDB's owner, and the thanos group for /etc/thanos and the bucket
    assert side["User"] == ["prometheus"] and side["SupplementaryGroups"] == ["thanos"]
    assert side["ReadWritePaths"] == ["/var/lib/prometheus/metrics2 /var/lib/thanos/bucket"]
    query = _thanos_unit("query")
    assert {"--query.replica-label=replica", "--endpoint.sd-config-file=/etc/thanos/endpoints.yml"} <= set(
        query["exec"]
    )
    assert not any(f.startswith(("--objstore", "--grpc-client-tls")) for f in query["exec"])
    assert "ReadWritePaths" not in query and query["User"] == ["thanos"]
    store = _thanos_unit("store")
    assert {"--data-dir=/var/lib/thanos/store", "--objstore.config-file=/etc/thanos/objstore.yml"} <= set(store["exec"])
    compact = _thanos_unit("compact")
    assert {"--wait", "--retention.resolution-raw=30d", "--retention.resolution-5m=180d",
            "--retention.resolution-1h=5y"} <= set(compact["exec"])  # fmt: skip
    assert "--downsampling.disable" not in compact["exec"]
    assert "--downsampling.disable" in _thanos_unit("compact", thanos_compact_downsampling=False)["exec"]
    # mutual TLS: the servers ask for a client certificate, the query presents one and checks the name
    tls = {"thanos_grpc_tls_cert": "C", "thanos_grpc_tls_key": "K", "thanos_grpc_tls_ca": "A",
           "thanos_grpc_tls_client_cert": "CC", "thanos_grpc_tls_client_key": "CK",
           "thanos_grpc_tls_server_name": "thanos-store.example.org"}  # fmt: skip
    for c in ("sidecar", "store"):
        assert "--grpc-server-tls-client-ca=/etc/thanos/grpc-ca.crt" in _thanos_unit(c, **tls)["exec"]
    q = _thanos_unit("query", **tls)["exec"]
    assert {"--grpc-client-tls-secure", "--grpc-client-server-name=thanos-store.example.org",
            "--grpc-client-tls-cert=/etc/thanos/grpc-client.crt"} <= set(q)  # fmt: skip


def test_thanos_binary_accepts_every_flag_of_the_units(tmp_path: Path) -> None:
    """Each unit's command line as thanos parses it: an unknown or misspelt flag fails here, not on a host."""
    binary = os.environ.get("GWMS_OBS_THANOS")
    if not binary or not Path(binary).exists():
        pytest.skip("thanos not built (make thanos; GWMS_OBS_THANOS)")
    for c in ("sidecar", "query", "store", "compact"):
        argv = _thanos_unit(c, thanos_grpc_tls_cert="C", thanos_grpc_tls_key="K", thanos_grpc_tls_ca="A",
                            thanos_grpc_tls_client_cert="CC", thanos_grpc_tls_client_key="CK",
                            thanos_grpc_tls_server_name="n")["exec"]  # fmt: skip
        # --help after the flags: kingpin parses (and refuses unknown) flags, then prints help and exits 0
        r = subprocess.run([binary, *argv[0].split()[1:], *argv[1:], "--help"], capture_output=True, text=True,
                           timeout=60, check=False)  # fmt: skip
        assert r.returncode == 0, (c, r.stderr[-2000:])
    r = subprocess.run([binary, "sidecar", "--no-such-flag", "--help"], capture_output=True, text=True, check=False)
    assert r.returncode != 0


def test_thanos_endpoints_come_from_the_inventorys_sidecars() -> None:
    hostvars = {
        "f1": {"thanos_components": ["sidecar"]},
        "f2": {"thanos_components": ["sidecar"], "thanos_sidecar_grpc_address": "0.0.0.0:19091"},
        "f3": {},  # a monitoring host without a sidecar
        "central": {"thanos_components": ["query", "store", "sidecar"]},
    }
    doc = yaml.safe_load(
        render.render(
            "thanos",
            "endpoints.yml.j2",
            thanos_components=["query", "store"],
            groups={"monitoring": ["f1", "f2", "f3", "central"]},
            hostvars=hostvars,
            inventory_hostname="central",
            thanos_query_extra_endpoints=["other-site.example.org:10905"],
        )
    )
    assert [e["address"] for e in doc["endpoints"]] == [
        "f1:10901", "f2:19091", "127.0.0.1:10901", "127.0.0.1:10905", "other-site.example.org:10905"
    ]  # fmt: skip
    assert yaml.safe_load(render.render("thanos", "endpoints.yml.j2")) == {"endpoints": []}


def test_grafana_datasource_points_at_the_global_query_when_there_is_one() -> None:
    local = _datasources(grafana_prometheus_basic_auth_user="gwms-obs", grafana_prometheus_basic_auth_password="p" * 16)
    assert local["prometheus"]["url"] == "http://localhost:9090" and local["prometheus"]["basicAuth"] is True
    ds = _datasources(
        grafana_thanos_query_url="http://127.0.0.1:10904",
        grafana_prometheus_basic_auth_user="gwms-obs",
        grafana_prometheus_basic_auth_password="p" * 16,
        grafana_prometheus_tls_ca="CA",
    )
    prom = ds["prometheus"]
    assert prom["url"] == "http://127.0.0.1:10904" and prom["uid"] == "gwms-obs-prometheus"
    assert "basicAuth" not in prom and "secureJsonData" not in prom and "tlsAuthWithCACert" not in prom["jsonData"]


def test_multi_factory_inventory_passes_with_real_secrets(tmp_path: Path) -> None:
    r = _preflight(tmp_path, _multi_factory_vault(tmp_path), inventory="multi-factory")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    for check in (
        "Require the factory and replica external labels",
        "Refuse two sidecars with the same external labels",
        "Refuse a StoreAPI (sidecar, store gateway) off loopback without mutual TLS",
        "Preflight of the central Thanos host",
    ):
        assert check in r.stdout, check


@pytest.mark.parametrize(
    "extra, limit, message",
    [
        ({"prometheus_external_labels": {"factory": "fnal"}}, "factory-fnal.example.org", "lacks replica"),
        ({"prometheus_external_labels": {"factory": "", "replica": "a"}}, "factory-fnal.example.org", "lacks"),
        ({"thanos_grpc_tls_key": ""}, "factory-fnal.example.org", "Thanos listeners"),
        ({"thanos_query_http_address": "0.0.0.0:10904"}, "global01.example.org", "Thanos listeners"),
        ({"thanos_grpc_tls_server_name": ""}, "global01.example.org", "thanos_grpc_tls_client_cert is set"),
        ({"vault_thanos_s3_secret_key": "minioadmin"}, "global01.example.org", "thanos_s3_access_key"),
        ({"thanos_components": ["sidecar", "ruler"]}, "factory-fnal.example.org", "each of sidecar"),
    ],
)
def test_multi_factory_preflight_refuses(tmp_path: Path, extra: dict[str, Any], limit: str, message: str) -> None:
    secrets = _multi_factory_vault(tmp_path)
    vault_keys = {k: v for k, v in extra.items() if k.startswith("vault_")}
    others = {k: v for k, v in extra.items() if not k.startswith("vault_")}
    r = _preflight(tmp_path, {**secrets, **vault_keys}, others, inventory="multi-factory", limit=limit)
    assert r.returncode != 0
    out = " ".join(r.stdout.split())  # the messages are folded YAML, wrapped anywhere
    assert message in out and "refusing to deploy" in out, r.stdout[-4000:]


def test_multi_factory_preflight_refuses_an_ha_pair_with_one_replica_label(tmp_path: Path) -> None:
    """Two Prometheus with the same factory and replica would ship colliding blocks."""
    inv = tmp_path / "inv"
    shutil.copytree(ANSIBLE / "inventories/multi-factory", inv)
    hosts = inv / "hosts.yml"
    hosts.write_text(hosts.read_text().replace("{factory: cern, replica: b}", "{factory: cern, replica: a}"))
    secrets = _multi_factory_vault(tmp_path)
    r = _preflight(tmp_path, secrets, inventory=str(inv), limit="factory-cern-b.example.org")
    assert r.returncode != 0
    assert "have the same external labels" in r.stdout and "refusing to deploy" in r.stdout, r.stdout[-4000:]


def test_the_exporter_role_installs_rrdtool_for_import_rrd_unless_turned_off() -> None:
    """`gwms-obs import-rrd` runs `rrdtool dump` on the factory host: the exporter role installs the
    distribution's package there, behind gwms_exporter_rrdtool, and the air-gapped test host's
    mirror (tests/support/nspawn.py) carries it, so the deployment test installs it too."""
    from tests.support import nspawn

    tasks = yaml.safe_load((ANSIBLE / "roles" / "gwms_exporter" / "tasks" / "main.yml").read_text())
    install = next(t for t in tasks if t.get("name") == "Install the exporter")["block"]
    (task,) = [t for t in install if (t.get("ansible.builtin.package") or {}).get("name") == "rrdtool"]
    assert task["when"] == "gwms_exporter_rrdtool | bool"
    assert render.role_defaults("gwms_exporter")["gwms_exporter_rrdtool"] is True
    spec = _specs("gwms_exporter")["main"]["options"]["gwms_exporter_rrdtool"]
    assert spec["type"] == "bool" and "import-rrd" in spec["description"]
    assert "rrdtool" in nspawn.DEBS
