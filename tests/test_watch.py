"""ingest/watch.py against the real kernel's inotify, in one process: what a tick reads, and when
scanning takes over (counted). The daemon's side is tests/test_discovery_live.py."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

import pytest

from gwms_obs.catalogue import Source
from gwms_obs.config import from_dict, value_problems
from gwms_obs.ingest import watch
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.pipeline import Ingest
from gwms_obs.settings import ConfigError
from gwms_obs.simulate.factory import simulate

inotify_simple = pytest.importorskip("inotify_simple")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("watch")
    simulate(root, 80, seed=51)
    return root


def copy(tree: Path, tmp: Path) -> Path:
    root = tmp / "f"
    shutil.copytree(tree, root)
    return root


def daemon(root: Path, **kw: object) -> Ingest:
    return Ingest(IngestConfig(factory_dir=str(root), settle_seconds=3600, lost_after_seconds=1e9, **kw))  # type: ignore[arg-type]


def report(root: Path) -> Ingest:
    rep = Ingest(IngestConfig.one_shot(str(root), None, 1e9, 1))
    rep.scan()
    return rep


def test_a_new_user_and_entry_written_at_once_are_read_at_the_next_tick(tree: Path, tmp_path: Path) -> None:
    root = copy(tree, tmp_path)
    ing = daemon(root, client_map={"newcomer": "fe"})  # else its pilots wait for a line to name its frontend
    assert ing.watch()
    ing.scan()  # the full scan at start
    n = sum(ing.ledger.pilots.values())
    assert ing.scan().pilots == 0  # a tick with nothing new
    src = sorted(root.glob("client/*/*/entry_*/job.*.out"))[0]
    # A user, frontend and entry directory and a pilot's files, written before any watch could be
    # set on them: the watch of the new user directory lists them once.
    new = root / "client" / "user_newcomer" / "glidein_g" / "entry_NEW"
    new.mkdir(parents=True)
    shutil.copy(src, new / "job.7.0.out")
    shutil.copy(src.with_suffix(".err"), new / "job.7.0.err")
    res = ing.scan()
    assert res.by_source == {Source.GLIDEIN_OUT: 1}, res
    assert ing.seen.keys() == report(root).seen.keys()
    assert sum(ing.ledger.pilots.values()) == n + 1
    # Deleted after it was counted: nothing changes, and the next tick reads nothing.
    shutil.rmtree(new.parent.parent)
    assert ing.scan().pilots == 0 and sum(ing.ledger.pilots.values()) == n + 1


def test_an_incremental_tick_reads_only_what_changed(tree: Path, tmp_path: Path) -> None:
    root = copy(tree, tmp_path)
    ing = daemon(root)
    assert ing.watch()
    ing.scan()
    read = dict(ing.health.bytes_read)
    logs = sorted(root.glob("server/entry_*/completed_jobs_*.log"))
    ing.scan()
    assert dict(ing.health.bytes_read) == read  # nothing changed: nothing read
    with open(logs[0], "ab") as f:
        f.write(b"\n")
    ing.scan()
    assert ing.health.bytes_read[Source.COMPLETED_JOBS] == read[Source.COMPLETED_JOBS] + 1
    assert dict(ing.health.discovery_fallbacks) == {}


def test_the_watch_limit_falls_back_to_scans_counted_once(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = copy(tree, tmp_path)

    def full(self: object, path: object, mask: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")  # fs.inotify.max_user_watches reached

    monkeypatch.setattr(inotify_simple.INotify, "add_watch", full)
    ing = daemon(root)
    assert ing.watch()  # the instance is there; the first full scan's watches are not
    ing.scan()
    ing.scan()
    assert ing.discovery is None
    assert dict(ing.health.discovery_fallbacks) == {watch.WATCH_LIMIT: 1}
    assert ing.seen.keys() == report(root).seen.keys()


def test_scan_mode_by_config_is_counted() -> None:
    ing = Ingest(IngestConfig(factory_dir="/nonexistent", discovery="scan"))
    assert not ing.watch() and ing.discovery is None
    assert dict(ing.health.discovery_fallbacks) == {watch.CONFIGURED: 1}


def test_a_remote_filesystem_is_found_in_mountinfo(tmp_path: Path) -> None:
    mi = tmp_path / "mountinfo"
    mi.write_text(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "40 22 0:40 / /data rw,relatime shared:5 - nfs4 srv:/export rw,vers=4.2\n"
        "41 22 0:41 / /mnt/my\\040logs rw - fuse.sshfs u@h:/logs rw\n"
        "42 40 0:42 / /data/local rw - ext4 /dev/sdb1 rw\n"
    )
    assert watch.remote_fs("/data/factory", str(mi)) == "nfs4"
    assert watch.remote_fs("/data/local/factory", str(mi)) is None  # the longest mount point wins
    assert watch.remote_fs("/mnt/my logs/x", str(mi)) == "fuse.sshfs"
    assert watch.remote_fs("/var/log/gwms-factory", str(mi)) is None


def test_the_discovery_keys_are_checked() -> None:
    cfg = from_dict({"discovery": "scan", "full_scan_seconds": 600, "tick_seconds": 0.5})
    assert (cfg.ingest.discovery, cfg.ingest.full_scan_seconds, cfg.ingest.tick_seconds) == ("scan", 600.0, 0.5)
    with pytest.raises(ConfigError, match="discovery must be one of inotify, scan"):
        from_dict({"discovery": "poll"})
    problems = value_problems(from_dict({"tick_seconds": 0, "full_scan_seconds": float("nan")}))
    assert "tick_seconds must be a finite number of seconds > 0, got 0.0" in problems
    assert any(p.startswith("full_scan_seconds must be a finite number") for p in problems)


def test_a_renamed_entry_directory_is_scanned_then_watched_under_its_new_name(tree: Path, tmp_path: Path) -> None:
    root = copy(tree, tmp_path)
    ing = daemon(root)
    assert ing.watch()
    ing.scan()
    old = sorted(root.glob("client/*/*/entry_*"))[0]
    src = sorted(old.glob("job.*.out"))[0]
    new = old.with_name(old.name + "_renamed")
    old.rename(new)  # the pilots' keys change with their entry: counted again under it, as report does
    ing.scan()
    assert ing.last_scan_full  # a directory moved: the events cannot say what it held
    shutil.copy(new / src.name, new / "job.9.0.out")
    shutil.copy((new / src.name).with_suffix(".err"), new / "job.9.0.err")
    res = ing.scan()
    assert not ing.last_scan_full and res.by_source == {Source.GLIDEIN_OUT: 1}, res
    assert ing.seen.keys() >= report(root).seen.keys()
