"""Resource hogs (issue 12): user jobs over their slot's memory or cores, from the StartdHistoryLog ads.

The reader (usage values, hostile ones), the plausibility bounds, the per-job flag and its
tolerances, the ledger and its checkpoint, and the exporter on a simulated factory with the
labelled hog entry: the flag against anomalies.json's labels, the ratio per entry.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gwms_obs import catalogue
from gwms_obs.accounting import plausible
from gwms_obs.accounting.ledger import Ledger
from gwms_obs.accounting.overuse import CPU_TOLERANCE, job_overuse, overuse
from gwms_obs.accounting.pilot import EntryDefaults, from_glidein
from gwms_obs.catalogue import Overused
from gwms_obs.model import GlideinErr, GlideinOut, Job
from gwms_obs.outputs.prometheus import FactoryCollector
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources.condor_sections import encode
from gwms_obs.sources.glidein_err import parse_err, read_err
from tests.support.reference import reference_file

SRC = "glidein_err"
HOG_ENTRY = "CMSHTPC_T2_HOG_ce"


def ad(**attrs: object) -> bytes:
    base: dict[str, object] = {
        "GlobalJobId": '"submit.example.org#40.0#1656036400"',
        "JobStatus": 4,
        "JobCurrentStartDate": 1656036500,
        "CompletionDate": 1656040100,  # wall 3600 s
        "ExitCode": 0,
        "RequestCpus": 2,
        "RequestMemory": 2000,
    }
    base.update(attrs)
    return "".join(f"{k} = {v}\n" for k, v in base.items() if v is not None).encode()


def jobs_of(*ads: bytes) -> tuple[list[Job], ParseErrors]:
    errors = ParseErrors()
    err = parse_err(encode("StartdHistoryLog", b"\n".join(ads)), "job.1.0.err", errors)
    assert err.jobs is not None
    return err.jobs, errors


# --- the reader -------------------------------------------------------------------------------


def test_reader_takes_memory_usage_and_cpu_times() -> None:
    (j,), errors = jobs_of(ad(MemoryUsage=4343, ResidentSetSize=4446000, RemoteUserCpu="7000.0", RemoteSysCpu="123.5"))
    assert errors.total() == 0
    assert j.memory_usage_mb == 4343  # MemoryUsage wins over ResidentSetSize
    assert j.cpu_seconds == 7123.5


def test_reader_without_memory_usage_takes_the_resident_set_size() -> None:
    (j,), errors = jobs_of(ad(ResidentSetSize=2048001, RemoteUserCpu=10))
    assert errors.total() == 0
    assert j.memory_usage_mb == 2001  # (KiB + 1023) / 1024, HTCondor's rounding
    assert j.cpu_seconds == 10.0  # RemoteSysCpu absent: the user CPU alone


def test_memory_usage_as_the_glideins_expression_is_not_an_error() -> None:
    """The glidein's condor_config (reference stdout) defines MemoryUsage by an expression; an ad may
    carry it unevaluated. Then the reader computes it as that expression does: PSS, else RSS."""
    text = reference_file("glideFactoryLogParser_glidein_stdout.out").read_text(errors="replace")
    m = re.search(r"^MEMORY_USAGE_METRIC (.+)$", text, re.M)
    assert m and "ProportionalSetSizeKb" in m.group(1)
    (pss, rss, neither), errors = jobs_of(
        ad(MemoryUsage=m.group(1), ProportionalSetSizeKb=3072000, ResidentSetSize=4096000),
        ad(MemoryUsage=m.group(1), ResidentSetSize=4096000),
        ad(MemoryUsage=m.group(1)),
    )
    assert errors.total() == 0
    assert (pss.memory_usage_mb, rss.memory_usage_mb, neither.memory_usage_mb) == (3000, 4000, None)
    assert neither.cpu_seconds is None  # no CPU times in the ad: unknown, not 0


@pytest.mark.parametrize(
    ("attrs", "memory", "cpu"),
    [
        ({"MemoryUsage": '"lots"', "ResidentSetSize": 2048000}, 2000, None),  # bad MemoryUsage: RSS stands in
        ({"MemoryUsage": -5}, None, None),
        ({"MemoryUsage": "true"}, None, None),
        ({"MemoryUsage": "99999999999999999999999"}, None, None),  # not a 64-bit literal
        ({"MemoryUsage": "1e300"}, None, None),  # over any node
        ({"ResidentSetSize": "1e19"}, None, None),
        ({"RemoteUserCpu": "nan", "RemoteSysCpu": 5}, None, None),  # a part is not the whole
        ({"RemoteUserCpu": 100, "RemoteSysCpu": "-1.0"}, None, None),
        ({"RemoteUserCpu": "4e9", "MemoryUsage": 10}, 10, None),  # a century of CPU
    ],
)
def test_hostile_usage_is_counted_and_the_rest_of_the_ad_kept(
    attrs: dict[str, object], memory: int | None, cpu: float | None, caplog: pytest.LogCaptureFixture
) -> None:
    good = ad(GlobalJobId='"s#2.0#1"', MemoryUsage=100, RemoteUserCpu=50)
    with caplog.at_level("WARNING", logger="gwms_obs.parse"):
        (j, after), errors = jobs_of(ad(**attrs), good)
    assert errors.counts == {(SRC, "bad_number"): 1}
    # Logged with the file, the section's byte offset and the ad.
    assert re.search(r"bad_number\) in job\.1\.0\.err at byte 0: ad 0: \w+ = ", caplog.text), caplog.text
    assert (j.memory_usage_mb, j.cpu_seconds) == (memory, cpu)
    # The rest of the ad and the next ad are untouched.
    assert (j.start, j.end, j.cpus, j.memory_mb, j.exit_code) == (1656036500.0, 1656040100.0, 2, 2000, 0)
    assert (after.memory_usage_mb, after.cpu_seconds, after.global_job_id) == (100, 50.0, "s#2.0#1")


def test_usage_out_of_the_entrys_bounds_is_dropped_as_implausible() -> None:
    """Within the reader's sanity caps but beyond any node of the entry: the value goes, the job stays."""
    (j, ok), _ = jobs_of(
        ad(MemoryUsage=3 << 20, RemoteUserCpu=3600 * 2000),  # 3 TB for a 1-core entry; 2000 cores busy
        ad(MemoryUsage=6000, RemoteUserCpu=3600 * 6),  # a hog, but a plausible one
    )
    err = GlideinErr(path="job.1.0.err", jobs=[j, ok])
    out = GlideinOut(path="job.1.0.out", startup_time=1656036000.0, glidein_end=1656041000.0)
    d = EntryDefaults(cpus=1, cpus_fixed=True)
    v = plausible.check_glidein(out, err, plausible.bounds(d, plausible.DEFAULT_LIMITS, 1656041000.0))
    assert v.believed and err.jobs == [j, ok]
    assert len(v.problems) == 2 and all("submit.example.org#40.0" in p for p in v.problems)
    assert (j.memory_usage_mb, j.cpu_seconds) == (None, None)
    assert (ok.memory_usage_mb, ok.cpu_seconds) == (6000, 21600.0)


def test_one_job_out_of_time_drops_the_history_and_the_usage_is_not_checked() -> None:
    """A forged time on one ad: the jobs are gone (the Stats block stands in), their usage unread."""
    (early, hog), _ = jobs_of(ad(), ad(MemoryUsage=3 << 20))
    late_end = Job(start=early.start, end=4_000_000_000.0, cpus=1, memory_mb=2000, gpus=0, exited=True)
    early_start = Job(start=1.0, end=None, cpus=1, memory_mb=2000, gpus=0, exited=False)
    out = GlideinOut(path="job.1.0.out", startup_time=1656036000.0, glidein_end=1656041000.0)
    d = EntryDefaults(cpus=1, cpus_fixed=True)
    b = plausible.bounds(d, plausible.DEFAULT_LIMITS, 1656041000.0)
    for bad in (late_end, early_start):
        err = GlideinErr(path="job.1.0.err", jobs=[early, bad, hog])
        v = plausible.check_glidein(out, err, b)
        assert v.believed and err.jobs is None
        assert v.problems == [f"job time {bad.start}..{bad.end} outside [{b.earliest:.0f}, {b.latest:.0f}]"]
    assert hog.memory_usage_mb == 3 << 20  # not checked (nor dropped): the history is not used
    assert b.job_out_of_time([early, hog]) is None


# --- the flag ---------------------------------------------------------------------------------


def job(memory_mb: int, usage: int | None, cpus: int, cpu: float | None, wall: float = 1000.0) -> Job:
    return Job(0.0, wall, cpus, memory_mb, 0, True, 0, memory_usage_mb=usage, cpu_seconds=cpu)


def test_memory_over_the_slot_is_overuse_at_the_slot_itself() -> None:
    assert job_overuse(job(2000, 2000, 1, None)) == {Overused.MEMORY: None}
    o = job_overuse(job(2000, 2001, 1, None))
    assert o[Overused.MEMORY] == pytest.approx(1 / 2048 * 1000)  # 1 MB over, per 2 GB, for 1000 s
    assert job_overuse(job(2000, 6096, 1, None))[Overused.MEMORY] == pytest.approx(2 * 1000)
    # The slot is what the startd provisioned (MemoryProvisioned, read into memory_mb), not the request.
    (j,), _ = jobs_of(ad(RequestMemory=2000, MemoryProvisioned=2500, MemoryUsage=2400))
    assert j.memory_mb == 2500 and job_overuse(j) == {Overused.MEMORY: None}


def test_cpu_over_a_quarter_above_the_cores_is_overuse() -> None:
    at = 1000.0 * 2 * CPU_TOLERANCE
    assert job_overuse(job(2000, None, 2, at)) == {Overused.CPU: None}
    assert job_overuse(job(2000, None, 2, at + 1)) == {Overused.CPU: pytest.approx(at + 1 - 2000)}
    # No end: HTCondor's end stands in; without that either, no CPU share to compare with.
    running = Job(0.0, None, 1, 2000, 0, False, cpu_seconds=5000.0)
    assert job_overuse(running, end=1000.0) == {Overused.CPU: 4000.0}
    assert job_overuse(running) == {}


def test_overuse_counts_measured_and_overusing_jobs_per_resource() -> None:
    o = overuse([job(2000, 3000, 1, 500.0), job(2000, 1000, 1, 2000.0), job(2000, None, 1, None)])
    assert (o[Overused.MEMORY].measured, o[Overused.MEMORY].jobs) == (2, 1)
    assert (o[Overused.CPU].measured, o[Overused.CPU].jobs) == (2, 1)
    assert o[Overused.CPU].seconds == 1000.0
    assert overuse([job(2000, None, 1, None)]) == {}


# --- the ledger -------------------------------------------------------------------------------


def test_ledger_counts_overuse_and_its_checkpoint_round_trips() -> None:
    out = GlideinOut(
        path="job.1.0.out",
        entry="E",
        client="fe",
        startup_time=0.0,
        condor_started=True,
        condor_start=10.0,
        condor_end=2000.0,
        glidein_end=2010.0,
        cpus=4,
        memory_mb=8000,
    )
    hog, fine = job(2000, 5000, 1, 1500.0), job(2000, 1000, 1, 500.0)
    hog.start = fine.start = 20.0
    a = from_glidein(out, GlideinErr(path="e", jobs=[hog, fine]), EntryDefaults(site="S"))
    assert a is not None
    led = Ledger()
    led.add(a)
    led.add(from_glidein(out, GlideinErr(path="e", jobs=[fine]), EntryDefaults(site="S")))  # type: ignore[arg-type]
    assert led.overusing == {("E", "fe", "S", "memory"): 1, ("E", "fe", "S", "cpu"): 1}
    assert led.overuse_seconds[("E", "fe", "S", "memory")] == pytest.approx(3000 / 2048 * 980)
    assert led.overuse_seconds[("E", "fe", "S", "cpu")] == pytest.approx(1500 - 980)
    back = Ledger.from_json(json.loads(json.dumps(led.to_json())))
    assert back.overusing == led.overusing and back.overuse_seconds == led.overuse_seconds
    # A checkpoint from before the counters existed loads with none.
    old = led.to_json()
    del old["overusing"], old["overuse_seconds"]
    assert Ledger.from_json(old).overusing == {}


def test_no_overuse_series_without_job_ads() -> None:
    """A pilot accounted from its Stats block says nothing of usage: no series, not a 0."""
    out = GlideinOut(path="o", entry="E", client="fe", startup_time=0.0, glidein_end=100.0, condor_started=True)
    a = from_glidein(out, None, EntryDefaults(site="S"))
    assert a is not None and a.overuse == {}


# --- the exporter on the simulated hog ---------------------------------------------------------


@pytest.fixture(scope="module")
def hog_factory(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Ingest]:
    root = tmp_path_factory.mktemp("hog")
    simulate(root, 400, 5, anomalies=True)
    ing = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=0.0, final=True))
    ing.scan()
    return root, ing


def samples(ing: Ingest, name: str) -> dict[tuple[str, str], float]:
    """(entry, resource or category) -> value summed over clients, from the collector's output."""
    out: dict[tuple[str, str], float] = {}
    for fam in FactoryCollector(ing).collect():
        for s in fam.samples:
            if s.name == name:
                k = (s.labels["entry"], s.labels.get("resource") or s.labels["category"])
                out[k] = out.get(k, 0.0) + s.value
    return out


def test_exporter_shows_the_hog_entrys_overuse_far_above_the_others(hog_factory: tuple[Path, Ingest]) -> None:
    _, ing = hog_factory
    over = samples(ing, catalogue.USER_JOBS_OVERUSING.name)
    jobs: dict[str, float] = {}
    for (entry, _), v in samples(ing, catalogue.USER_JOBS.name).items():
        jobs[entry] = jobs.get(entry, 0.0) + v
    ratio = {k: v / jobs[k[0]] for k, v in over.items()}
    assert {r for _, r in ratio} == {"memory", "cpu"}
    for res in ("memory", "cpu"):
        assert ratio[HOG_ENTRY, res] > 0.1  # the rule's threshold (dashboards/gen/health.py)
        assert max(v for (e, r), v in ratio.items() if r == res and e != HOG_ENTRY) == 0.0
    seconds = samples(ing, catalogue.USER_JOB_OVERUSE_SECONDS.name)
    assert seconds[HOG_ENTRY, "memory"] > 0 and seconds[HOG_ENTRY, "cpu"] > 0
    assert ing.errors.total() == 0


def test_the_job_flag_finds_exactly_the_labelled_hogs(hog_factory: tuple[Path, Ingest]) -> None:
    """Precision and recall of the per-job flag against anomalies.json, per resource: 1.0 and 1.0."""
    root, ing = hog_factory
    doc = json.loads((root / "anomalies.json").read_text())
    (label,) = [a for a in doc["anomalies"] if a["kind"] == "resource_hog"]
    truth = {res: {j["global_job_id"] for j in label["jobs"] if j[res]} for res in ("memory", "cpu")}
    assert all(truth.values())
    flagged: dict[str, set[str]] = {"memory": set(), "cpu": set()}
    errors = ParseErrors()
    n = 0
    for path in root.rglob("job.*.err"):
        err = read_err(str(path), errors, detail=False)
        for j in (err.jobs if err else None) or []:
            n += 1
            for res, excess in job_overuse(j).items():
                if excess is not None:
                    flagged[res.value].add(j.global_job_id or f"{path}:{j.start}")
    assert n > 1000 and errors.total() == 0
    for res in ("memory", "cpu"):
        tp = len(flagged[res] & truth[res])
        precision, recall = tp / len(flagged[res]), tp / len(truth[res])
        assert (precision, recall) == (1.0, 1.0), (res, precision, recall)
    # The exporter counted the same jobs.
    over = samples(ing, catalogue.USER_JOBS_OVERUSING.name)
    assert {res: over[HOG_ENTRY, res] for res in truth} == {res: len(t) for res, t in truth.items()}
