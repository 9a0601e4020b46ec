"""A Debian bookworm host with systemd as PID 1, booted with systemd-nspawn, for the deploy test.

PID 1 of the test machine is not systemd, so roles that manage services are
never run against it; they run inside a container whose init is systemd
(``systemd-nspawn -b``), in its own private network namespace (only a
loopback there), so every service it starts listens where nothing else on
the machine can clash with it.

The container is air-gapped like a factory host: its apt source is a local
flat repository of .debs (what an operator's mirror would serve), bind-mounted
read-only. The rootfs (debootstrap, ~1 min) and the .debs are cached under the
versioned cache dir (``GWMS_OBS_CACHE_DIR``, the Makefile's ``CACHE_DIR``);
their file names carry a hash of what went into them, so a changed package
list builds a new cache entry and an unchanged one never rebuilds.

Every process started here is stopped by the context manager that started
it, by its PID, in bounded waits.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from gwms_obs import __version__
from tools import rootfs, wheelhouse

SUITE = rootfs.SUITE
# systemd as init, and what Ansible needs on a managed Debian host (python3, python3-apt;
# iproute2: the network facts, e.g. the default IPv4 address the multi-host inventory listens on).
INCLUDE = ("systemd", "systemd-sysv", "dbus", "python3", "python3-apt", "iproute2")
# what the roles install from the distribution (the air-gapped host's mirror serves these)
DEBS = ("prometheus", "prometheus-alertmanager", "python3-venv", "rrdtool")
MIRROR_IN_CONTAINER = "/srv/gwms-mirror"


def unavailable() -> str | None:
    """Why a systemd-nspawn host cannot be built here (None when it can)."""
    if os.geteuid() != 0:
        return "systemd-nspawn needs root"
    for tool in ("systemd-nspawn", "debootstrap", "nsenter", "dpkg-scanpackages"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install systemd-container debootstrap dpkg-dev)"
    return None


def _air_gapped(root: Path) -> None:
    (root / "etc/hostname").write_text("factory-test\n")
    (root / "etc/apt/sources.list").write_text("")  # air-gapped: the test points apt at its own mirror
    shutil.rmtree(root / "var/lib/apt/lists", ignore_errors=True)
    (root / "var/lib/apt/lists/partial").mkdir(parents=True)


def rootfs_tarball(log: Path) -> Path:
    """A cached tarball of a minimal bookworm rootfs with systemd (built once, ~1 min)."""
    return rootfs.tarball("nspawn", INCLUDE, log, _air_gapped)


def deb_repo(log: Path) -> Path:
    """A cached flat apt repository with DEBS and their dependencies missing from the rootfs."""
    repo = rootfs.cache_dir() / "nspawn" / f"debs-{SUITE}-{rootfs.key(SUITE, INCLUDE, DEBS)}"
    if (repo / "Packages").exists():
        return repo
    tar = rootfs_tarball(log)
    with rootfs.building(repo):
        if not (repo / "Packages").exists():
            _build_deb_repo(repo, tar, log)
    rootfs.prune(repo, f"debs-{SUITE}-*")
    return repo


def _build_deb_repo(repo: Path, tar: Path, log: Path) -> None:
    mirror = rootfs.debian_mirror()
    with tempfile.TemporaryDirectory(dir=repo.parent) as tmp:
        root = Path(tmp) / "rootfs"
        root.mkdir()
        rootfs.run(["tar", "--numeric-owner", "-C", str(root), "-xf", str(tar)], log, timeout=300)
        (root / "etc/apt/sources.list").write_text(f"deb {mirror} {SUITE} main\n")
        shutil.copy("/etc/resolv.conf", root / "etc/resolv.conf")
        apt = ["chroot", str(root), "apt-get", "-q", "-o", "Acquire::Retries=3"]
        rootfs.run([*apt, "update"], log, timeout=300)
        rootfs.run(
            [*apt, "install", "-y", "--download-only", "--no-install-recommends", *DEBS],
            log,
            timeout=600,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        staged = Path(tmp) / "repo"
        staged.mkdir()
        for deb in (root / "var/cache/apt/archives").glob("*.deb"):
            shutil.copy2(deb, staged / deb.name)
        with open(staged / "Packages", "wb") as out:
            subprocess.run(
                ["dpkg-scanpackages", "--multiversion", "."], cwd=staged, stdout=out, check=True, timeout=120
            )
        shutil.rmtree(repo, ignore_errors=True)
        os.replace(staged, repo)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


class Container:
    """A booted container; ``leader`` is the PID (in our namespace) of its systemd."""

    def __init__(self, root: Path, proc: subprocess.Popen[bytes], leader: int, log: Path) -> None:
        self.root = root
        self.proc = proc
        self.leader = leader
        self.log = log

    def exec(
        self, *cmd: str, timeout: float = 120, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` inside every namespace of the container (mount, pid, net, ...)."""
        full = [
            "nsenter",
            "-t",
            str(self.leader),
            "-a",
            *(["env", *(f"{k}={v}" for k, v in env.items())] if env else []),
            *cmd,
        ]
        r = subprocess.run(full, capture_output=True, text=True, timeout=timeout, check=False)
        if check and r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} -> {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
        return r

    def netns(self, *cmd: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        """Run a program of *this* machine inside only the container's network namespace."""
        return subprocess.run(
            ["nsenter", "-t", str(self.leader), "-n", *cmd],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def http_get(self, url: str, timeout: float = 5) -> str:
        """GET ``url`` from outside the container's filesystem, inside its network namespace."""
        code = (
            "import sys, urllib.request\n"
            "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).read().decode())"
        )
        r = self.netns(sys.executable, "-c", code, url, str(timeout), timeout=timeout + 10)
        if r.returncode != 0:
            raise OSError(f"GET {url}: {r.stderr.strip().splitlines()[-1:] or r.returncode}")
        return r.stdout

    def http(self, url: str, headers: dict[str, str] | None = None, timeout: float = 5) -> tuple[int, str]:
        """GET ``url`` with ``headers`` inside the container's network namespace: (status, body), errors included."""
        code = (
            "import json, sys, urllib.error, urllib.request\n"
            "req = urllib.request.Request(sys.argv[1], headers=json.loads(sys.argv[2]))\n"
            "try:\n"
            "    r = urllib.request.urlopen(req, timeout=float(sys.argv[3])); s, b = r.status, r.read()\n"
            "except urllib.error.HTTPError as e:\n"
            "    s, b = e.code, e.read()\n"
            "sys.stdout.write(json.dumps([s, b.decode()]))"
        )
        r = self.netns(sys.executable, "-c", code, url, json.dumps(headers or {}), str(timeout), timeout=timeout + 10)
        if r.returncode != 0:
            raise OSError(f"GET {url}: {r.stderr.strip().splitlines()[-1:] or r.returncode}")
        status, body = json.loads(r.stdout)
        return int(status), str(body)

    def spawn_in_netns(self, cmd: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
        with open(log, "wb") as out:
            return subprocess.Popen(
                ["nsenter", "-t", str(self.leader), "-n", *cmd],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )


class PeerNetns:
    """A network namespace of the test's own, joined to a container's by a veth pair (see ``peer_netns``)."""

    def __init__(self, name: str, host_ip: str, peer_ip: str) -> None:
        self.name = name
        self.host_ip = host_ip
        self.peer_ip = peer_ip

    def run(self, *cmd: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run a program of this machine inside the peer namespace only."""
        return subprocess.run(
            ["ip", "netns", "exec", self.name, *cmd], capture_output=True, text=True, timeout=timeout, check=False
        )


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} -> {r.returncode}: {r.stderr.strip()}")


@contextlib.contextmanager
def peer_netns(ct: Container, host_ip: str, peer_ip: str, prefix: int = 24) -> Iterator[PeerNetns]:
    """Another host on the container's network: a new namespace, a veth pair between it and the container.

    The pair is created inside the new namespace with its other end moved
    straight into the container's (this machine's own namespace never sees
    either end). The container gets ``host_ip`` and a default route via the
    peer (so Ansible finds a default IPv4 address, as on a real host); the
    namespace, and with it the pair, is deleted on exit.
    """
    name = f"gwms-peer-{os.getpid()}"
    _ip("netns", "add", name)
    try:
        _ip("-n", name, "link", "add", "gwms-peer0", "type", "veth", "peer", "name", "gwms0", "netns", str(ct.leader))
        _ip("-n", name, "addr", "add", f"{peer_ip}/{prefix}", "dev", "gwms-peer0")
        _ip("-n", name, "link", "set", "gwms-peer0", "up")
        _ip("-n", name, "link", "set", "lo", "up")
        for args in (
            ("addr", "add", f"{host_ip}/{prefix}", "dev", "gwms0"),
            ("link", "set", "gwms0", "up"),
            ("route", "add", "default", "via", peer_ip),
        ):
            r = ct.netns("ip", *args)
            if r.returncode != 0:
                raise RuntimeError(f"ip {' '.join(args)} in the container -> {r.returncode}: {r.stderr.strip()}")
        yield PeerNetns(name, host_ip, peer_ip)
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30, check=False)


@contextlib.contextmanager
def linked(a: Container, b: Container, ip_a: str, ip_b: str, prefix: int = 24) -> Iterator[None]:
    """Two booted containers on one network: a veth pair straight between their network namespaces.

    The pair is created inside ``a``'s namespace with its other end moved into
    ``b``'s (this machine's own namespace never sees either end), each end
    gets its address on one private subnet, and nothing else is routed. The
    pair goes with either namespace; it is also deleted on exit.
    """
    name_a, name_b = "gwms-link0", "gwms-link1"
    for ct, args in (
        (a, ("link", "add", name_a, "type", "veth", "peer", "name", name_b, "netns", str(b.leader))),
        (a, ("addr", "add", f"{ip_a}/{prefix}", "dev", name_a)),
        (a, ("link", "set", name_a, "up")),
        (b, ("addr", "add", f"{ip_b}/{prefix}", "dev", name_b)),
        (b, ("link", "set", name_b, "up")),
    ):
        r = ct.netns("ip", *args)
        if r.returncode != 0:
            a.netns("ip", "link", "del", name_a)
            raise RuntimeError(f"ip {' '.join(args)} -> {r.returncode}: {r.stderr.strip()}")
    try:
        yield
    finally:
        a.netns("ip", "link", "del", name_a)


def stop(p: subprocess.Popen[bytes], timeout: float = 30) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


@contextlib.contextmanager
def booted(
    workdir: Path, binds_ro: Sequence[tuple[str, str]] = (), binds: Sequence[tuple[str, str]] = ()
) -> Iterator[Container]:
    """Extract the cached rootfs into ``workdir``, add the mirror, boot it; yields once systemd is up."""
    log = workdir / "nspawn-build.log"
    tar = rootfs_tarball(log)
    repo = deb_repo(log)
    root = workdir / "rootfs"
    root.mkdir(parents=True)
    rootfs.run(["tar", "--numeric-owner", "-C", str(root), "-xf", str(tar)], log, timeout=300)
    (root / "etc/apt/sources.list").write_text(f"deb [trusted=yes] file:{MIRROR_IN_CONTAINER} ./\n")
    # debootstrap writes no /etc/hosts; without it "localhost" goes to DNS, unreachable here
    (root / "etc/hosts").write_text("127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n")
    (root / MIRROR_IN_CONTAINER.lstrip("/")).mkdir(parents=True)
    cmd = [
        "systemd-nspawn",
        "-D",
        str(root),
        "-b",
        "--register=no",
        "--private-network",
        "--console=read-only",
        "--keep-unit",
        f"--bind-ro={repo}:{MIRROR_IN_CONTAINER}",
        *(f"--bind-ro={src}:{dst}" for src, dst in binds_ro),
        *(f"--bind={src}:{dst}" for src, dst in binds),
    ]
    boot_log = workdir / "nspawn.log"
    with open(boot_log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        leader = 0
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited {proc.returncode}:\n{boot_log.read_text()[-3000:]}")
            kids = [c for c in _children(proc.pid) if Path(f"/proc/{c}/comm").read_text().strip() == "systemd"]
            if kids:
                leader = kids[0]
                break
            time.sleep(0.05)
        if not leader:
            raise TimeoutError(f"no systemd inside the container after 60s:\n{boot_log.read_text()[-3000:]}")
        ct = Container(root, proc, leader, boot_log)
        # "offline" until systemd's bus is up; then --wait returns once boot has finished
        state = ""
        while time.monotonic() < deadline + 60:
            state = ct.exec("systemctl", "is-system-running", "--wait", timeout=60, check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.1)
        else:
            raise RuntimeError(f"container boot ended in state {state!r}:\n{boot_log.read_text()[-3000:]}")
        yield ct
    finally:
        stop(proc)


# --- what both deployment tests share ---------------------------------------------------------------
def go_binary(env: str, target: str) -> Path:
    """A Go binary `make <target>` built (otelcol, jaeger, thanos: the Makefile exports its path in ``env``)."""
    path = os.environ.get(env)
    if not path or not Path(path).exists():
        out = subprocess.run(
            ["make", "-s", "--no-print-directory", target],
            cwd=Path(__file__).resolve().parents[2],
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"make {target} failed:\n{out.stderr[-3000:]}")
        path = out.stdout.strip().splitlines()[-1]
    return Path(path)


def recap(out: str, host: str | None = None) -> dict[str, int]:
    """ansible-playbook's PLAY RECAP counts (ok, changed, failed...) of ``host``, or of its one host."""
    name = re.escape(host) if host else r"\S+"
    m = re.search(rf"^{name}\s*:\s*(ok=\d+.*)$", out.split("PLAY RECAP", 1)[-1], re.M)
    if not m:
        raise AssertionError(f"no PLAY RECAP{' for ' + host if host else ''} in:\n{out[-3000:]}")
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


# name in the artifact dir, the Makefile's variable naming the build, the inventory's sha256 variable
GO_ARTIFACTS = {
    "otelcol": ("otelcol-gwms", "GWMS_OBS_OTELCOL", "otel_collector_binary_sha256"),
    "jaeger": ("jaeger", "GWMS_OBS_JAEGER", "jaeger_binary_sha256"),
    "thanos": ("thanos", "GWMS_OBS_THANOS", "thanos_binary_sha256"),
}


def artifacts(dest: Path, targets: Sequence[str]) -> dict[str, str]:
    """The operator's artifact dir, as `make deploy-artifacts` fills it: the exporter's wheelhouse and
    the Go builds ``targets`` (keys of GO_ARTIFACTS); the inventory variables naming their sha256."""
    _, wheelhouse_sha = wheelhouse.build(dest)
    found = {"gwms_exporter_version": __version__, "gwms_exporter_wheelhouse_sha256": wheelhouse_sha}
    for target in targets:
        name, env, sha_var = GO_ARTIFACTS[target]
        shutil.copy(go_binary(env, target), dest / name)
        found[sha_var] = wheelhouse.sha256(dest / name)
    return found


def vault(vault_pass: Path, action: str, path: Path) -> str:
    """ansible-vault ``action`` on ``path`` with the test's vault password file."""
    return subprocess.run(
        [str(Path(sys.prefix) / "bin" / "ansible-vault"), action, "--vault-password-file", str(vault_pass), str(path)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout


def encrypt(vault_pass: Path, path: Path) -> None:
    """ansible-vault encrypt ``path`` in place, as an operator does with the secrets file."""
    vault(vault_pass, "encrypt", path)
    assert path.read_text().startswith("$ANSIBLE_VAULT")
