"""The wheel holds the product only: installed into a clean venv, far from the repository, every
module of it imports, and none of it knows where a source tree would be.

This is how a factory host gets the exporter (the gwms_exporter role installs
the wheelhouse offline), so it is built the same way: ``tools.wheelhouse``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tools import ROOT, wheelhouse

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """(the venv's python, the modules of the gwms-obs wheel)."""
    tmp = tmp_path_factory.mktemp("wheel")
    tarball, _ = wheelhouse.build(tmp / "artifacts")
    with tarfile.open(tarball) as tar:
        tar.extractall(tmp / "house", filter="data")
    [house] = (tmp / "house").iterdir()
    [wheel] = house.glob("gwms_obs-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    modules = sorted(
        n.removesuffix(".py").removesuffix("/__init__").replace("/", ".") for n in names if n.endswith(".py")
    )
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--find-links",
            str(house),
            f"gwms-obs[{','.join(wheelhouse.EXTRAS)}]",
        ],
        check=True,
        timeout=600,
        cwd=tmp,
    )
    return py, modules


def test_wheel_holds_the_product_only(installed: tuple[Path, list[str]]) -> None:
    _, modules = installed
    assert "gwms_obs.pipeline" in modules and "gwms_obs.cli" in modules
    tops = {m.split(".")[0] for m in modules}
    assert tops == {"gwms_obs"}, f"the wheel ships more than the product: {tops}"


def test_every_module_imports_without_the_repository(installed: tuple[Path, list[str]], tmp_path: Path) -> None:
    py, modules = installed
    # -I: no PYTHONPATH, no user site, no current directory: only the venv.
    probe = (
        "import importlib, json, sys\n"
        "out = {}\n"
        "for m in sys.argv[1:]:\n"
        "    mod = importlib.import_module(m)\n"
        "    out[m] = mod.__file__\n"
        "print(json.dumps(out))\n"
    )
    r = subprocess.run(
        [str(py), "-I", "-c", probe, *modules], capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False
    )
    assert r.returncode == 0, r.stderr[-3000:]
    files = json.loads(r.stdout)
    venv = py.parent.parent.resolve()
    outside = {m: f for m, f in files.items() if not Path(f).resolve().is_relative_to(venv)}
    assert not outside, f"imported from outside the venv: {outside}"
    # Nothing of the product finds or names the source tree.
    for m, f in files.items():
        text = Path(f).read_text()
        assert str(ROOT) not in text, m
        for dev in ("from tools", "import tools", "from tests", "from dashboards", "parents[2]", "parents[3]"):
            assert dev not in text, f"{m} reaches the repository ({dev!r})"


def test_the_command_runs_from_the_venv(installed: tuple[Path, list[str]], tmp_path: Path) -> None:
    py, _ = installed
    out = tmp_path / "f"
    gwms = py.parent / "gwms-obs"
    subprocess.run([str(gwms), "simulate", "--out", str(out), "--pilots", "30", "--seed", "2"], check=True, timeout=300)

    def report(command: Path) -> object:
        r = subprocess.run(
            [str(command), "report", "--factory-dir", str(out), "--format", "json"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            check=False,
        )
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout)

    # The installed product accounts exactly as the development tree does.
    assert report(gwms) == report(Path(sys.executable).parent / "gwms-obs")
