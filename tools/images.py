"""The offline compose variant's images, built with no registry: ``python -m tools.images``.

Every image starts from one base, a Debian bookworm rootfs made by debootstrap
(tools/rootfs.py) and brought in with ``docker import``; what a service adds
comes from where a factory host gets it (docs/compose.md):

    prometheus, alertmanager   Debian's packages (apt inside the build)
    otelcol, jaeger            the pinned Go builds of `make otelcol jaeger`
    exporter, controller       its wheelhouse (tools/wheelhouse.py), pip --no-index
    mail                       tools/mailsink.py on Debian's python3-aiosmtpd

An image is tagged ``gwms-obs/<service>:<hash>``, the hash of its Dockerfile
(compose/offline/), its base and every file copied in (for the exporter: the
sources its wheel is built from), so an unchanged input never rebuilds and a
changed one always does. The compose override (compose/docker-compose.offline.yml)
names the images through ``GWMS_OBS_IMAGE_<SERVICE>``; ``--env-file`` writes
those for ``docker compose --env-file``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tools import ROOT, rootfs, wheelhouse

OFFLINE_DIR = ROOT / "compose" / "offline"
# wget: the healthchecks (the official images have busybox's); python3: the exporter and the sink
BASE_INCLUDE = ("ca-certificates", "wget", "python3", "python3-venv")
REPO = "gwms-obs"
BASE_FLAVOUR = "docker-base-1"  # bump when _prepare_base changes


def env_var(service: str) -> str:
    """The compose variable naming ``service``'s offline image."""
    return f"GWMS_OBS_IMAGE_{service.upper().replace('-', '_')}"


def _digest(h: hashlib._Hash, path: Path) -> None:
    h.update(path.name.encode())
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)


def _source_files() -> Iterator[Path]:
    """What the exporter's wheel is built from (tools/wheelhouse.py copies the same)."""
    yield ROOT / "pyproject.toml"
    yield ROOT / "README.md"
    for p in sorted((ROOT / "exporters").rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and ".egg-info" not in str(p):
            yield p


def _binary(env: str, make_target: str) -> Path:
    """A Go build of `make otelcol jaeger thanos` (the Makefile exports its path)."""
    path = os.environ.get(env)
    if not path or not Path(path).is_file():
        raise FileNotFoundError(f"{env} does not name a built binary: run `make {make_target}` first (or make it so)")
    return Path(path)


@dataclass(frozen=True)
class Spec:
    service: str
    # files hashed into the tag; the context gets them unless ``context`` makes its own
    inputs: Callable[[], list[Path]]
    context: Callable[[Path], None] | None = None

    @property
    def dockerfile(self) -> Path:
        return OFFLINE_DIR / f"{self.service}.Dockerfile"


def _copy(files: Callable[[], list[Path]]) -> Callable[[Path], None]:
    def put(ctx: Path) -> None:
        for f in files():
            shutil.copy2(f, ctx / f.name)

    return put


def _wheelhouse(ctx: Path) -> None:
    tar, _ = wheelhouse.build(ctx / "wh")
    shutil.move(tar, ctx / "wheelhouse.tar.gz")
    shutil.rmtree(ctx / "wh")


SPECS: tuple[Spec, ...] = (
    Spec("prometheus", lambda: []),
    Spec("alertmanager", lambda: []),
    Spec("otelcol", lambda: [_binary("GWMS_OBS_OTELCOL", "otelcol")]),
    Spec("jaeger", lambda: [_binary("GWMS_OBS_JAEGER", "jaeger")]),
    # one image for thanos-sidecar, thanos-store and thanos-query (thanos/compose.yml names it)
    Spec("thanos", lambda: [_binary("GWMS_OBS_THANOS", "thanos")]),
    # the compiled readers' wheel too: the image installs it where it fits, as the Ansible role does
    Spec("exporter", lambda: [*_source_files(), *wheelhouse.native_wheels()], _wheelhouse),
    # the same wheelhouse with the controller extra, as the gwms_controller role installs it
    Spec("controller", lambda: [*_source_files(), *wheelhouse.native_wheels()], _wheelhouse),
    Spec("mail", lambda: [ROOT / "tools" / "mailsink.py"]),
)


def _prepare_base(root: Path) -> None:
    (root / "etc/apt/sources.list").write_text(f"deb {rootfs.debian_mirror()} {rootfs.SUITE} main\n")
    # as in Debian's own images: a package's maintainer scripts never start its daemon in a build
    policy = root / "usr/sbin/policy-rc.d"
    policy.write_text("#!/bin/sh\nexit 101\n")
    policy.chmod(0o755)
    shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True)
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()


def base_tarball(log: Path) -> Path:
    return rootfs.tarball("docker", BASE_INCLUDE, log, _prepare_base, flavour=BASE_FLAVOUR)


def base_tag() -> str:
    return f"{REPO}/base:{rootfs.key(rootfs.SUITE, BASE_INCLUDE, BASE_FLAVOUR)}"


def tag(spec: Spec) -> str:
    h = hashlib.sha256()
    h.update(spec.dockerfile.read_bytes())
    h.update(base_tag().encode())
    for f in spec.inputs():
        _digest(h, f)
    return f"{REPO}/{spec.service}:{h.hexdigest()[:12]}"


def tags() -> dict[str, str]:
    """service -> the tag its image has (or will have once built); builds nothing."""
    return {s.service: tag(s) for s in SPECS}


def _exists(client: object, name: str) -> bool:
    import docker

    try:
        client.images.get(name)  # type: ignore[attr-defined]
    except docker.errors.ImageNotFound:
        return False
    return True


def build(log: Path, say: Callable[[str], None] = print) -> dict[str, str]:
    """Build every image whose tag is missing; return service -> tag."""
    import docker

    client = docker.from_env(timeout=900)
    base = base_tag()
    if not _exists(client, base):
        tar = base_tarball(log)
        say(f"images: importing {base} from {tar.name}")
        rootfs.run(["docker", "import", str(tar), base], log, timeout=600)
    out = {}
    for spec in SPECS:
        name = tag(spec)
        out[spec.service] = name
        if _exists(client, name):
            say(f"images: {name} (cached)")
            continue
        say(f"images: building {name}")
        with tempfile.TemporaryDirectory() as tmp:
            ctx = Path(tmp)
            shutil.copy2(spec.dockerfile, ctx / "Dockerfile")
            (spec.context or _copy(spec.inputs))(ctx)
            try:
                _, lines = client.images.build(path=str(ctx), tag=name, buildargs={"BASE": base}, rm=True, forcerm=True)
            except docker.errors.BuildError as e:
                text = "".join(str(c.get("stream", c.get("error", ""))) for c in e.build_log)
                with open(log, "a") as f:
                    f.write(text)
                raise RuntimeError(f"building {name} failed; see {log}:\n{text[-3000:]}") from e
            with open(log, "a") as f:
                f.write("".join(str(c.get("stream", "")) for c in lines))
    return out


def env_file_text(images: dict[str, str]) -> str:
    buf = io.StringIO()
    buf.write("# offline images for compose/docker-compose.offline.yml (python -m tools.images)\n")
    for service, name in sorted(images.items()):
        buf.write(f"{env_var(service)}={name}\n")
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.images", description=__doc__.split("\n\n")[0])
    p.add_argument("--env-file", type=Path, help="write GWMS_OBS_IMAGE_* here for docker compose --env-file")
    p.add_argument("--tags-only", action="store_true", help="compute the tags, build nothing")
    p.add_argument("--log", type=Path, default=rootfs.cache_dir() / "images-build.log")
    a = p.parse_args(argv)
    if a.tags_only:
        images = tags()
    else:
        a.log.parent.mkdir(parents=True, exist_ok=True)
        try:
            images = build(a.log)
        except (RuntimeError, FileNotFoundError, subprocess.SubprocessError) as e:
            print(f"images: {e}")
            return 1
    if a.env_file:
        a.env_file.parent.mkdir(parents=True, exist_ok=True)
        a.env_file.write_text(env_file_text(images))
    else:
        print(env_file_text(images), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
