"""A hostile pilot (issue 16): one case per attack on a copy of a clean simulated factory.

Each case asserts: no crash, the good pilots around the forgery counted as in
the clean factory, the bad one counted under its reason, and totals not moved
by the forgery. The file-level attacks (FIFOs, symlinks, budgets) have their
own cases in tests/test_files.py and tests/test_glidein_err.py; the whole
corpus in one `report` process, with its memory bound, is the last test here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gwms_obs import cli
from gwms_obs.accounting.ledger import Ledger
from gwms_obs.accounting.pilot import EntryDefaults, PilotAccount
from gwms_obs.catalogue import LABEL_OVERFLOW, LAST_SCAN, OVERFLOW, Accuracy, Outcome, Source
from gwms_obs.ingest.books import key_str
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.outputs.prometheus import FactoryCollector
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources import condor_sections

from .support.servers import free_port

N = 120
HUGE = b"999999999999999999"


def run(root: Path, checkpoint: Path | None = None) -> tuple[Ingest, dict[str, PilotAccount]]:
    accounts: dict[str, PilotAccount] = {}

    def keep(a: PilotAccount) -> None:
        if a.key is not None:
            accounts[key_str(a.key)] = a

    ing = Ingest(
        IngestConfig(
            factory_dir=str(root),
            checkpoint=str(checkpoint) if checkpoint else None,
            settle_seconds=0.0,
            final=True,
        ),
        outlets=Outlets(accounts=keep),
    )
    ing.scan()
    return ing, accounts


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Ingest, dict[str, PilotAccount]]:
    root = tmp_path_factory.mktemp("clean")
    simulate(root, N, seed=21)
    ing, accounts = run(root)
    assert not ing.errors.counts, ing.errors.counts  # the baseline itself is clean
    return root, ing, accounts


@pytest.fixture
def work(clean: tuple[Path, Ingest, dict[str, PilotAccount]], tmp_path: Path) -> Path:
    dst = tmp_path / "f"
    shutil.copytree(clean[0], dst, symlinks=True)
    return dst


def per_entry(led: Ledger, table: str = "cpu") -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in getattr(led, table).items():
        out[k[0]] = out.get(k[0], 0.0) + v
    return out


def pilots_of(root: Path, pred: Callable[[str, EntryDefaults], bool], ing: Ingest) -> list[Path]:
    """The .out files (with an .err) of the entries ``pred`` selects, in name order."""
    outs = sorted(root.glob("client/user_*/glidein_*/entry_*/job.*.out"))
    return [
        p
        for p in outs
        if p.with_suffix(".err").exists()
        and (e := p.parent.name.removeprefix("entry_")) in ing.defaults
        and pred(e, ing.defaults[e])
    ]


def key_of(out: Path) -> str:
    cluster, proc = out.name.split(".")[1:3]
    return f"{out.parent.name.removeprefix('entry_')}/{cluster}.{proc}"


def rewrite(path: Path, rx: bytes, repl: bytes) -> None:
    data = path.read_bytes()
    new, n = re.subn(rx, repl, data)
    assert n, f"{rx!r} not in {path}"
    st = path.stat()
    path.write_bytes(new)
    os.utime(path, (st.st_atime, st.st_mtime))


def assert_others_equal(got: dict[str, PilotAccount], want: dict[str, PilotAccount], forged: set[str]) -> None:
    """Every pilot but the forged ones accounted exactly as in the clean factory."""
    assert set(got) - forged == set(want) - forged
    for k in set(want) - forged:
        a, b = got[k], want[k]
        assert (a.client, a.site, a.cpus, a.gpus, a.partition.cpu, a.partition.gpu) == (
            b.client,
            b.site,
            b.cpus,
            b.gpus,
            b.partition.cpu,
            b.partition.gpu,
        ), k


def ran_jobs_with_stats(out: Path) -> bool:
    return b"Setting GLIDEIN_CPUS=" in out.read_bytes() and b"=== Glidein ending" in out.read_bytes()


# --- 1. values a pilot reports about itself ---------------------------------------------------------
def test_forged_core_count_takes_the_entrys_value(
    clean: tuple[Path, Ingest, dict[str, PilotAccount]], work: Path
) -> None:
    _, base, want = clean
    fixed = [p for p in pilots_of(work, lambda e, d: d.cpus_fixed, base) if ran_jobs_with_stats(p)]
    out = fixed[0]
    k = key_of(out)
    rewrite(out, rb"Setting GLIDEIN_CPUS=\d+", b"Setting GLIDEIN_CPUS=" + HUGE)
    rewrite(out.with_suffix(".err"), rb"\nGLIDEIN_CPUS \d+", b"\nGLIDEIN_CPUS " + HUGE)
    ing, got = run(work)
    assert ing.errors.counts[(Source.GLIDEIN_OUT, "implausible")] == 1
    # Counted, with the cores its entry gives (what it really had): totals unchanged.
    assert got[k].cpus == base.defaults[k.split("/")[0]].cpus == want[k].cpus
    assert per_entry(ing.ledger) == pytest.approx(per_entry(base.ledger))
    assert_others_equal(got, want, {k})


def test_forged_gpus_take_the_entrys_value(clean: tuple[Path, Ingest, dict[str, PilotAccount]], work: Path) -> None:
    _, base, want = clean
    gpu = [
        p
        for p in pilots_of(work, lambda e, d: bool(d.gpus), base)
        if b"found 2 GPUs" in p.with_suffix(".err").read_bytes()
    ]
    out = gpu[0]
    k = key_of(out)
    rewrite(out.with_suffix(".err"), rb"found 2 GPUs", b"found " + HUGE + b" GPUs")
    ing, got = run(work)
    assert ing.errors.counts[(Source.GLIDEIN_OUT, "implausible")] == 1
    assert got[k].gpus == 2
    assert per_entry(ing.ledger, "gpu") == pytest.approx(per_entry(base.ledger, "gpu"))
    assert_others_equal(got, want, {k})


def test_forged_end_time_is_not_believed(clean: tuple[Path, Ingest, dict[str, PilotAccount]], work: Path) -> None:
    _, base, want = clean
    out = next(p for p in pilots_of(work, lambda e, d: True, base) if ran_jobs_with_stats(p))
    k = key_of(out)
    rewrite(out, rb"\((\d{10})\) with code (\d+) after \d+", b"(100000000000000000) with code \\2 after " + HUGE)
    ing, got = run(work)
    assert ing.errors.counts[(Source.GLIDEIN_OUT, "implausible")] == 1
    # Counted from the factory's own line instead, no longer than its real life.
    assert got[k].partition.accuracy is Accuracy.COMPLETED_LOG
    assert got[k].lifetime <= want[k].lifetime + 1
    entry = k.split("/")[0]
    assert per_entry(ing.ledger)[entry] <= per_entry(base.ledger)[entry] * 1.0001
    assert sum(ing.ledger.pilots.values()) == sum(base.ledger.pilots.values())
    assert_others_equal(got, want, {k})


def test_forged_completed_jobs_duration_is_not_used(
    clean: tuple[Path, Ingest, dict[str, PilotAccount]], work: Path
) -> None:
    _, base, want = clean
    out = next(p for p in pilots_of(work, lambda e, d: True, base) if ran_jobs_with_stats(p))
    k = key_of(out)
    entry, cp = k.split("/")
    cluster, proc = cp.split(".")
    out.unlink()
    out.with_suffix(".err").unlink()
    logs = list((work / "server" / f"entry_{entry}").glob("completed_jobs_*.log"))
    ident = f"id=\"b'{cluster}.{int(proc):03d}'\"".encode()
    log = next(p for p in logs if ident in p.read_bytes())
    rewrite(log, re.escape(ident) + rb'(\s+)duration="\d+"', ident + b'\\1duration="' + HUGE + b'"')
    ing, got = run(work)
    assert ing.errors.counts[(Source.COMPLETED_JOBS, "implausible")] == 1
    # The event log (the factory's HTCondor-G view) counts it as lost, not the forged line.
    assert got[k].outcome is Outcome.LOST
    assert got[k].lifetime <= want[k].lifetime + 3600
    assert_others_equal(got, want, {k})


# --- 4. labels come from the factory ----------------------------------------------------------------
def test_pilot_written_labels_are_only_compared(
    clean: tuple[Path, Ingest, dict[str, PilotAccount]], work: Path
) -> None:
    _, base, want = clean
    outs = [p for p in pilots_of(work, lambda e, d: True, base) if ran_jobs_with_stats(p)][:3]
    for out in outs:
        rewrite(out, rb"client_name( +)= '[^']*'", b"client_name\\1= 'EVIL-CLIENT'")
        rewrite(out, rb"glidein_entry( +)= '[^']*'", b"glidein_entry\\1= 'EVIL-ENTRY'")
        rewrite(out.with_suffix(".err"), rb"\nGLIDEIN_Site [^\n]*", b"\nGLIDEIN_Site EVIL-SITE")
    ing, got = run(work)
    labels = {v for k in ing.ledger.pilots for v in k[:3]}
    assert not {v for v in labels if "EVIL" in v}
    assert ing.errors.counts[(Source.GLIDEIN_OUT, "label_mismatch")] == len(outs)
    assert per_entry(ing.ledger) == pytest.approx(per_entry(base.ledger))
    assert_others_equal(got, want, set())


def test_label_budget_caps_every_label_with_an_overflow_value() -> None:
    from gwms_obs.accounting.partition import Partition
    from gwms_obs.catalogue import Category

    led = Ledger()
    led.budget.caps = {"entry": 3, "client": 2, "site": 3}

    def acc(i: int) -> PilotAccount:
        p = Partition()
        p.add(Category.GOODPUT, cpu=10.0)
        return PilotAccount(
            entry=f"E{i % 4}", client=f"C{i}", site=f"S{i % 4}", cluster=i, proc=0, outcome=Outcome.RAN_JOBS,
            start=0.0, end=10.0, cpus=1, memory_mb=None, gpus=0, validation_duration=None, partition=p,
        )  # fmt: skip

    for i in range(8):
        led.add(acc(i))
    assert {k[1] for k in led.pilots} == {"C0", "C1", OVERFLOW}
    assert {k[0] for k in led.pilots} == {"E0", "E1", "E2", OVERFLOW}
    assert sum(led.cpu.values()) == 80.0  # nothing lost, only pooled
    assert led.budget.overflow == {"client": 6, "entry": 2, "site": 2}
    # The budget survives a restart: the values already in series keep their place.
    again = Ledger.from_json(json.loads(json.dumps(led.to_json())))
    again.budget.caps = led.budget.caps
    again.add(acc(1))
    again.add(acc(9))
    assert again.budget.overflow == {"client": 7, "entry": 2, "site": 2}
    assert {k[1] for k in again.pilots} == {"C0", "C1", OVERFLOW}


# --- 3. a scan never wedges ---------------------------------------------------------------------
def test_one_failing_source_does_not_stop_the_others(
    clean: tuple[Path, Ingest, dict[str, PilotAccount]], work: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, base, want = clean

    def boom(*_: object, **__: object) -> None:
        raise RuntimeError("a reader bug")

    monkeypatch.setattr("gwms_obs.sources.condor_event_log.parse_buffer", boom)
    ing = Ingest(IngestConfig(factory_dir=str(work), settle_seconds=0.0, final=True))
    res = ing.scan()
    assert res.failed == [Source.CONDOR_EVENT_LOG.value]
    assert ing.errors.counts[(Source.CONDOR_EVENT_LOG, "scan_failed")] == 1
    # Every .out and the entry status still read; the event log's lag shows the failure.
    assert res.by_source[Source.GLIDEIN_OUT] == sum(
        a.partition.accuracy is not Accuracy.CONDOR_EVENT_LOG for a in want.values()
    ) - sum(a.partition.accuracy is Accuracy.COMPLETED_LOG for a in want.values())
    assert ing.ledger.entries.keys() == base.ledger.entries.keys()
    assert ing.health.last_scan_end is not None
    assert ing.health.lag(ing.clock() + 60)[Source.CONDOR_EVENT_LOG] >= 60
    # `export --once` says so in its exit code.
    rc = cli.main(["export", "--once", "--factory-dir", str(work), "--listen", f"127.0.0.1:{free_port()}"])
    assert rc == 1


def test_scan_timestamp_is_exported_before_the_first_scan(work: Path) -> None:
    ing = Ingest(IngestConfig(factory_dir=str(work)))
    fams = {m.name: m for m in FactoryCollector(ing).collect()}
    (sample,) = fams[LAST_SCAN.name.removesuffix("_seconds").removesuffix("_timestamp") + "_timestamp_seconds"].samples
    assert sample.value == ing.health.started > 0
    over = fams[LABEL_OVERFLOW.name.removesuffix("_total")].samples
    assert {s.labels["label"] for s in over} == {"entry", "client", "site"}


# --- 2. a file that breaks the reader is quarantined ---------------------------------------------
def test_a_reader_crash_quarantines_the_file_and_the_factorys_records_count_it(
    clean: tuple[Path, Ingest, dict[str, PilotAccount]], work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, base, want = clean
    out = next(p for p in pilots_of(work, lambda e, d: True, base) if ran_jobs_with_stats(p))
    k = key_of(out)
    from gwms_obs.sources import glidein_err

    real = glidein_err.read_err
    calls: list[str] = []

    def fragile(path: str, *a: object, **kw: object) -> object:
        calls.append(path)
        if path == str(out.with_suffix(".err")):
            raise MemoryError("a hostile .err")
        return real(path, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(glidein_err, "read_err", fragile)
    ck = tmp_path / "ck.json"
    ing, got = run(work, ck)
    assert ing.errors.counts[(Source.GLIDEIN_OUT, "quarantined")] == 1
    assert got[k].partition.accuracy is Accuracy.COMPLETED_LOG  # its line counted it
    assert_others_equal(got, want, {k})
    calls.clear()
    Ingest(IngestConfig(factory_dir=str(work), checkpoint=str(ck), settle_seconds=0.0)).scan()
    assert str(out.with_suffix(".err")) not in calls  # never retried


def test_a_pilot_in_flight_at_a_crash_is_quarantined_at_the_next_start(
    clean: tuple[Path, Ingest, dict[str, PilotAccount]], work: Path, tmp_path: Path
) -> None:
    _, base, want = clean
    out = next(p for p in pilots_of(work, lambda e, d: True, base) if ran_jobs_with_stats(p))
    k = key_of(out)
    ck = tmp_path / "ck.json"
    (tmp_path / "ck.json.inflight").write_text(k)  # what a kill -9 while reading it leaves
    ing, got = run(work, ck)
    assert ing.errors.counts[(Source.GLIDEIN_OUT, "quarantined")] == 1
    assert got[k].partition.accuracy is Accuracy.COMPLETED_LOG
    assert not (tmp_path / "ck.json.inflight").exists()
    assert_others_equal(got, want, {k})


# --- the whole corpus in one report process ----------------------------------------------------------
def plant_corpus(work: Path, base: Ingest) -> None:
    """Every file-level attack at once, each on its own pilot (the report and daemon tests)."""
    outs = [p for p in pilots_of(work, lambda e, d: d.cpus_fixed, base) if ran_jobs_with_stats(p)]
    rewrite(outs[0], rb"Setting GLIDEIN_CPUS=\d+", b"Setting GLIDEIN_CPUS=" + HUGE)
    rewrite(outs[1], rb"\((\d{10})\) with code", b"(100000000000000000) with code")
    rewrite(outs[2], rb"client_name( +)= '[^']*'", b"client_name\\1= 'EVIL'")
    rewrite(outs[3].with_suffix(".err"), rb"\nGLIDEIN_Site [^\n]*", b"\nGLIDEIN_Site EVIL")
    # an .err of 150 sections of tiny ads (the budget across sections bounds it)
    ads = b"".join(b"JobStatus = 4\nJobStartDate = %d\nRemoteWallClockTime = 1\n\n" % i for i in range(20_000))
    section = condor_sections.encode("StartdHistoryLog", ads)
    with open(outs[4].with_suffix(".err"), "ab") as f:
        for _ in range(150):
            f.write(section)
    # FIFOs where a .out and an event log should be (a reader that opened them would hang)
    os.mkfifo(outs[5].with_name("job.99999999.0.out"))
    os.mkfifo(outs[5].with_name("condor_activity_20260611_EVIL.log"))


RSS_BOUND_MB = 150  # measured 49 MB (120 pilots + the corpus); the ad budget keeps the 150-section .err small


def test_report_over_a_hostile_corpus_stays_bounded(
    clean: tuple[Path, Ingest, dict[str, PilotAccount]], work: Path, tmp_path: Path
) -> None:
    plant_corpus(work, clean[1])
    out = tmp_path / "report.json"
    # The peak of this report alone: this process's RUSAGE_CHILDREN holds every earlier child's.
    measure = (
        "import resource, subprocess, sys;"
        "rc = subprocess.run(sys.argv[2:], stdout=open(sys.argv[1], 'wb')).returncode;"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)"
    )
    report = [str(Path(sys.executable).parent / "gwms-obs"), "report", "--factory-dir", str(work), "--format", "json"]
    proc = subprocess.run(
        [sys.executable, "-c", measure, str(out), *report], check=False, capture_output=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    peak_mb = int(proc.stdout) / 1024
    assert peak_mb < RSS_BOUND_MB
    rep = json.loads(out.read_bytes())
    assert "EVIL" not in json.dumps(rep)


# --- 8. pilots remembered as long as a log names them -------------------------------------------------
def test_a_log_replaced_after_its_pilots_files_went_does_not_count_them_again(
    clean: tuple[Path, Ingest, dict[str, PilotAccount]], work: Path, tmp_path: Path
) -> None:
    _, base, _ = clean
    ck = tmp_path / "ck.json"
    ing, _ = run(work, ck)
    n = sum(ing.ledger.pilots.values())
    assert n == sum(base.ledger.pilots.values())
    # The .out files are cleaned up and, weeks later (past the retention), a log is
    # rewritten (a copy: a new inode, so it is read again from its start).
    for p in work.glob("client/user_*/glidein_*/entry_*/job.*"):
        p.unlink()
    later = time.time() + 30 * 86400
    again = Ingest(IngestConfig(factory_dir=str(work), checkpoint=str(ck), settle_seconds=0.0), clock=lambda: later)
    again.scan()
    for log in work.glob("server/entry_*/completed_jobs_*.log"):
        copy = log.with_suffix(".tmp")
        shutil.copy2(log, copy)  # while the old one exists: surely another inode
        copy.replace(log)
    again.scan()
    assert sum(again.ledger.pilots.values()) == n


def test_limits_are_configurable_and_checked(tmp_path: Path) -> None:
    from gwms_obs.config import ConfigError, from_dict, value_problems

    cfg = from_dict({"factory_dir": str(tmp_path), "limits": {"max_cpus": 256, "max_lifetime": 86400}})
    assert (cfg.ingest.limits.max_cpus, cfg.ingest.limits.max_lifetime) == (256, 86400.0)
    with pytest.raises(ConfigError, match="unknown limits"):
        from_dict({"limits": {"max_cpu": 2}})
    assert value_problems(from_dict({"limits": {"max_gpus": 0}})) == [
        "limits.max_gpus must be a finite number > 0, got 0"
    ]


# --- live: the daemon, as users start it, on a hostile factory --------------------------------------
@pytest.mark.live
def test_the_daemon_on_a_hostile_factory_serves_and_stops(
    clean: tuple[Path, Ingest, dict[str, PilotAccount]], work: Path, tmp_path: Path
) -> None:
    from .support.servers import export_command, http_get, process, wait_for

    plant_corpus(work, clean[1])
    port = free_port()
    log = tmp_path / "export.log"
    url = f"http://127.0.0.1:{port}/metrics"
    cmd = export_command(work, port, tmp_path / "ck.json", interval=3600, settle=0)
    with process(cmd, log, ready_url=url) as p:

        def scanned() -> str | None:
            body = http_get(url, timeout=5)
            text = body.decode() if body else ""
            return text if re.search(r"^gwms_obs_scan_duration_seconds \d", text, re.M) else None

        text = wait_for("the first scan of the hostile factory", scanned, 120)
        assert "EVIL" not in text
        for reason in ("implausible", "label_mismatch", "not_regular", "budget"):
            assert f'reason="{reason}"' in text, [x for x in text.splitlines() if "parse_errors_total{" in x]
        p.terminate()
        assert p.wait(10) == 0  # SIGTERM is honoured: nothing wedged in open() or read()


# --- 8. files are what they claim -----------------------------------------------------------------
def test_links_out_of_the_tree_are_refused_once(
    clean: tuple[Path, Ingest, dict[str, PilotAccount]], work: Path
) -> None:
    _, base, _ = clean
    edir = next(work.glob("client/user_*/glidein_*/entry_*"))
    (edir / "job.99999998.0.out").symlink_to("/etc/passwd")
    (edir / "condor_activity_20260611_EVIL.log").symlink_to("/dev/zero")
    ing = Ingest(IngestConfig(factory_dir=str(work), settle_seconds=0.0, final=True))
    ing.scan()
    ing.scan()  # listed again: not counted again
    assert ing.errors.counts[(Source.GLIDEIN_OUT, "outside_tree")] == 1
    assert ing.errors.counts[(Source.CONDOR_EVENT_LOG, "outside_tree")] == 1
    # nothing read through them; every real pilot counted as before
    assert ing.ledger.pilots == base.ledger.pilots
    assert per_entry(ing.ledger) == pytest.approx(per_entry(base.ledger))


def test_entry_configuration_of_any_text_never_raises() -> None:
    from gwms_obs.ingest.descript import entry_defaults, resource_slots_gpus
    from gwms_obs.model import EntryDescript

    odd = {"GLIDEIN_CPUS": "²", "GLIDEIN_Max_Walltime": "9" * 40, "GLIDEIN_Resource_Slots": "GPUs,١"}
    d = entry_defaults(EntryDescript("e", "s", odd))
    assert (d.cpus, d.max_walltime, d.gpus) == (None, None, None)
    assert resource_slots_gpus("GPUs,²") is None
