"""The Jaeger role installs an official release tarball (the UI built in) from the artifact dir,
checked against its sha256, and falls back to the built binary (no UI) when none is set.

No official tarball is reachable here, so each test makes a release-shaped one
(``jaeger-<version>-linux-amd64/jaeger``, as Jaeger's releases are laid out) and runs the role's
install tasks (ansible/roles/jaeger/tasks/install.yml) on this machine, into a temporary directory.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_ansible import ANSIBLE, _run, _tool

VERSION = "2.13.0"  # the Makefile's JAEGER_V2
RELEASE = f"jaeger-{VERSION}-linux-amd64"
UI_BINARY = b"#!/bin/sh\necho 'jaeger with its UI'\n"
BUILT_BINARY = b"#!/bin/sh\necho 'jaeger built here, no UI'\n"

# The role's defaults, then the test's values; the handler the install notifies is a no-op here
# (no systemd unit to restart). include_tasks, not include_role: the role's handlers would restart it.
PLAY = f"""
- name: Install Jaeger as the role does, into a temporary directory
  hosts: localhost
  connection: local
  gather_facts: false
  vars_files: [{ANSIBLE / "roles" / "jaeger" / "defaults" / "main.yml"}]
  tasks:
    - name: Install
      ansible.builtin.include_tasks: {ANSIBLE / "roles" / "jaeger" / "tasks" / "install.yml"}
  handlers:
    - name: Restart jaeger
      listen: restart jaeger
      ansible.builtin.debug:
        msg: restarted
"""


def _tarball(path: Path, members: dict[str, bytes]) -> str:
    """A gzipped tar of ``members`` (name -> content, executable), as a release is; its sha256."""
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tf.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _install(tmp_path: Path, **values: Any) -> tuple[Any, Path]:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    dest = tmp_path / "host" / "usr-local-bin" / "jaeger"
    dest.parent.mkdir(parents=True, exist_ok=True)
    extra = {
        "jaeger_artifact_dir": str(tmp_path / "artifacts"),
        "jaeger_binary": str(dest),
        "jaeger_release_dir": str(tmp_path / "host" / "cache"),
        **values,
    }
    r = _run(
        _tool("ansible-playbook"),
        *("-i", "localhost,", str(play), "-e", json.dumps(extra)),
        *("-e", f"ansible_python_interpreter={sys.executable}"),
    )
    return r, dest


@pytest.fixture
def artifacts(tmp_path: Path) -> dict[str, str]:
    """The operator's artifact dir: the built binary and a release tarball; their sha256."""
    d = tmp_path / "artifacts"
    d.mkdir()
    (d / "jaeger").write_bytes(BUILT_BINARY)
    release = _tarball(d / f"{RELEASE}.tar.gz", {f"{RELEASE}/jaeger": UI_BINARY, f"{RELEASE}/README": b"x"})
    return {"built": hashlib.sha256(BUILT_BINARY).hexdigest(), "release": release}


def test_the_release_is_installed_when_its_sha256_matches(tmp_path: Path, artifacts: dict[str, str]) -> None:
    r, dest = _install(
        tmp_path,
        jaeger_binary_sha256=artifacts["built"],
        jaeger_release_file=f"{RELEASE}.tar.gz",
        jaeger_release_sha256=artifacts["release"],
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert dest.read_bytes() == UI_BINARY  # the release's jaeger, not the built one
    assert os.stat(dest).st_mode & 0o777 == 0o755
    assert "RUNNING HANDLER [Restart jaeger]" in r.stdout  # a new binary restarts the unit
    # only the binary is unpacked from the release
    assert not (tmp_path / "host" / "cache" / RELEASE / "README").exists()
    # run again: nothing changes, nothing restarts
    again, _ = _install(
        tmp_path,
        jaeger_binary_sha256=artifacts["built"],
        jaeger_release_file=f"{RELEASE}.tar.gz",
        jaeger_release_sha256=artifacts["release"],
    )
    assert again.returncode == 0, again.stdout + again.stderr
    assert "changed=0" in again.stdout and "RUNNING HANDLER" not in again.stdout, again.stdout[-3000:]


@pytest.mark.parametrize("sha", ["wrong", "missing"])
def test_a_release_is_refused_unless_its_sha256_matches(tmp_path: Path, artifacts: dict[str, str], sha: str) -> None:
    r, dest = _install(
        tmp_path,
        jaeger_binary_sha256=artifacts["built"],
        jaeger_release_file=f"{RELEASE}.tar.gz",
        jaeger_release_sha256=hashlib.sha256(b"another tarball").hexdigest() if sha == "wrong" else "",
    )
    assert r.returncode != 0
    said = "does not match the expected" if sha == "wrong" else "refuses to install an unchecked"
    assert said in r.stdout, r.stdout[-3000:]
    assert not dest.exists()  # neither the release nor, silently, the built binary


def test_a_release_without_its_binary_is_refused(tmp_path: Path, artifacts: dict[str, str]) -> None:
    other = tmp_path / "artifacts" / "jaeger-other.tar.gz"
    sha = _tarball(other, {"something/else": b"x"})
    r, dest = _install(tmp_path, jaeger_release_file=other.name, jaeger_release_sha256=sha)
    assert r.returncode != 0
    assert "has no jaeger-other/jaeger" in r.stdout, r.stdout[-3000:]
    assert not dest.exists()


def test_without_a_release_the_built_binary_is_installed(tmp_path: Path, artifacts: dict[str, str]) -> None:
    r, dest = _install(tmp_path, jaeger_binary_sha256=artifacts["built"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert dest.read_bytes() == BUILT_BINARY
    assert not (tmp_path / "host" / "cache").exists()


def test_the_release_defaults_name_the_built_version() -> None:
    """The release's default member path and the version the config is validated for are the Makefile's."""
    defaults = yaml.safe_load((ANSIBLE / "roles" / "jaeger" / "defaults" / "main.yml").read_text())
    assert defaults["jaeger_release_file"] == "" and defaults["jaeger_release_member"] == ""
    makefile = (ANSIBLE.parent / "Makefile").read_text()
    assert f"JAEGER_V2 := v{VERSION}\n" in makefile
