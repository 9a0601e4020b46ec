"""Build the exporter's wheelhouse for air-gapped hosts: ``python -m tools.wheelhouse OUTDIR``.

One file, ``gwms-obs-<version>-wheelhouse.tar.gz``, holding the gwms-obs wheel
built from this repository, the wheels of all its dependencies and the compiled
readers' manylinux wheel (``make native``; installed where it fits), under a
top directory ``gwms-obs-<version>/``. The Ansible role gwms_exporter installs
it (checked against the sha256 printed here and written next to it as
``<file>.sha256``) and runs ``pip install --no-index --find-links`` on it, so
the host never needs a package index. Like render.py this reads the source
tree: it is a build tool, run by ``make wheelhouse`` and the deploy test.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from gwms_obs import __version__
from tools import ROOT

# The extras whose wheels the wheelhouse carries (pyproject.toml): `gwms-obs[controller,postgres]`
# installs from it with --no-index; the exporter alone needs none of them.
EXTRAS = ("controller", "postgres")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def native_wheels() -> list[Path]:
    """The compiled readers' wheel(s) that ``make native`` built (``GWMS_OBS_NATIVE_WHEELS``).

    Optional on a host (no wheel fits: the readers run in pure Python), so a
    wheelhouse without it is still whole; the Makefile always names it.
    """
    where = os.environ.get("GWMS_OBS_NATIVE_WHEELS")
    if not where:
        print("wheelhouse: GWMS_OBS_NATIVE_WHEELS unset: no compiled readers (pure Python)", file=sys.stderr)
        return []
    found = sorted(Path(where).glob("gwms_obs_native-*.whl"))
    if not found:
        raise SystemExit(f"wheelhouse: no gwms_obs_native wheel in {where}: run `make native`")
    return found


def build(out_dir: Path, source: Path = ROOT) -> tuple[Path, str]:
    """Write the wheelhouse tarball and its .sha256 into ``out_dir``; return (path, sha256)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    top = f"gwms-obs-{__version__}"
    out = out_dir / f"{top}-wheelhouse.tar.gz"
    with tempfile.TemporaryDirectory() as tmp:
        wheels = Path(tmp) / top
        # Built from a clean copy of what the package is made of: setuptools reuses the
        # tree's build/lib, and would ship modules since moved or deleted.
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md", *(p.name for p in source.glob("LICEN[CS]E*"))):
            shutil.copy2(source / name, src / name)
        shutil.copytree(
            source / "exporters", src / "exporters", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
        )
        subprocess.run(
            # with the controller's extras, so one wheelhouse installs the exporter and the controller
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--disable-pip-version-check",
                "-w",
                str(wheels),
                f"{src}[{','.join(EXTRAS)}]",
            ],
            check=True,
            timeout=900,
        )
        for wheel in native_wheels():
            shutil.copy2(wheel, wheels / wheel.name)
        # sorted members owned by root: nothing of the build machine leaks into the host
        with tarfile.open(f"{out}.tmp", "w:gz", format=tarfile.PAX_FORMAT) as tar:
            for path in [wheels, *sorted(wheels.iterdir())]:
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(tmp)))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                info.mode = 0o755 if path.is_dir() else 0o644
                if path.is_dir():
                    tar.addfile(info)
                else:
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
    Path(f"{out}.tmp").replace(out)
    digest = sha256(out)
    Path(f"{out}.sha256").write_text(f"{digest}  {out.name}\n")
    return out, digest


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tools.wheelhouse OUTDIR", file=sys.stderr)
        return 2
    path, digest = build(Path(args[0]))
    print(f"{digest}  {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
