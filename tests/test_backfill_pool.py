"""A backfill read across cores (ingest/pool.py) counts exactly what the serial read counts.

Each case runs the same simulated factory (with a few forged files, so there
are parse errors to count) serially and with a pool of 2 workers, the pool's
threshold and chunks made small so 400 pilots take the pool path in many
chunks of several entries; and compares everything a scan leaves behind.
"""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from gwms_obs import cli
from gwms_obs.accounting.pilot import PilotAccount
from gwms_obs.catalogue import Accuracy, Source
from gwms_obs.ingest import glidein_files, pool
from gwms_obs.ingest.books import key_str
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources import glidein_err

N = 400
HUGE = b"999999999999999999"


class Crash(BaseException):
    """What a kill looks like to the code under test: nothing catches it."""


_READ_CHUNK = pool.read_chunk


def read_chunk_checking_the_heap_is_frozen(ctx: pool.Context, tasks: list[pool.Task]) -> list[pool.Read]:
    """A worker's read_chunk (module level, so that it pickles) that fails unless it
    inherited the parent's objects frozen."""
    if gc.get_freeze_count() == 0:
        raise AssertionError("the worker's inherited heap is not frozen")
    return _READ_CHUNK(ctx, tasks)


def rewrite(path: Path, rx: bytes, repl: bytes) -> bool:
    data = path.read_bytes()
    new = re.sub(rx, repl, data, count=1)
    path.write_bytes(new)
    return new != data


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("backfill")
    simulate(root, N, seed=17)
    outs = sorted(root.glob("client/*/*/entry_*/job.*.out"))
    # Forgeries, so that the parse errors (and the pilots counted from other sources) are compared too.
    forged_cpus = next(o for o in outs if rewrite(o, rb"Setting GLIDEIN_CPUS=\d+", b"Setting GLIDEIN_CPUS=" + HUGE))
    rest = [o for o in outs if o != forged_cpus]
    end = rb"(Glidein ending [^(\n]*)\(\d{10}\) with code (\d+) after \d+"
    next(o for o in rest if rewrite(o, end, b"\\1(100000000000000000) with code \\2 after " + HUGE))
    rest[-1].write_bytes(b"\x00not a pilot's stdout\n" * 10)
    # An implausible completed_jobs line of a pilot its .out counts: a scan never checks it,
    # whether [clients] names the frontends or the lines do (they are looked for first).
    log = sorted(root.glob("server/entry_*/completed_jobs_*.log"))[1]
    assert rewrite(log, rb'duration="\d+"', b'duration="999999999999"')
    return root


@pytest.fixture(autouse=True)
def small_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """400 pilots take the pool path, in chunks of ~12 (many entries, many chunks in flight)."""
    monkeypatch.setattr(glidein_files, "POOL_MIN_PILOTS", 100)
    monkeypatch.setattr(glidein_files, "MIN_CHUNK", 8)


@pytest.fixture
def pools(monkeypatch: pytest.MonkeyPatch) -> list[ProcessPoolExecutor]:
    """Every pool a scan starts (none: it read serially)."""
    made: list[ProcessPoolExecutor] = []
    real = pool.executor

    def counted(workers: int, method: str | None = None) -> ProcessPoolExecutor:
        ex = real(workers, method)
        made.append(ex)
        return ex

    monkeypatch.setattr(pool, "executor", counted)
    return made


def fork_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers forked from this process: they see what this test patched."""
    monkeypatch.setattr(pool, "start_method", lambda: "fork")


def run(
    root: Path,
    workers: int,
    checkpoint: Path | None = None,
    sink: Callable[[PilotAccount], None] | None = None,
    clients: dict[str, str] | None = None,
) -> tuple[Ingest, list[PilotAccount]]:
    accounts: list[PilotAccount] = []

    def keep(a: PilotAccount) -> None:
        accounts.append(a)
        if sink is not None:
            sink(a)

    cfg = IngestConfig.one_shot(str(root), None, 3600.0, workers)
    cfg.checkpoint = str(checkpoint) if checkpoint else None
    cfg.client_map = clients or {}
    ing = Ingest(cfg, outlets=Outlets(accounts=keep))
    res = ing.scan()
    assert not res.failed
    return ing, accounts


def outcome(ing: Ingest, accounts: list[PilotAccount]) -> dict[str, Any]:
    """All a scan leaves behind that must not depend on the number of workers."""
    b = ing.books
    return {
        "ledger": ing.ledger.to_json(),
        "seen": sorted(b.counted.seen),
        "bad_out": sorted(b.counted.bad_out),
        "errors": dict(ing.errors.counts),
        "records": dict(b.health.records),
        "bytes": dict(b.health.bytes_read),
        "evidence": {e: (v.real_min, v.legacy_max) for e, v in b.evidence.items()},
        "accounts": accounts,  # each pilot's account, in the order the sink got them
    }


@pytest.fixture(scope="module")
def serial(factory: Path) -> dict[str, Any]:
    ing, accounts = run(factory, 1)
    want = outcome(ing, accounts)
    assert len(want["accounts"]) > N * 0.8
    # The forgeries were noticed: implausible values, an unparsable .out.
    assert want["errors"][(Source.GLIDEIN_OUT, "implausible")] >= 2, want["errors"]
    assert want["bad_out"], want
    # Every .out and .err read counts its size in the bytes read (one stat less a pilot: the
    # reader's size, not a stat of its own).
    outs = sum(o.stat().st_size for o in factory.glob("client/*/*/entry_*/job.*.out"))
    errs = sum(o.stat().st_size for o in factory.glob("client/*/*/entry_*/job.*.err"))
    assert want["bytes"][Source.GLIDEIN_OUT] == outs
    assert want["bytes"][Source.GLIDEIN_ERR] == errs
    return want


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_the_pool_counts_what_the_serial_read_counts(
    factory: Path,
    serial: dict[str, Any],
    pools: list[ProcessPoolExecutor],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    method: str,
) -> None:
    """Forked workers also find the objects they inherited frozen (their collections skip
    them), and this process unfreezes them once the pool is shut down."""
    monkeypatch.setattr(pool, "start_method", lambda: method)
    if method == "fork":
        monkeypatch.setattr(pool, "read_chunk", read_chunk_checking_the_heap_is_frozen)
    ing, accounts = run(factory, 2)
    assert len(pools) == 1  # it did take the pool path
    assert "a worker failed" not in caplog.text  # every chunk came back from a worker
    assert gc.get_freeze_count() == 0
    got = outcome(ing, accounts)
    for k, want in serial.items():
        assert got[k] == want, k


def test_the_exporter_picks_forkserver_while_other_threads_run() -> None:
    assert pool.start_method() == "fork"  # pytest runs the tests in one thread
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert pool.start_method() == "forkserver"  # the exporter's HTTP server: a fork could copy a held lock
    finally:
        stop.set()
        t.join()


@pytest.mark.parametrize("command", ["report", "analyze"])
def test_report_and_analyze_print_the_same_with_any_workers(
    factory: Path, tmp_path: Path, pools: list[ProcessPoolExecutor], command: str
) -> None:
    texts = []
    for w in ("1", "2"):
        out = tmp_path / f"{command}-{w}.json"
        rc = cli.main([command, "--factory-dir", str(factory), "--format", "json", "-o", str(out), "--workers", w])
        texts.append((rc, out.read_bytes()))
    assert len(pools) == 1
    assert texts[0] == texts[1]
    assert json.loads(texts[0][1])


def test_a_file_that_crashes_a_worker_is_quarantined_as_by_the_serial_read(
    factory: Path, serial: dict[str, Any], pools: list[ProcessPoolExecutor], monkeypatch: pytest.MonkeyPatch
) -> None:
    fork_only(monkeypatch)
    victim = next(a for a in serial["accounts"] if a.jobs and a.cluster is not None)
    err = next(factory.glob(f"client/*/*/entry_{victim.entry}/job.{victim.cluster}.{victim.proc}.err"))
    real = glidein_err.read_err

    def fragile(path: str, *a: Any, **kw: Any) -> Any:
        if path == str(err):
            raise MemoryError("a hostile .err")
        return real(path, *a, **kw)

    monkeypatch.setattr(glidein_err, "read_err", fragile)
    results = []
    for workers in (1, 2):
        ing, accounts = run(factory, workers)
        results.append(outcome(ing, accounts))
        assert ing.errors.counts[(Source.GLIDEIN_OUT, "quarantined")] == 1
        ks = key_str((victim.entry, victim.cluster, victim.proc))
        assert ks in ing.books.counted.bad_out
        (again,) = [a for a in accounts if a.key == victim.key]
        assert again.partition.accuracy is Accuracy.COMPLETED_LOG  # its completed_jobs line counted it
    assert len(pools) == 1
    assert results[0] == results[1]


def test_a_worker_killed_mid_backfill_leaves_the_rest_to_this_process(
    factory: Path,
    serial: dict[str, Any],
    pools: list[ProcessPoolExecutor],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The OOM killer takes a worker: the pool breaks, and every pilot not yet applied is read here."""
    fork_only(monkeypatch)
    here = os.getpid()
    victim = serial["accounts"][len(serial["accounts"]) // 2]
    err = next(factory.glob(f"client/*/*/entry_{victim.entry}/job.{victim.cluster}.{victim.proc}.err"))
    real = glidein_err.read_err

    def killer(path: str, *a: Any, **kw: Any) -> Any:
        if path == str(err) and os.getpid() != here:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(path, *a, **kw)

    monkeypatch.setattr(glidein_err, "read_err", killer)
    ing, accounts = run(factory, 2)
    assert len(pools) == 1
    assert "worker pool broke" in caplog.text
    assert gc.get_freeze_count() == 0  # unfrozen when the pool broke too
    got = outcome(ing, accounts)
    for k, want in serial.items():
        assert got[k] == want, k


@pytest.mark.parametrize("after", [1, 150])
def test_a_kill_mid_backfill_then_a_restart_counts_every_pilot_once(
    factory: Path, serial: dict[str, Any], pools: list[ProcessPoolExecutor], tmp_path: Path, after: int
) -> None:
    """The checkpoint saved while chunks are in the workers holds only pilots in the ledger."""
    ck = tmp_path / "ck.json"
    first: list[str] = []
    ing: Ingest | None = None

    def crash_later(a: PilotAccount) -> None:
        assert a.key is not None and ing is not None
        first.append(key_str(a.key))
        if len(first) == after:
            ing.save_checkpoint()  # as the stage does every minute of a long scan
        if len(first) == after + 37:
            raise Crash  # a kill between two saves

    work = tmp_path / "f"
    shutil.copytree(factory, work, symlinks=True)
    cfg = IngestConfig.one_shot(str(work), None, 3600.0, 2)
    cfg.checkpoint = str(ck)
    accounts: list[PilotAccount] = []
    ing = Ingest(cfg, outlets=Outlets(accounts=lambda a: (accounts.append(a), crash_later(a))))
    with pytest.raises(Crash):
        ing.scan()
    saved = json.loads(ck.read_text())["seen"]
    assert set(saved) <= set(first)  # nothing in the checkpoint that is not in the ledger
    assert len(saved) >= after  # and the save mid-backfill is in it
    again, accounts2 = run(work, 2, ck)
    keys2 = [key_str(a.key) for a in accounts2 if a.key is not None]
    assert not set(saved) & set(keys2)  # none counted twice
    assert sorted([*saved, *keys2]) == sorted(key_str(a.key) for a in serial["accounts"] if a.key is not None)
    assert sorted(again.books.counted.seen) == serial["seen"]
    pilots = {tuple(r[:-1]): r[-1] for r in again.ledger.to_json()["pilots"]}
    assert pilots == {tuple(r[:-1]): r[-1] for r in serial["ledger"]["pilots"]}
    assert len(pools) == 2


def test_the_threshold_keeps_small_scans_serial(
    factory: Path, serial: dict[str, Any], pools: list[ProcessPoolExecutor], monkeypatch: pytest.MonkeyPatch
) -> None:
    todo = len(list(factory.glob("client/*/*/entry_*/job.*.out")))
    monkeypatch.setattr(glidein_files, "POOL_MIN_PILOTS", todo + 1)
    ing, accounts = run(factory, 2)
    assert pools == []
    assert outcome(ing, accounts) == serial
    monkeypatch.setattr(glidein_files, "POOL_MIN_PILOTS", todo)
    ing, accounts = run(factory, 2)
    assert len(pools) == 1
    assert outcome(ing, accounts) == serial
    # The exporter's next scan (nothing new, or a few pilots) reads here.
    ing.scan()
    assert len(pools) == 1


def test_one_worker_never_starts_a_pool(factory: Path, pools: list[ProcessPoolExecutor]) -> None:
    run(factory, 1)
    assert pools == []
    assert IngestConfig(factory_dir=str(factory)).workers == 1  # the daemon's default


@pytest.mark.parametrize("command", ["export", "report", "analyze"])
def test_workers_must_be_a_whole_number_of_at_least_one(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    p = cli.parser()
    for value in ("0", "-2", "two", "1.5"):
        with pytest.raises(SystemExit) as e:
            p.parse_args([command, "--factory-dir", "/x", "--workers", value])
        assert e.value.code == 2
        assert f"argument --workers: expected a whole number >= 1, got {value!r}" in capsys.readouterr().err
    assert p.parse_args([command, "--factory-dir", "/x", "--workers", "3"]).workers == 3
    # export keeps the factory's cores unless told; report and analyze take up to 4 (pipeline.default_workers).
    assert p.parse_args([command, "--factory-dir", "/x"]).workers == (1 if command == "export" else None)


def test_a_read_crosses_the_pipe_unchanged(factory: Path) -> None:
    """The wire format (Read.__reduce__) gives back every field, of every kind of pilot."""
    import pickle

    from gwms_obs.accounting.overuse import Overuse
    from gwms_obs.catalogue import Category, Overused
    from gwms_obs.model import StatsFormat

    cfg = IngestConfig.one_shot(str(factory), None, 3600.0, 1)
    ing = Ingest(cfg)
    ing.scan()
    stage = next(s for s in ing.stages if isinstance(s, glidein_files.GlideinFilesStage))
    listing = ing.books.list_clients()
    ctx = stage._context(ing.books.clock(), ing.books.defaults)
    tasks = [glidein_files._task(p, os.stat(p.out)) for p in listing.present.values()]
    reads = pool.read_chunk(ctx, tasks)
    assert sum(r.acc is not None for r in reads) > N * 0.8
    assert any(r.acc is not None and r.acc.overuse for r in reads)
    assert any(r.records for r in reads)
    odd = pool.Read([("glidein_err", "bad", "/x", 3, "d")], 1, b"{}", True, True, True, 7, StatsFormat.REAL)
    odd.failure, odd.trace = "ValueError: x", "Traceback"
    acc = next(r.acc for r in reads if r.acc is not None)
    acc.gpus, acc.warnings = 2, ["no_end_line"]
    acc.partition.gpu[Category.GOODPUT] = 3.5
    acc.overuse[Overused.MEMORY] = Overuse(4, 1, 12.25)
    odd.acc = acc
    for r in [*reads, odd]:
        assert pickle.loads(pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL)) == r


def test_a_first_scan_without_clients_counts_what_one_with_them_counts(
    factory: Path, serial: dict[str, Any], pools: list[ProcessPoolExecutor]
) -> None:
    """The frontends' names are looked for in the lines before any pilot is read, so a first
    scan reads the pilots with their names and skips the lines of those counted from their .out,
    as a scan whose [clients] names them does: the same ledger, errors and format evidence."""
    ing, _ = run(factory, 1)
    names = dict(ing.books.names.learned)
    assert len(names) == 3 and not ing.books.names.unmapped
    assert (Source.COMPLETED_JOBS, "implausible") not in serial["errors"]  # the forged line: not checked
    for workers in (1, 2):
        assert outcome(*run(factory, workers, clients=names)) == serial
    assert len(pools) == 1


def test_looking_for_the_names_counts_nothing_and_moves_no_cursor(factory: Path) -> None:
    from gwms_obs.ingest.completed_jobs import CompletedJobsStage
    from gwms_obs.ingest.stage import Scan
    from gwms_obs.pipeline import ScanResult

    ing = Ingest(IngestConfig.one_shot(str(factory), None, 3600.0, 1))
    b = ing.books
    scan = Scan(0.0, b.list_clients(), ScanResult())
    assert len(b.names.unmapped) == 3
    next(s for s in ing.stages if isinstance(s, CompletedJobsStage)).name_clients(scan)
    assert not b.names.unmapped and len(b.names.learned) == 3
    assert b.follower.cursors == {} and not ing.errors.counts and not b.health.records


def test_the_pilots_no_line_names_are_read_by_the_pool_after_the_lines(
    factory: Path, tmp_path: Path, pools: list[ProcessPoolExecutor]
) -> None:
    """No completed_jobs line left to name the frontends (rotated away): every pilot waits for
    the lines, then (a one-shot scan: the tree is final) is read under its user's name."""
    work = tmp_path / "f"
    shutil.copytree(factory, work, symlinks=True)
    for log in work.glob("server/entry_*/completed_jobs_*.log"):
        log.unlink()
    want = outcome(*run(work, 1))
    assert want["errors"][(Source.GLIDEIN_OUT, "unmapped_client")] > N * 0.8
    assert '"user_fecmsglobal"' in json.dumps(want["ledger"])
    assert outcome(*run(work, 2)) == want
    assert len(pools) == 1
