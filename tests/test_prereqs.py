"""`make test` on a fresh machine: tools/prereqs.sh installs or names the command, conftest fails unlisted skips."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import conftest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tools" / "prereqs.sh"
EVERY_PACKAGE = (
    "prometheus prometheus-alertmanager systemd-container debootstrap dpkg-dev shellcheck curl docker.io"
    " chromium chromium-driver postgresql rrdtool python3-venv"
)
INSTALL = f"sudo apt-get install -y --no-install-recommends {EVERY_PACKAGE}\n"


def prereqs(empty: Path, *args: str, as_user: bool = False, **env: str) -> subprocess.CompletedProcess[str]:
    """The script with nothing findable (its search path is an empty dir)."""
    cmd = ["bash", str(SCRIPT), *args]
    if as_user and os.geteuid() == 0:  # nobody, so the non-root path runs here too
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *cmd]
    full_env = {"PATH": os.environ["PATH"], "PYTHON": "python3", "GWMS_OBS_PREREQS_PATH": str(empty), **env}
    return subprocess.run(cmd, env=full_env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    (tmp_path / "empty").mkdir()
    return tmp_path / "empty"


def test_check_names_the_exact_install_command(empty: Path) -> None:
    r = prereqs(empty, "--check")
    assert r.returncode == 1, r.stderr
    assert f"missing Debian packages: {EVERY_PACKAGE}\n" in r.stderr
    assert "sudo make prereqs\n" in r.stderr and INSTALL in r.stderr
    assert "installing" not in r.stdout + r.stderr  # --check never installs, even as root


def test_not_root_fails_with_the_command_and_installs_nothing(empty: Path) -> None:
    r = prereqs(empty, as_user=True)
    assert r.returncode == 1, r.stderr
    assert INSTALL in r.stderr and "GWMS_OBS_ALLOW_SKIP=1 make test" in r.stderr
    assert "not root: tests/test_deploy_nspawn.py" in r.stderr and "run: sudo make test" in r.stderr
    assert "installing" not in r.stdout + r.stderr


def test_allow_skip_is_a_warning(empty: Path) -> None:
    r = prereqs(empty, as_user=True, GWMS_OBS_ALLOW_SKIP="1")
    assert r.returncode == 0, r.stderr
    assert INSTALL in r.stderr and "GWMS_OBS_ALLOW_SKIP=1: the tests needing these are skipped" in r.stderr


def test_bad_usage(empty: Path) -> None:
    assert prereqs(empty, "--install").returncode == 2


def test_scripts_shellcheck_clean() -> None:
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")  # a failure under make test (tests/conftest.py)
    r = subprocess.run(
        ["shellcheck", str(SCRIPT), str(ROOT / ".ci" / "run")], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stdout


# --- tests/conftest.py ----------------------------------------------------------------------------
INNER = """
import pytest

def test_unlisted_call():
    pytest.skip("prometheus not installed")

@pytest.mark.skipif(True, reason="Debian prometheus not installed")
def test_unlisted_mark():
    pass

def test_listed():
    pytest.skip("no Grafana image: grafana/grafana is not loaded and cannot be pulled")

@pytest.mark.xfail(reason="expected")
def test_xfail():
    raise AssertionError

def test_pass():
    pass
"""


def run_inner(tmp_path: Path, **env: str) -> str:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_inner.py").write_text(INNER)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GWMS_OBS_STRICT", "GWMS_OBS_ALLOW", "PYTEST"))}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider", "-rA", "test_inner.py"],
        cwd=tmp_path, env={**base, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **env},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return r.stdout.splitlines()[-1]


def test_strict_turns_an_unlisted_skip_into_a_failure(tmp_path: Path) -> None:
    last = run_inner(tmp_path, GWMS_OBS_STRICT_SKIPS="1")
    # the call-time skip fails, the skipif mark errors at setup; the listed skip and the xfail stay
    assert "1 failed, 1 passed, 1 skipped, 1 xfailed, 1 error" in last, last


def test_not_strict_or_allowed_skips_stay_skips(tmp_path: Path) -> None:
    assert "1 passed, 3 skipped, 1 xfailed" in run_inner(tmp_path)
    assert "1 passed, 3 skipped, 1 xfailed" in run_inner(tmp_path, GWMS_OBS_STRICT_SKIPS="1", GWMS_OBS_ALLOW_SKIP="1")


def test_dashboard_linter_skip_allowed_only_when_the_proxy_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GWMS_OBS_DASHBOARD_LINTER", str(tmp_path / "dashboard-linter-v0"))
    reason = f"dashboard-linter not built at {tmp_path} (`make dashboard-linter` says why)"
    assert not conftest.allowed(reason)  # never tried
    log = tmp_path / "dashboard-linter-build.log"
    log.write_text("make: go: No such file or directory\n")
    assert not conftest.allowed(reason)
    log.write_text("reading https://proxy.golang.org/github.com/grafana/...zip: 403 Forbidden\n")
    assert conftest.allowed(reason)
    assert not conftest.allowed("systemd-nspawn needs root")
