"""Files are what they claim (issue 16, item 8): only regular files inside the tree are read.

Each attack has its test: a FIFO named like a pilot's .out/.err or an event
log, a symlink to /dev/zero, a symlink out of the tree, a directory loop, an
unreadable directory, and pilot ids that are not canonical. A FIFO test that
regressed would block in open() forever, so each read runs in a thread with a
deadline; on a miss the FIFO is opened for writing, which releases the
reader, and the test fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gwms_obs.follow import Follower
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.sources import (
    condor_event_log,
    descript,
    files,
    glidein_err,
    glidein_out,
    layout,
    schedd_status,
)
from gwms_obs.sources.condor_sections import encode
from tests.support.readers import completed_jobs_file, event_log_file, read_new
from tests.support.reference import reference_file

FIX = Path(__file__).resolve().parent / "fixtures"
EVENT_LOG_SAMPLE = (FIX / "condor_event_log_sample.log").read_bytes()
DEADLINE = 10.0  # seconds; a non-blocking open and refusal takes microseconds

T = TypeVar("T")


def within_deadline(fn: Callable[[], T], fifo: Path | None = None) -> T:
    """``fn()`` in a thread; fails (after releasing a reader stuck on ``fifo``) if it takes too long."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # re-raised in the test's thread
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(DEADLINE)
    if t.is_alive():
        if fifo is not None:  # a writer end releases open(); closing it gives the reader EOF
            os.close(os.open(fifo, os.O_RDWR | os.O_NONBLOCK))
        t.join(DEADLINE)
        pytest.fail(f"read did not return within {DEADLINE} s: it blocked on a non-regular file")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


@pytest.fixture
def factory(tmp_path: Path) -> Path:
    """<factory>/client/user_u/glidein_g/entry_e and <factory>/server/entry_e."""
    (tmp_path / "client" / "user_u" / "glidein_g" / "entry_e").mkdir(parents=True)
    (tmp_path / "server" / "entry_e").mkdir(parents=True)
    (tmp_path / "monitor" / "entry_e").mkdir(parents=True)
    return tmp_path


def edir(factory: Path) -> Path:
    return factory / "client" / "user_u" / "glidein_g" / "entry_e"


# --- FIFOs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["job.1.0.out", "job.1.0.err"])
def test_fifo_pilot_file_is_refused_not_waited_on(factory: Path, name: str) -> None:
    fifo = edir(factory) / name
    os.mkfifo(fifo)
    errors = ParseErrors()
    reader = glidein_out.read_out if name.endswith(".out") else glidein_err.read_err
    src = "glidein_out" if name.endswith(".out") else "glidein_err"
    assert within_deadline(lambda: reader(str(fifo), errors), fifo) is None
    assert errors.counts == {(src, files.NOT_REGULAR): 1}
    # The same inside the tree (root given).
    assert within_deadline(lambda: reader(str(fifo), errors, root=str(factory)), fifo) is None
    assert errors.counts == {(src, files.NOT_REGULAR): 2}


def test_fifo_event_log_is_refused_by_follower_and_reader(factory: Path) -> None:
    fifo = edir(factory) / "condor_activity_20220624_fe.log"
    os.mkfifo(fifo)
    fol = Follower()

    def follow() -> int:
        return read_new(fol, str(fifo), lambda b, p, o: condor_event_log.parse_buffer(b, p, o, ParseErrors()), print)

    with pytest.raises(files.FileRefused) as exc:
        within_deadline(follow, fifo)
    assert exc.value.reason == files.NOT_REGULAR and files.reason_of(exc.value) == "not_regular"
    assert str(fifo) not in fol.cursors
    errors = ParseErrors()
    assert within_deadline(lambda: event_log_file(str(fifo), errors, root=str(factory)), fifo) == []
    assert errors.counts == {("condor_event_log", files.NOT_REGULAR): 1}


def test_fifo_completed_log_and_monitor_files_are_refused(factory: Path) -> None:
    log = factory / "server" / "entry_e" / "completed_jobs_20220624.log"
    os.mkfifo(log)
    errors = ParseErrors()
    assert within_deadline(lambda: completed_jobs_file(str(log), errors, root=str(factory)), log) == []
    assert errors.counts == {("completed_jobs", files.NOT_REGULAR): 1}
    for name, read in (
        ("descript.xml", lambda p, e: descript.read_descript(p, e, root=str(factory))),
        ("schedd_status.xml", lambda p, e: schedd_status.read_schedd_status(p, e, root=str(factory))),
    ):
        fifo = factory / "monitor" / "entry_e" / name
        os.mkfifo(fifo)
        errors = ParseErrors()
        assert not within_deadline(lambda p=str(fifo), r=read, e=errors: r(p, e), fifo)  # type: ignore[misc]
        assert errors.total() == 1 and next(iter(errors.counts))[1] == files.NOT_REGULAR


# --- symlinks -----------------------------------------------------------------------------------


def test_symlink_to_dev_zero_is_refused(factory: Path) -> None:
    out = edir(factory) / "job.1.0.out"
    out.symlink_to("/dev/zero")
    errors = ParseErrors()
    # Without a root the target is followed, and refused as a character device.
    assert within_deadline(lambda: glidein_out.read_out(str(out), errors)) is None
    assert errors.counts == {("glidein_out", files.NOT_REGULAR): 1}
    # With one it is outside the tree before it is anything else.
    assert within_deadline(lambda: glidein_out.read_out(str(out), errors, root=str(factory))) is None
    assert errors.counts[("glidein_out", files.OUTSIDE_TREE)] == 1

    log = edir(factory) / "condor_activity_20220624_fe.log"
    log.symlink_to("/dev/zero")
    with pytest.raises(files.FileRefused) as exc:
        within_deadline(lambda: read_new(Follower(), str(log), lambda b, p, o: ([], len(b)), print))
    assert exc.value.reason == files.NOT_REGULAR


def test_symlink_out_of_the_tree_is_refused(factory: Path) -> None:
    err = edir(factory) / "job.1.0.err"
    err.symlink_to("/etc/passwd")
    errors = ParseErrors()
    assert glidein_err.read_err(str(err), errors, root=str(factory)) is None
    assert errors.counts == {("glidein_err", files.OUTSIDE_TREE): 1}
    # A relative symlink climbing out of the tree is the same.
    status = factory / "monitor" / "entry_e" / "schedd_status.xml"
    outside = factory.parent / f"{factory.name}-outside.xml"
    outside.write_bytes((FIX / "schedd_status_two_frontends.xml").read_bytes())
    status.symlink_to(os.path.relpath(outside, status.parent))
    assert schedd_status.read_schedd_status(str(status), errors, root=str(factory / "monitor")) is None
    assert errors.counts[("schedd_status", files.OUTSIDE_TREE)] == 1
    # Without a root (gwms-obs inspect on a file a person names) it is read.
    assert schedd_status.read_schedd_status(str(status), ParseErrors()) is not None
    # A regular file that is not under the root, by name or by "..", is refused too.
    for path in (str(outside), str(factory / "monitor" / ".." / ".." / outside.name)):
        errors = ParseErrors()
        assert schedd_status.read_schedd_status(path, errors, root=str(factory / "monitor")) is None
        assert errors.counts == {("schedd_status", files.OUTSIDE_TREE): 1}, path


def test_symlink_inside_the_tree_is_read(factory: Path) -> None:
    real = factory / "client" / "user_u" / "glidein_g" / "kept" / "pilot.out"
    real.parent.mkdir()
    real.write_bytes(reference_file("glideFactoryLogParser_glidein_stdout.out").read_bytes())
    link = edir(factory) / "job.10176593.0.out"
    link.symlink_to(os.path.relpath(real, link.parent))
    errors = ParseErrors()
    out = glidein_out.read_out(str(link), errors, root=str(factory))
    assert out is not None and out.cluster == 10176593 and errors.total() == 0
    # The root itself may be reached through a symlink (/var/log/gwms-factory -> /data/factory).
    alias = factory.parent / f"{factory.name}-alias"
    alias.symlink_to(factory)
    out = glidein_out.read_out(str(alias / link.relative_to(factory)), errors, root=str(alias))
    assert out is not None and errors.total() == 0


def test_symlink_loop_file_is_unreadable_not_a_hang(factory: Path) -> None:
    a, b = edir(factory) / "job.1.0.out", edir(factory) / "job.2.0.out"
    a.symlink_to(b.name)
    b.symlink_to(a.name)
    errors = ParseErrors()
    assert within_deadline(lambda: glidein_out.read_out(str(a), errors, root=str(factory))) is None
    assert errors.counts == {("glidein_out", files.UNREADABLE): 1}


# --- reads bounded by the size at open ----------------------------------------------------------


def test_read_stops_at_the_size_seen_at_open(tmp_path: Path) -> None:
    p = tmp_path / "grows.log"
    p.write_bytes(b"a" * 1000)
    with files.open_regular(str(p), root=str(tmp_path)) as f:
        with p.open("ab") as w:
            w.write(b"b" * 5000)
        assert f.size == 1000
        assert f.read() == b"a" * 1000 and f.read() == b""
        f.seek(990)
        assert f.read(100) == b"a" * 10


def test_follower_reads_growth_next_time(tmp_path: Path) -> None:
    p = tmp_path / "events.log"
    p.write_bytes(b"line 1\n")
    seen: list[bytes] = []

    def parse(buf: bytes, path: str, off: int) -> tuple[list[bytes], int]:
        with p.open("ab") as w:  # the writer appends while we read
            w.write(b"more\n" * 1000)
        end = buf.rfind(b"\n") + 1
        return buf[:end].splitlines(), end

    fol = Follower()
    assert read_new(fol, str(p), parse, seen.extend, root=str(tmp_path)) == 7  # not the 5000 appended
    assert seen == [b"line 1"]
    assert read_new(fol, str(p), parse, seen.extend, root=str(tmp_path)) == 5000
    assert len(seen) == 1001


# --- the walk: loops, unreadable directories, non-canonical names -------------------------------


def test_directory_symlinks_are_counted_not_followed(factory: Path) -> None:
    g = factory / "client" / "user_u" / "glidein_g"
    (g / "entry_loop").symlink_to(".")  # would list entry_e again, forever deeper if followed
    (factory / "client" / "user_etc").symlink_to("/etc")
    errors = ParseErrors()
    assert [e for _, e, _ in layout.entry_dirs(str(factory), errors)] == ["e"]
    assert errors.counts == {("glidein_out", layout.UNREADABLE_DIR): 2}
    # Without errors (the old call) the result is the same and nothing is counted.
    assert [e for _, e, _ in layout.entry_dirs(str(factory))] == ["e"]


def _scan_as_nobody(root: Path) -> dict[str, int]:
    """List ``root`` in a child that dropped root's privileges (root reads a chmod-000 directory)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            errors = ParseErrors()
            entries = [e for _, e, _ in layout.entry_dirs(str(root), errors)]
            counts = {f"{s}/{k}": n for (s, k), n in errors.counts.items()}
            os.write(w, json.dumps({"entries": len(entries), **counts}).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, data
    result: dict[str, int] = json.loads(data)
    return result


@pytest.fixture
def world_tree() -> Iterator[Path]:
    """A factory tree that uid 65534 can traverse (pytest's tmp_path is root's, mode 700)."""
    d = Path(tempfile.mkdtemp(prefix="gwms-obs-files-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        for sub in d.rglob("*"):
            if sub.is_dir() and not sub.is_symlink():
                sub.chmod(0o755)
        shutil.rmtree(d)


def test_unreadable_directory_is_counted(world_tree: Path) -> None:
    for e in ("entry_a", "entry_b"):
        (world_tree / "client" / "user_u" / "glidein_g" / e).mkdir(parents=True)
    for d in world_tree.rglob("*"):
        d.chmod(0o755)
    locked = world_tree / "client" / "user_u" / "glidein_g" / "entry_b"
    locked.chmod(0)
    pilots, _ = layout.scan_client_dir("u", "b", str(locked), errors := ParseErrors())
    if os.geteuid() != 0:
        assert pilots == [] and errors.counts == {("glidein_out", layout.UNREADABLE_DIR): 1}
    # Root reads a chmod-000 directory: drop to nobody to see the refusal. Here the
    # locked directory is a glidein_ level one, so the walk below it is cut.
    locked.chmod(0o755)
    (world_tree / "client" / "user_u" / "glidein_g").chmod(0)
    if os.geteuid() == 0:
        got = _scan_as_nobody(world_tree)
    else:
        errors = ParseErrors()
        got = {"entries": len(list(layout.entry_dirs(str(world_tree), errors)))}
        got.update({f"{s}/{k}": n for (s, k), n in errors.counts.items()})
    assert got == {"entries": 0, "glidein_out/unreadable_dir": 1}


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="a bind mount needs root")
def test_bind_mount_loop_is_counted(factory: Path) -> None:
    g = factory / "client" / "user_u" / "glidein_g"
    (g / "entry_twin").mkdir()
    # In a private mount namespace: entry_twin shows entry_e's directory (same dev, inode).
    script = (
        "import json, sys; from gwms_obs.parse_errors import ParseErrors; from gwms_obs.sources import layout\n"
        "e = ParseErrors(); entries = sorted(x for _, x, _ in layout.entry_dirs(sys.argv[1], e))\n"
        "print(json.dumps([entries, {f'{s}/{k}': n for (s, k), n in e.counts.items()}]))\n"
    )
    cmd = 'mount --bind "$1" "$2" && exec "$3" -c "$4" "$5"'
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", cmd, "sh",
         str(edir(factory)), str(g / "entry_twin"), sys.executable, script, str(factory)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if proc.returncode != 0 and "mount" in proc.stderr:
        pytest.skip(f"no bind mounts here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    entries, counts = json.loads(proc.stdout)
    assert len(entries) == 1 and entries[0] in ("e", "twin")  # listed once, whichever came first
    assert counts == {"glidein_out/unreadable_dir": 1}


def test_noncanonical_pilot_ids_count_once_as_errors(factory: Path) -> None:
    d = edir(factory)
    names = ["job.1.0.out", "job.1.00.out", "job.1.000.out", "job.01.0.out", "job.\u0661.0.out", "job.0.0.out"]
    for n in names:
        (d / n).write_bytes(b"x\n")
    (d / "job.1.0.err").write_bytes(b"x\n")
    errors = ParseErrors()
    pilots, _ = layout.scan_client_dir("u", "e", str(d), errors)
    assert [(p.cluster, p.proc, os.path.basename(p.out), p.has_err) for p in pilots] == [
        (0, 0, "job.0.0.out", False),
        (1, 0, "job.1.0.out", True),
    ]
    assert errors.counts == {("glidein_out", layout.NONCANONICAL_NAME): 4}
    # Without the canonical file, the forged ones still count for nothing.
    (d / "job.1.0.out").unlink()
    assert [p.key for p in layout.scan_client_dir("u", "e", str(d))[0]] == [("e", 0, 0)]
    # The exporter lists the tree every scan: each bad name is counted once.
    once = layout.OncePerPath(errors := ParseErrors())
    for _ in range(3):
        layout.scan_client_dir("u", "e", str(d), once)
    assert errors.counts == {("glidein_out", layout.NONCANONICAL_NAME): 4}


def test_walk_finds_every_source(factory: Path) -> None:
    d = edir(factory)
    (d / "job.7.0.out").write_bytes(b"x")
    (d / "condor_activity_20220624_fe.log").write_bytes(EVENT_LOG_SAMPLE)
    (factory / "server" / "entry_e" / "completed_jobs_20220624.log").write_bytes(b"")
    errors = ParseErrors()
    [(user, entry, path)] = layout.entry_dirs(str(factory), errors)
    pilots, logs = layout.scan_client_dir(user, entry, path, errors)
    assert [p.key for p in pilots] == [("e", 7, 0)] and [f.client for f in logs] == ["fe"]
    assert [e for e, _ in layout.completed_logs(str(factory), errors)] == ["e"]
    assert [e for e, _ in layout.monitor_entries(str(factory / "monitor"), errors)] == ["e"]
    assert list(layout.entry_dirs(str(factory / "absent"), errors)) == []  # no tree yet: not an error
    assert errors.total() == 0


def test_regular_file_reads_are_unchanged(factory: Path) -> None:
    """The guard costs nothing to well-formed input: every reader reads it under a root."""
    d = edir(factory)
    (d / "job.1.0.err").write_bytes(encode("StartdHistoryLog", b"JobStartDate = 5\nCompletionDate = 9\n"))
    log = d / "condor_activity_20220624_fe.log"
    log.write_bytes(EVENT_LOG_SAMPLE)
    errors = ParseErrors()
    err = glidein_err.read_err(str(d / "job.1.0.err"), errors, root=str(factory))
    assert err is not None and err.jobs is not None and len(err.jobs) == 1
    assert event_log_file(str(log), errors, root=str(factory))
    assert errors.total() == 0


_SEGMENT = st.sampled_from(["f", "x", ".", "..", "", "job.1.0.out", "e"])


@settings(max_examples=400, deadline=None)
@given(
    st.lists(_SEGMENT, max_size=6),
    st.lists(_SEGMENT, min_size=1, max_size=4),
    st.booleans(),
    st.booleans(),
)
def test_lexically_inside_is_the_abspath_comparison(
    root_parts: list[str], rest: list[str], absolute: bool, joined: bool
) -> None:
    """The fast check (no abspath for a normal absolute path, the root's once) answers as the plain one."""
    root = ("/" if absolute else "") + "/".join(root_parts) or "."
    path = (root.rstrip("/") + "/" if joined else "") + "/".join(rest)
    plain = ".." not in path.split(os.sep) and files.within(os.path.abspath(path), os.path.abspath(root))
    assert files.lexically_inside(path, root) == plain
