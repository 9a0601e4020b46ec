"""A watching daemon's hourly full scan costs its listing, not a parse of every file again nor
whole checkpoints (issue 34; benchmarks/results/steady-state.md): the client directories'
memo (sources/layout.py ClientDirs) lists what a fresh listing lists, and a full scan after the
first saves the checkpoint as a tick does."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from gwms_obs import pipeline
from gwms_obs.ingest import checkpoint
from gwms_obs.ingest.books import key_str
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources import layout


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("full-scan")
    simulate(root, 60, seed=34)
    return root


def fresh(
    root: Path,
) -> tuple[list[tuple[str, str, str]], list[tuple[str, layout.PilotFiles]], list[layout.EventLogFile], int]:
    """A listing with no memo, as Books listed before it: each directory parsed by scan_client_dir,
    the first of a pilot's twins kept (and the errors it counts)."""
    errors = ParseErrors()
    dirs = list(layout.entry_dirs(str(root), errors))
    present: dict[str, layout.PilotFiles] = {}
    logs: list[layout.EventLogFile] = []
    for user, entry, d in dirs:
        pilots, found = layout.scan_client_dir(user, entry, d, errors)
        for p in pilots:
            present.setdefault(key_str(p.key), p)
        logs += found
    return dirs, list(present.items()), logs, errors.total()


def test_a_directory_listed_again_is_parsed_again_only_when_its_names_changed(tree: Path, tmp_path: Path) -> None:
    root = tmp_path / "f"
    shutil.copytree(tree, root)
    errors = ParseErrors()
    memo = layout.ClientDirs(key_str)
    _, first, _ = memo.list(str(root), errors)
    outs = sorted(root.glob("client/*/*/entry_*/job.*.out"))
    a, b = outs[0].parent, outs[-1].parent
    assert a != b
    # Unchanged: the same objects, not a parse again.
    _, again, _ = memo.list(str(root), errors)
    assert list(again) == list(first) and all(again[k] is first[k] for k in first)
    # One directory changed: a pilot gone, a new one, another's .err gone, a name that is no
    # pilot's; and another user's directory of the same entry with a twin of one of its pilots
    # (the first listed is the pilot's) and a pilot of its own.
    mine = sorted(a.glob("job.*.out"))
    mine[0].unlink()
    mine[0].with_suffix(".err").unlink()
    mine[1].with_suffix(".err").unlink()
    shutil.copy(mine[2], a / "job.999999.0.out")
    (a / "job.01.0.out").write_bytes(b"x")
    twin = root / "client" / "user_zz" / "glidein_g" / a.name
    twin.mkdir(parents=True)
    shutil.copy(mine[2], twin / mine[2].name)
    shutil.copy(mine[2], twin / "job.424242.0.out")
    dirs, present, logs = memo.list(str(root), errors)
    want_dirs, want_present, want_logs, want_errors = fresh(root)
    assert dirs == want_dirs
    assert list(present.items()) == want_present  # the same pilots, files and order
    assert logs == want_logs
    entry = a.name.removeprefix("entry_")
    assert {key_str((entry, 999999, 0)), key_str((entry, 424242, 0))} <= present.keys()
    c, pr = (int(x) for x in mine[1].name.split(".")[1:3])
    assert not present[key_str((entry, c, pr))].has_err
    assert all(present[k] is p for k, p in first.items() if p.out.startswith(f"{b}/"))  # b: not parsed again
    assert want_errors == 1 and errors.total() == 1  # job.01.0.out counted once, not at every listing
    memo.list(str(root), errors)
    assert errors.total() == 1


def _saved(ck: Path, root: Path) -> dict[str, Any]:
    data = checkpoint.load(str(ck), str(root))
    assert data is not None
    return data


def daemon(root: Path, ck: Path, now: list[float]) -> Ingest:
    cfg = IngestConfig(factory_dir=str(root), checkpoint=str(ck), settle_seconds=0, full_scan_seconds=0)
    return Ingest(cfg, clock=lambda: now[0])


def saves(ing: Ingest, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each checkpoint the scans save (True: a journal record), as they call it."""
    out: list[bool] = []
    save = ing.save_checkpoint

    def counted(journal: bool = False) -> None:
        out.append(journal)
        save(journal)

    monkeypatch.setattr(ing, "save_checkpoint", counted)
    return out


def test_a_full_scan_after_the_first_saves_the_checkpoint_as_a_tick_does(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, ck = tmp_path / "f", tmp_path / "checkpoint.json"
    shutil.copytree(tree, root)
    # An entry's files (its pilots, their lines and event logs) arrive later.
    entry = sorted(root.glob("server/entry_*"))[-1].name
    held = [*root.glob(f"client/*/*/{entry}"), root / "server" / entry]
    away = tmp_path / "away"
    away.mkdir()
    for i, d in enumerate(held):
        shutil.move(d, away / str(i))
    now = [time.time()]
    ing = daemon(root, ck, now)
    writes = saves(ing, monkeypatch)
    assert ing.watch()
    ing.scan()  # the daemon's first: at each step, as a backfill's progress
    assert ing.last_scan_full and writes == [False] * 3
    ing.scan()  # full_scan_seconds 0: each a full one; nothing changed, nothing written
    assert ing.last_scan_full and len(writes) == 3
    before = set(ing.seen)
    for i, d in enumerate(held):
        shutil.move(away / str(i), d)
    now[0] += pipeline.CHECKPOINT_SECONDS / 2
    ing.scan()  # counted, not saved: a checkpoint was written less than CHECKPOINT_SECONDS ago
    assert set(ing.seen) > before and len(writes) == 3 and set(_saved(ck, root)["seen"]) == before
    now[0] += pipeline.CHECKPOINT_SECONDS
    ing.scan()
    assert writes[3:] == [True] and set(_saved(ck, root)["seen"]) == set(ing.seen)  # as a tick: a journal record
    ing.close()
    # A restart from it counts nothing again, and equals a one-shot report of the tree.
    again = daemon(root, ck, now)
    assert again.scan().pilots == 0
    rep = Ingest(IngestConfig.one_shot(str(root), None, 1e9, 1))
    rep.scan()
    assert again.seen.keys() == rep.seen.keys()
    assert again.ledger.pilots == rep.ledger.pilots


def test_scanning_saves_at_each_step_as_before(tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ing = daemon(tree, tmp_path / "checkpoint.json", [time.time()])  # not watching: report, export --once, scan mode
    writes = saves(ing, monkeypatch)
    ing.scan()
    ing.scan()
    assert writes == [False] * 6
