"""README's Deployment steps, followed literally in a copy of the repository, find the artifacts.

The ```sh block of README's "## Deployment" section is parsed and run step by
step in a temporary copy of the repository, so a change to the README that
this test does not know fails it. What cannot run here has a stand-in:

* ``make deploy-artifacts`` (Go builds, a pip wheelhouse): files of its names
  are written where the Makefile's recipe (``make -n deploy-artifacts``,
  ``make -s print-ARTIFACTS_DIR``) would put them;
* the operator's edits ("set the hosts and the sha256s", "after filling in the
  secrets"): the artifacts' sha256s go into the copied inventory; the hosts
  stay, run with a local connection;
* ``ansible-playbook ... deploy.yml``: a playbook beside deploy.yml (so
  ``playbook_dir`` is the same) whose plays have deploy.yml's hosts and run,
  for each of deploy.yml's roles, that role's own ``gwms_artifact`` tasks
  (copied from its tasks/main.yml) through the real gwms_artifact role minus
  its copy to the host: the sha256 check on the controller.

The ``cp`` and ``ansible-vault encrypt`` steps run for real.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gwms_obs import __version__
from tools import ROOT
from tools.render import role_defaults

BIN = Path(sys.prefix) / "bin"
INVENTORIES = ["single-host", "multi-host"]
CHECK_PLAYBOOK = "readme-deploy-check.yml"
CHECK_TASKS = "readme_deploy_check.yml"
VAULT_PASS = "gwms-obs-readme-test-vault-pass\n"
INCLUDE_ROLE = "ansible.builtin.include_role"


def readme_steps(readme: Path) -> list[list[str]]:
    """The commands of the ```sh block of README's "## Deployment" section, comments dropped."""
    text = readme.read_text()
    section = re.search(r"^## Deployment\n(.*?)(?=^## )", text, re.M | re.S)
    assert section, "README.md has no '## Deployment' section"
    block = re.search(r"^```sh\n(.*?)^```", section.group(1), re.M | re.S)
    assert block, "README's Deployment section has no ```sh block"
    return [argv for line in block.group(1).splitlines() if (argv := shlex.split(line, comments=True))]


def _make_env() -> dict[str, str]:
    # under `make test` the outer make's flags would reach these makes
    return {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


def _make(repo: Path, *args: str) -> str:
    r = subprocess.run(
        ["make", "-C", str(repo), "--no-print-directory", *args],
        env=_make_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def make_deploy_artifacts_stand_in(repo: Path) -> tuple[Path, dict[str, str]]:
    """Write what `make deploy-artifacts` writes, by name and place; return (dir, name -> sha256)."""
    out_dir = _make(repo, "-s", "print-ARTIFACTS_DIR").strip()
    assert out_dir, "the Makefile has no ARTIFACTS_DIR"
    names: list[str] = []
    for line in _make(repo, "-n", "deploy-artifacts").splitlines():
        for cmd in line.split("&&"):
            argv = shlex.split(cmd)
            if argv[:1] == ["cp"] and len(argv) == 3 and Path(argv[2]).parent == Path(out_dir):
                names.append(Path(argv[2]).name)
            elif "tools.wheelhouse" in argv:
                assert argv[-1] == out_dir, f"the wheelhouse goes to {argv[-1]}, not ARTIFACTS_DIR {out_dir}"
                names.append(f"gwms-obs-{__version__}-wheelhouse.tar.gz")  # tools/wheelhouse.py's name
    want = ["otelcol-gwms", "jaeger", "thanos", f"gwms-obs-{__version__}-wheelhouse.tar.gz"]
    assert sorted(names) == sorted(want), names
    arts = repo / out_dir
    arts.mkdir(parents=True)
    shas = {}
    for name in names:
        blob = f"stand-in for {name}\n".encode()
        (arts / name).write_bytes(blob)
        shas[name] = hashlib.sha256(blob).hexdigest()
    return arts, shas


def _copy_repo(dest: Path) -> Path:
    """What the Deployment steps and the Makefile's parsing read: README, Makefile, ansible/."""
    repo = dest / "gwms-obs"
    repo.mkdir()
    for name in ("README.md", "Makefile", "pyproject.toml"):
        shutil.copy2(ROOT / name, repo / name)
    (repo / "otel-collector").mkdir()
    shutil.copy2(ROOT / "otel-collector" / "builder-config.yaml", repo / "otel-collector")
    skip = shutil.ignore_patterns(".ansible", "__pycache__")

    def ignore(src: str, names: list[str]) -> set[str]:
        # an operator's own inventory (inventories/mysite) in this work tree is not the README's fresh copy
        if Path(src) == ROOT / "ansible" / "inventories":
            return set(skip(src, names)) | {n for n in names if n not in INVENTORIES}
        return set(skip(src, names))

    shutil.copytree(ROOT / "ansible", repo / "ansible", ignore=ignore)
    return repo


def _artifact_tasks(tasks: list[dict[str, Any]], when: list[Any], task_dir: Path) -> list[dict[str, Any]]:
    """The role's `include_role: gwms_artifact` tasks, with the conditions of their enclosing blocks.

    Each becomes a block: the include as the role has it, then a note of what
    gwms_artifact looked for on the controller (its registered stat). The roles
    name their modules fully (ansible-lint's production profile), so
    ansible.builtin.include_role is the one spelling to look for.
    """
    found = []
    for t in tasks or []:
        here = [*when, *([t["when"]] if isinstance(t.get("when"), str) else t.get("when", []))]
        if "block" in t:
            found += _artifact_tasks(t["block"], here, task_dir)
        elif isinstance(t.get("ansible.builtin.import_tasks"), str):  # a file of the role's own tasks
            found += _artifact_tasks(
                yaml.safe_load((task_dir / t["ansible.builtin.import_tasks"]).read_text()), here, task_dir
            )
        elif t.get(INCLUDE_ROLE, {}).get("name") == "gwms_artifact":
            # with the include's own vars, so gwms_artifact_dir/_file resolve as they did for the role
            note = "{'path': gwms_artifact_dir ~ '/' ~ gwms_artifact_file, 'exists': gwms_artifact_stat.stat.exists}"
            block: dict[str, Any] = {
                "name": t["name"],
                "block": [
                    {"name": t["name"], INCLUDE_ROLE: {"name": "gwms_artifact"}, "vars": t["vars"]},
                    {
                        "name": "Note what was looked for",
                        "vars": t["vars"],
                        "ansible.builtin.set_fact": {
                            "readme_checked": f"{{{{ readme_checked | default([]) + [{note}] }}}}"
                        },
                    },
                ],
            }
            if here:
                block["when"] = here
            found.append(block)
    return found


def _without_copies(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """gwms_artifact's tasks minus the ones that write to the host (the copy, the mirror download)."""
    out = []
    for t in tasks:
        if "block" in t:
            out.append({**t, "block": _without_copies(t["block"])})
        elif not {"ansible.builtin.copy", "ansible.builtin.get_url"} & set(t):
            out.append(t)
    return out


def write_check_playbook(ansible: Path, out: Path) -> list[str]:
    """The check playbook beside deploy.yml; returns the roles whose artifacts it checks.

    Its last play writes, per host, every `*_artifact_dir` as the inventory
    resolves it and what the roles looked for, to ``out/<host>.json``.
    """
    checked: list[str] = []
    plays: list[dict[str, Any]] = []
    for play in yaml.safe_load((ansible / "deploy.yml").read_text()):
        tasks = []
        for role in play.get("roles", []):
            task_dir = ansible / "roles" / role / "tasks"
            found = _artifact_tasks(yaml.safe_load((task_dir / "main.yml").read_text()), [], task_dir)
            if found:
                (ansible / "roles" / role / "tasks" / CHECK_TASKS).write_text(yaml.safe_dump(found, sort_keys=False))
                tasks.append({"name": f"Artifacts of {role}", INCLUDE_ROLE: {"name": role, "tasks_from": CHECK_TASKS}})
                checked.append(role)
        if tasks:
            plays.append({"name": play["name"], "hosts": play["hosts"], "gather_facts": False, "tasks": tasks})
    report = (
        "{{ {'dirs': dict(names | zip(query('vars', *names))), 'checked': readme_checked | default([])} | to_json }}"
    )
    plays.append(
        {
            "name": "What each host resolved and looked for",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Write it on the controller",
                    "vars": {"names": "{{ query('varnames', '_artifact_dir$') }}"},
                    "ansible.builtin.copy": {
                        "content": report,
                        "dest": f"{out}/{{{{ inventory_hostname }}}}.json",
                        "mode": "0644",
                    },
                    "delegate_to": "localhost",
                }
            ],
        }
    )
    gwms_artifact = ansible / "roles" / "gwms_artifact" / "tasks" / "main.yml"
    gwms_artifact.write_text(
        yaml.safe_dump(_without_copies(yaml.safe_load(gwms_artifact.read_text())), sort_keys=False)
    )
    (ansible / CHECK_PLAYBOOK).write_text(yaml.safe_dump(plays, sort_keys=False))
    return checked


def _set_sha256s(inventory_dir: Path, shas: dict[str, str]) -> None:
    """The operator's edit, "set the sha256s", in the copied inventory's group_vars/all/main.yml."""
    main = inventory_dir / "group_vars" / "all" / "main.yml"
    by_var = {
        "otel_collector_binary_sha256": shas["otelcol-gwms"],
        "jaeger_binary_sha256": shas["jaeger"],
        "thanos_binary_sha256": shas["thanos"],
        "gwms_exporter_wheelhouse_sha256": shas[f"gwms-obs-{__version__}-wheelhouse.tar.gz"],
    }
    text = main.read_text()
    for var, sha in by_var.items():
        text, n = re.subn(rf'^{var}: ""', f'{var}: "{sha}"', text, flags=re.M)
        # Thanos only where the inventory deploys it (multi-factory)
        assert n == 1 or (var == "thanos_binary_sha256" and var not in text), f"{main}: no empty {var} to fill in"
    main.write_text(text)


@pytest.mark.parametrize("inventory", INVENTORIES)
def test_readme_deployment_steps_find_the_artifacts(tmp_path: Path, inventory: str) -> None:
    for tool in ("ansible-playbook", "ansible-vault"):
        if not (BIN / tool).exists():
            pytest.skip(f"{tool} not installed (pip install -e '.[dev]')")
    repo = _copy_repo(tmp_path)
    vault_pass = tmp_path / "vault-pass"
    vault_pass.write_text(VAULT_PASS)
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "NO_COLOR": "1", "PATH": f"{BIN}:{os.environ['PATH']}"}
    cwd = repo
    arts: Path | None = None
    shas: dict[str, str] = {}
    ran: list[str] = []
    out = tmp_path / "resolved"
    out.mkdir()
    for argv in readme_steps(repo / "README.md"):
        step = shlex.join(argv)
        if argv == ["make", "deploy-artifacts"]:
            arts, shas = make_deploy_artifacts_stand_in(cwd)
        elif argv[0] == "cd" and len(argv) == 2:
            cwd = (cwd / argv[1]).resolve()
        elif argv[:2] == ["cp", "-r"] and argv[2] == "inventories/single-host":
            # "or multi-host": the same step with the other inventory
            subprocess.run([*argv[:2], f"inventories/{inventory}", *argv[3:]], cwd=cwd, check=True, timeout=60)
        elif argv[0] == "cp":
            subprocess.run(argv, cwd=cwd, check=True, timeout=60)
        elif argv[:2] == ["ansible-vault", "encrypt"]:
            subprocess.run(
                [str(BIN / argv[0]), *argv[1:2], "--vault-password-file", str(vault_pass), *argv[2:]],
                cwd=cwd,
                env=env,
                check=True,
                capture_output=True,
                timeout=60,
            )
            assert (cwd / argv[-1]).read_text().startswith("$ANSIBLE_VAULT")
        elif argv[0] == "ansible-playbook" and "deploy.yml" in argv and "-i" in argv:
            inventory_file = cwd / argv[argv.index("-i") + 1]
            assert shas, "the playbook runs before `make deploy-artifacts`"
            _set_sha256s(inventory_file.parent, shas)
            assert (cwd / "deploy.yml").is_file()
            checked = write_check_playbook(cwd, out)
            # grafana's runs only with grafana_install_method: artifact (a package make does not build)
            roles = ["grafana", "gwms_controller", "gwms_exporter", "jaeger", "otel_collector", "thanos"]
            assert sorted(set(checked)) == roles, checked  # thanos is in two plays (sidecar, central)
            cmd = [CHECK_PLAYBOOK if a == "deploy.yml" else a for a in argv if a != "--ask-vault-pass"]
            r = subprocess.run(
                [
                    str(BIN / cmd[0]),
                    *cmd[1:],
                    "--vault-password-file",
                    str(vault_pass),
                    "-e",
                    "ansible_connection=local",
                    "-e",
                    f"ansible_python_interpreter={sys.executable}",
                ],
                cwd=cwd,
                env={**env, "ANSIBLE_CONFIG": str(cwd / "ansible.cfg")},
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
        else:
            pytest.fail(f"README's Deployment has a step this test does not know: {step}")
        ran.append(argv[0])
    assert ran.count("ansible-playbook") == 1 and "make" in ran, ran
    assert arts is not None

    # every host of the copied inventory: each *_artifact_dir the roles have is the Makefile's ARTIFACTS_DIR,
    # and each role's artifact was looked for there and found, its sha256 matching (gwms_artifact's own check)
    roles = ("otel_collector", "jaeger", "gwms_exporter", "grafana", "thanos")
    want_vars = {k for role in roles for k in role_defaults(role)}
    want_vars = {k for k in want_vars if k.endswith("_artifact_dir")}
    hosts = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert hosts, "the check playbook reported no host"
    looked_for: set[Path] = set()
    for host, got in hosts.items():
        assert want_vars <= set(got["dirs"]), f"{host}: the inventory sets none of {want_vars - set(got['dirs'])}"
        for var in want_vars:
            assert Path(got["dirs"][var]).resolve() == arts.resolve(), f"{host} {var}: {got['dirs'][var]}, not {arts}"
        assert got["checked"], f"{host}: no artifact looked for"
        for c in got["checked"]:
            assert c["exists"] is True, c
            looked_for.add(Path(c["path"]).resolve())
    # Thanos's binary only where a host runs a Thanos component (none in these inventories by default)
    every = {(arts / name).resolve() for name in shas}
    assert every - {(arts / "thanos").resolve()} <= looked_for <= every
