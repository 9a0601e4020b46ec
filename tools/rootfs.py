"""Debian rootfs tarballs made with debootstrap, cached by what went into them.

One builder for the two places a test needs a Debian without a registry: the
systemd host the deploy test boots with systemd-nspawn (tests/support/nspawn.py)
and the base image of the offline compose variant (tools/images.py, through
``docker import``). A tarball's name carries a hash of its suite, package list
and flavour, so a changed list builds a new one and an unchanged one never
rebuilds; older entries of the same flavour are pruned.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

SUITE = "bookworm"


def cache_dir() -> Path:
    """The versioned cache dir (the Makefile's CACHE_DIR, passed as GWMS_OBS_CACHE_DIR)."""
    env = os.environ.get("GWMS_OBS_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gwms-obs" / "v1"


def key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:12]


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 or one-line sources)."""
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for f in files:
        if not f.is_file():
            continue
        text = f.read_text(errors="replace")
        for m in re.finditer(r"^URIs:\s*(\S+)", text, re.M):
            if "security" not in m.group(1) and "debian" in m.group(1):
                return m.group(1)
        for m in re.finditer(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+bookworm\s", text, re.M):
            return m.group(1)
    return "http://deb.debian.org/debian"


def run(cmd: Sequence[str], log: Path, timeout: float, **kw: object) -> None:
    """Run ``cmd`` with its output appended to ``log``; RuntimeError with the log's tail if it fails."""
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        r = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=timeout, check=False, **kw)  # type: ignore[call-overload]
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({r.returncode}); see {log}:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def building(entry: Path) -> Iterator[None]:
    """Hold ``entry``'s build lock: the test workers of one run (pytest-xdist) share the cache,
    and two of them building one entry would write the same temporary files. Check for the entry
    again inside: the other worker may have built it meanwhile."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    with open(entry.parent / f".{entry.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def prune(keep: Path, pattern: str) -> None:
    """Drop cache entries of older package lists (the new one replaces them)."""
    for old in keep.parent.glob(pattern):
        if old != keep:
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


def tarball(
    where: str, include: Sequence[str], log: Path, prepare: Callable[[Path], None], *, flavour: str = ""
) -> Path:
    """A cached tarball of a minbase ``SUITE`` rootfs with ``include``, finished by ``prepare(root)``.

    ``where`` is its folder under the cache dir; ``flavour`` names what
    ``prepare`` does, so two preparations of one package list do not share a
    cache entry.
    """
    parts: tuple[object, ...] = (SUITE, tuple(include), flavour) if flavour else (SUITE, tuple(include))
    name = f"{SUITE}-minbase{'-' + flavour if flavour else ''}"
    tar = cache_dir() / where / f"{name}-{key(*parts)}.tar"
    if tar.exists():
        return tar
    with building(tar):
        if not tar.exists():
            _build_tarball(tar, include, log, prepare)
    prune(tar, f"{name}-*.tar")
    return tar


def _build_tarball(tar: Path, include: Sequence[str], log: Path, prepare: Callable[[Path], None]) -> None:
    with tempfile.TemporaryDirectory(dir=tar.parent) as tmp:
        root = Path(tmp) / "rootfs"
        run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(include)}", SUITE, str(root), debian_mirror()],
            log,
            timeout=900,
        )
        prepare(root)
        run(["tar", "--numeric-owner", "-C", str(root), "-cf", f"{tar}.tmp", "."], log, timeout=300)
        os.replace(f"{tar}.tmp", tar)
