"""The factory simulator: determinism, layout, formats (plain regexes), job-time consistency."""

from __future__ import annotations

import hashlib
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from gwms_obs.model import StatsFormat
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.simulate.factory import SimulationSummary, simulate
from gwms_obs.simulate.plan import SimPilot
from gwms_obs.simulate.scenario import CLIENTS, DEFAULT_ENTRIES
from gwms_obs.simulate.write.trace_spool import returns_spool
from gwms_obs.sources.condor_sections import decode, iter_sections
from gwms_obs.sources.glidein_err import parse_err
from gwms_obs.sources.glidein_out import parse_out
from gwms_obs.sources.schedd_status import read_schedd_status
from tests.support.readers import completed_jobs_file
from tests.support.simulated import simulated_factory, truth

N = 700


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimulationSummary]:
    return simulated_factory(tmp_path_factory, N, seed=7)


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def _entry_dir(root: Path, p: SimPilot) -> Path:
    return root / "client" / f"user_{p.username}" / "glidein_gfactory_instance" / f"entry_{p.entry}"


def test_deterministic(tmp_path: Path) -> None:
    a = simulate(tmp_path / "a", 150, seed=3)
    b = simulate(tmp_path / "b", 150, seed=3)
    simulate(tmp_path / "c", 150, seed=4)
    assert _tree_hash(tmp_path / "a") == _tree_hash(tmp_path / "b")
    assert _tree_hash(tmp_path / "a") != _tree_hash(tmp_path / "c")
    assert a.by_kind == b.by_kind and a.bytes == b.bytes


def test_end_puts_the_snapshot_there_and_shifts_the_same_tree(tmp_path: Path) -> None:
    """--end (the compose stack's `now`): the same tree as from the start it implies, every entry's
    status written at the end, so a stack started then sees no stale entry."""
    end = 1_795_000_000.7
    a = simulate(tmp_path / "a", 120, seed=3, end=end)
    b = simulate(tmp_path / "b", 120, seed=3, start=1_795_000_000 - 48 * 3600 - 3 * 3600)
    assert a.snapshot == b.snapshot == 1_795_000_000 and a.start == b.start
    assert _tree_hash(tmp_path / "a") == _tree_hash(tmp_path / "b")
    statuses = sorted((tmp_path / "a" / "monitor").glob("entry_*/schedd_status.xml"))
    assert len(statuses) == len(DEFAULT_ENTRIES)
    for path in statuses:
        st = read_schedd_status(str(path), ParseErrors())
        assert st is not None and st.updated == a.snapshot, path
    with pytest.raises(ValueError, match="start or end"):
        simulate(tmp_path / "c", 10, seed=3, start=end, end=end)


def test_end_now_on_the_command_line(tmp_path: Path) -> None:
    import subprocess
    import sys
    import time

    before = time.time()
    cmd = [sys.executable, "-m", "gwms_obs.cli", "simulate", "--out", str(tmp_path / "f"), "--pilots", "20"]
    r = subprocess.run([*cmd, "--end", "now"], capture_output=True, text=True, timeout=120, check=False)
    after = time.time()
    assert r.returncode == 0, r.stderr
    for path in (tmp_path / "f" / "monitor").glob("entry_*/schedd_status.xml"):
        st = read_schedd_status(str(path), ParseErrors())
        assert st is not None and st.updated is not None and int(before) <= st.updated <= after, path
    bad = subprocess.run([*cmd, "--end", "yesterday"], capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and "not a time: 'yesterday'" in bad.stderr


def test_layout_and_counts(tree: tuple[Path, SimulationSummary]) -> None:
    root, s = tree
    pilots = truth(s)
    assert s.pilots == len(pilots) == N
    assert sum(s.by_kind.values()) == N
    for e in DEFAULT_ENTRIES:
        assert (root / "monitor" / f"entry_{e.name}" / "schedd_status.xml").is_file()
        assert (root / "monitor" / f"entry_{e.name}" / "descript.xml").is_file()
        assert list((root / "server" / f"entry_{e.name}").glob("completed_jobs_????????.log"))
    assert (root / "monitor" / "descript.xml").is_file()
    outs = {p.name for p in root.glob("client/user_*/glidein_gfactory_instance/entry_*/job.*.out")}
    assert len(outs) == sum(p.has_out for p in pilots)
    for p in pilots:
        d = _entry_dir(root, p)
        stem = f"job.{p.cluster}.{p.proc}"
        assert (d / f"{stem}.out").exists() == p.has_out == (d / f"{stem}.err").exists()
        assert p.has_out == (p.kind not in ("lost", "in_queue"))
    assert s.by_kind["lost"] > 0 and s.by_kind["in_queue"] > 0


_OUT_RE = {
    "start": re.compile(
        r"^Starting glidein_startup\.sh at \w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d UTC \d{4} \((\d+)\)$", re.M
    ),
    "cluster": re.compile(r"^condorg_cluster   = '(\d+)'$", re.M),
    "proc": re.compile(r"^condorg_subcluster= '(\d+)'$", re.M),
    "cpus": re.compile(r"^\w{3} \w{3} [ \d]\d [\d:]{8} UTC \d{4} Setting GLIDEIN_CPUS=(\d+)$", re.M),
    "mem": re.compile(r"^\w{3} \w{3} [ \d]\d [\d:]{8} UTC \d{4} Setting GLIDEIN_MaxMemMBs=(\d+)$", re.M),
    "val": re.compile(r"^=== Last script starting .* \((\d+)\) after validating for (\d+) ===$", re.M),
    "cstart": re.compile(r"^=== Condor starting .* \((\d+)\) ===$", re.M),
    "cend": re.compile(r"^=== Condor ended .* \((\d+)\) after (\d+) ===$", re.M),
    "gend": re.compile(r"^=== Glidein ending .* \((\d+)\) with code (\d+) after (\d+) ===$", re.M),
    "stats": re.compile(r"^=== Stats of main ===\n(.*?)^=== End Stats of main ===$", re.M | re.S),
    "claims": re.compile(r"^Total number of activations/claims: (\d+)$", re.M),
    "xml": re.compile(
        r"^=== XML description of glidein activity ===\n(<\?xml.*?</OSGTestResult>)\n"
        r"=== End XML description of glidein activity ===$",
        re.M | re.S,
    ),
}


def test_out_files(tree: tuple[Path, SimulationSummary]) -> None:
    root, s = tree
    for p in truth(s):
        if not p.has_out:
            continue
        text = (_entry_dir(root, p) / f"job.{p.cluster}.{p.proc}.out").read_text()
        m = {k: r.search(text) for k, r in _OUT_RE.items()}
        assert m["start"] and int(m["start"][1]) == p.startup
        assert m["cluster"] and int(m["cluster"][1]) == p.cluster
        assert m["proc"] and int(m["proc"][1]) == p.proc
        assert m["gend"] and int(m["gend"][1]) == p.glidein_end
        assert p.glidein_end is not None and p.startup is not None
        assert int(m["gend"][3]) == p.glidein_end - p.startup
        xml = m["xml"]
        assert xml is not None
        result = ET.fromstring(xml[1])
        status = result.findtext("result/status")
        metrics = {e.get("name"): e.text for e in result.iter("metric")}
        if p.kind == "validation_failed":
            assert status == "ERROR" and metrics["TestID"] == p.failed_script and "failure" in metrics
            assert not m["cstart"] and not m["cend"] and not m["stats"]
            assert int(m["gend"][2]) == 1
            continue
        assert status == "OK" and metrics["CondorKilled"] == str(p.condor_killed)
        assert m["cpus"] and int(m["cpus"][1]) == p.cpus
        assert m["mem"] and int(m["mem"][1]) == p.memory_mb
        assert m["val"] and int(m["val"][1]) == p.validation_end
        assert m["cstart"] and int(m["cstart"][1]) == p.condor_start
        assert m["cend"] and int(m["cend"][1]) == p.condor_end
        assert p.condor_end is not None and p.condor_start is not None
        assert int(m["cend"][2]) == p.condor_end - p.condor_start
        assert m["claims"] and int(m["claims"][1]) == len(p.jobs)
        stats = m["stats"]
        assert stats is not None
        body = stats[1]
        if p.stats_format is StatsFormat.EMPTY:
            assert body == ""
        elif p.stats_format is StatsFormat.REAL:
            done = [j for j in p.jobs if j.end is not None]
            assert re.search(rf"^\(Real\) Total jobs {len(done)} utilization (\d+)$", body, re.M)
            assert re.search(
                r"^\(Normalized\) Total badOther jobs \d+ \([\d.]+%\) utilization \d+ \([\d.]+%\)$", body, re.M
            )
        else:
            assert re.search(r"^Total jobs \d+ utilization \d+$", body, re.M)
            assert re.search(r"^Total goodZ jobs \d+  \([\d.]+%\) utilization \d+ \([\d.]+%\)$", body, re.M)


_AD_ATTRS = (
    "GlobalJobId",
    "ClusterId",
    "ProcId",
    "Owner",
    "JobStatus",
    "JobStartDate",
    "JobCurrentStartDate",
    "CompletionDate",
    "EnteredCurrentStatus",
    "RequestCpus",
    "RequestMemory",
    "RequestGPUs",
    "CpusProvisioned",
    "MemoryProvisioned",
    "GPUsProvisioned",
    "RemoteWallClockTime",
)
_BANNER = re.compile(r'^\*\*\* Offset = (\d+) ClusterId = (\d+) ProcId = (\d+) Owner = "(\w+)" CompletionDate = (\d+)$')


def _ads(history: str) -> list[dict[str, str]]:
    ads: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    offset = 0
    pos = 0
    for line in history.splitlines(keepends=True):
        m = _BANNER.match(line.rstrip("\n"))
        if m:
            assert int(m[1]) == offset  # banners follow their ad and point at its first byte
            assert cur["ClusterId"] == m[2] and cur["ProcId"] == m[3] and cur["CompletionDate"] == m[5]
            ads.append(cur)
            cur = {}
            offset = pos + len(line)
        else:
            k, v = line.rstrip("\n").split(" = ", 1)
            cur[k] = v
        pos += len(line)
    assert not cur
    return ads


def test_err_files(tree: tuple[Path, SimulationSummary]) -> None:
    root, s = tree
    for p in truth(s):
        if not p.has_out:
            continue
        data = (_entry_dir(root, p) / f"job.{p.cluster}.{p.proc}.err").read_bytes()
        text = data.decode()
        enc = re.search(
            r"^=== Encoded XML description of glidein activity ===\nbegin-base64 644 -\n(.*?)\n====\n"
            r"=== End encoded XML description of glidein activity ===\n\Z",
            text,
            re.M | re.S,
        )
        assert enc is not None
        long_xml = decode(enc[1].encode(), 1 << 22).decode()
        ids = re.findall(r'^      <OSGTestResult id="([^"]+)" version="4.3.1">$', long_xml, re.M)
        assert ids[0] == "main/setup_script.sh"
        assert f'<env name="condorg_cluster">{p.cluster}</env>' in long_xml
        sections = {sec.name: sec for sec in iter_sections(data)}
        # gwms-trace.sh's span spool, in the pilots that could not send it (simulate/write/trace_spool.py)
        assert ("GWMSTraceSpool" in sections) == returns_spool(s.seed, p.cluster, p.proc)
        sections.pop("GWMSTraceSpool", None)
        if p.kind == "validation_failed":
            assert ids[-1] == p.failed_script
            assert re.search(r"^=== Validation error in \S+ ===$", text, re.M)
            assert not sections
            continue
        assert ids[-1] == "condor_startup.sh"
        assert text.count("=== validation OK in ") == len(ids) - 1
        cfg = re.search(r"^-------- glidein_config in condor_startup\.sh ----------\n(.*?)^-{53}$", text, re.M | re.S)
        assert cfg is not None
        conf = dict(line.split(" ", 1) for line in cfg[1].splitlines() if not line.startswith("#"))
        assert int(conf["GLIDEIN_CPUS"]) == p.cpus and int(conf["MEMORY"]) == p.memory_mb
        assert conf["GLIDEIN_Site"] == next(e.site for e in DEFAULT_ENTRIES if e.name == p.entry)
        if p.gpus:
            assert conf["GLIDEIN_Resource_Slots"] == f"GPUs,{p.gpus},type=main"
            assert re.search(rf"^condor_gpu_discovery found {p.gpus} GPUs: ", text, re.M)
        else:
            assert "No GPUs found with condor_gpu_discovery, setting them to 0" in text
        assert {"MasterLog", "StartdLog"} <= set(sections)
        if not p.jobs:
            assert "StartdHistoryLog" not in sections
            continue
        payload = sections["StartdHistoryLog"].payload
        assert payload is not None
        ads = _ads(decode(payload, 1 << 24).decode())
        assert len(ads) == len(p.jobs)
        for ad, job in zip(ads, sorted(p.jobs, key=lambda j: (j.start, j.cluster, j.proc)), strict=True):
            assert all(a in ad for a in _AD_ATTRS)
            assert int(ad["JobCurrentStartDate"]) == job.start and int(ad["RequestCpus"]) == job.cpus
            if job.end is None:
                assert ad["JobStatus"] == "2" and ad["CompletionDate"] == "0" and "ExitCode" not in ad
                assert int(ad["LastVacateTime"]) == p.condor_end
            else:
                assert ad["JobStatus"] == "4" and int(ad["CompletionDate"]) == job.end
                assert ("ExitCode" in ad) or ad.get("ExitBySignal") == "true" or job.kind == "badOther"


def test_jobs_fit_in_time_and_resources(tree: tuple[Path, SimulationSummary]) -> None:
    _, s = tree
    for p in truth(s):
        if not p.jobs:
            continue
        assert p.condor_start is not None and p.condor_end is not None
        points: list[tuple[int, int, int, int, int]] = []
        for j in p.jobs:
            assert p.condor_start < j.start < p.condor_end
            end = p.condor_end if j.end is None else j.end
            assert j.start < end <= p.condor_end
            points.append((j.start, 1, j.cpus, j.memory_provisioned, j.gpus))
            points.append((end, -1, j.cpus, j.memory_provisioned, j.gpus))
        c = m = g = 0
        for _, sign, cpus, mem, gpus in sorted(points, key=lambda x: (x[0], x[1])):  # ends before starts
            c, m, g = c + sign * cpus, m + sign * mem, g + sign * gpus
            assert c <= p.cpus and m <= p.memory_mb and g <= p.gpus
        assert (p.condor_killed) == any(j.end is None for j in p.jobs)


_EVENT = re.compile(r"^(\d{3}) \((\d+)\.(\d{3})\.000\) (\d{4}-\d\d-\d\d|\d\d/\d\d) (\d\d:\d\d:\d\d) ", re.M)


def test_event_logs(tree: tuple[Path, SimulationSummary]) -> None:
    root, s = tree
    seen: dict[tuple[int, int], list[str]] = {}
    legacy_seen = False
    for f in root.glob("client/user_*/glidein_gfactory_instance/entry_*/condor_activity_????????_*.log"):
        text = f.read_text()
        assert text.endswith("...\n")
        events = _EVENT.findall(text)
        assert len(events) == text.count("...\n")
        stamps = [d + " " + t for _, _, _, d, t in events]
        assert stamps == sorted(stamps)  # appended in time order
        legacy = "/" in events[0][3]
        legacy_seen |= legacy
        assert all(("/" in e[3]) == legacy for e in events)
        client = f.name.split("_", 3)[3].removesuffix(".log")
        assert client in {c.client_name for c in CLIENTS.values()}
        for code, cl, pr, *_ in events:
            seen.setdefault((int(cl), int(pr)), []).append(code)
    assert legacy_seen
    for p in truth(s):
        codes = seen[(p.cluster, p.proc)]
        assert codes[:2] == ["000", "027"]
        if p.kind == "lost":
            assert codes[-1] == "009" or codes[-1] == "012"
        elif p.kind != "in_queue":
            assert codes == ["000", "027", "001", "005"]


_COMPLETED = re.compile(
    r'^<job +terminated="[\d\-T:+]+" +client="([^"]+)" +username="(\w+)" +id="(?:b\')?(\d+)\.(\d{3})\'?" +'
    r'duration="(-?\d+)" +condor_started="(True|False)" +condor_duration="(\d+)">'
    r'<user +jobsnr="(\d+)" +duration="(\d+)" +goodput="(\d+)" +terminated="(\d+)"/>'
    r'<wastemill +validation="(-?\d+)" +idle="(-?\d+)" +nosuccess="(-?\d+)" +badput="(-?\d+)"/></job>$'
)


def test_completed_jobs(tree: tuple[Path, SimulationSummary]) -> None:
    root, s = tree
    lines: dict[tuple[int, int], re.Match[str]] = {}
    py2_seen = False
    for f in root.glob("server/entry_*/completed_jobs_????????.log"):
        for line in f.read_text().splitlines():
            m = _COMPLETED.match(line)
            assert m, line
            py2_seen |= "id=\"b'" not in line
            lines[(int(m[3]), int(m[4]))] = m
    assert py2_seen
    for p in truth(s):
        m = lines.get((p.cluster, p.proc))
        assert (m is not None) == p.completed_line
        if p.has_out and p.stats_format is not StatsFormat.EMPTY:
            assert m is not None  # only the empty-stats KeyError (#60) drops a line
        if m is None:
            continue
        assert m[1] == p.client and m[2] == p.username
        if p.kind == "validation_failed":
            assert m[6] == "False" and m[12] == "1000" and m[15] == "1000"
        else:
            assert m[6] == "True" and int(m[7]) == (p.condor_end or 0) - (p.condor_start or 0)
            if p.stats_format is StatsFormat.REAL:
                assert int(m[8]) == sum(j.end is not None for j in p.jobs)  # (Real) raw count


def test_misbehaving_entries(tree: tuple[Path, SimulationSummary]) -> None:
    _, s = tree
    by = {e.name: e for e in DEFAULT_ENTRIES}
    pilots = truth(s)

    def share(entry: str, pred: Callable[[SimPilot], bool]) -> float:
        ps = [p for p in pilots if p.entry == entry and p.kind not in ("lost", "in_queue")]
        return sum(pred(p) for p in ps) / len(ps)

    assert share("OSG_US_FAIL_VALIDATION_ce1", lambda p: p.kind == "validation_failed") > 0.4
    assert share("Fermilab_NOMATCH_ce", lambda p: p.kind == "no_match") > 0.7
    assert share("CMSHTPC_T1_PREEMPT_ce", lambda p: any(j.end is None for j in p.jobs)) > 0.4
    assert share("CMSHTPC_T2_US_Nebraska_red", lambda p: p.kind == "ran_jobs") > 0.85
    bh = [j for p in pilots if p.entry == "OSG_US_BLACKHOLE_ce" and p.blackhole for j in p.jobs]
    assert bh and all(j.end is not None and j.end - j.start <= 60 and j.kind in ("badSignal", "badOther") for j in bh)
    gpu = [p for p in pilots if p.entry == "OSG_US_GPU_ce" and p.jobs]
    assert gpu and all(p.gpus >= 1 for p in gpu) and any(j.gpus for p in gpu for j in p.jobs)
    mem = [p for p in pilots if p.entry == "CMSHTPC_T3_MEMLIMIT_ce" and p.jobs]
    assert mem and all(p.cpus == 8 and p.memory_mb == by["CMSHTPC_T3_MEMLIMIT_ce"].memory_mb for p in mem)
    assert (
        max(
            sum(j.cpus for j in p.jobs if j.start <= t < (j.end or p.condor_end or 0))
            for p in mem
            for t in (j.start for j in p.jobs)
        )
        <= 4
    )  # memory-bound: never all 8 cores


def test_schedd_status_idle_sum(tree: tuple[Path, SimulationSummary]) -> None:
    root, _ = tree
    for f in root.glob("monitor/entry_*/schedd_status.xml"):
        doc = ET.parse(f).getroot()
        assert doc.tag == "glideFactoryEntryQStats"
        assert doc.find("updated/timezone[@name='UTC']") is not None
        for st in doc.iter("Status"):
            a = {k: int(v) for k, v in st.attrib.items()}
            assert a["Idle"] == a["Wait"] + a["Pending"] + a["StageIn"] + a["IdleOther"]
    d = ET.parse(root / "monitor" / "entry_OSG_US_GPU_ce" / "descript.xml").getroot()
    attrs = d.find("entry/attributes")
    assert attrs is not None and attrs.get("GLIDEIN_Site") == "GPUSite" and attrs.get("GLIDEIN_MaxMemMBs") == "48000"


def test_round_trip_with_readers(tree: tuple[Path, SimulationSummary]) -> None:
    """The project's own readers recover the ground truth from a simulated tree."""
    root, s = tree
    errors = ParseErrors()
    for p in truth(s):
        if not p.has_out:
            continue
        stem = _entry_dir(root, p) / f"job.{p.cluster}.{p.proc}"
        out = parse_out(stem.with_name(stem.name + ".out").read_bytes(), str(stem) + ".out", errors)
        assert (out.cluster, out.proc) == (p.cluster, p.proc)
        assert (out.startup_time, out.glidein_end) == (p.startup, p.glidein_end)
        assert out.condor_started == (p.condor_start is not None)
        if p.condor_start is not None:
            assert (out.condor_start, out.condor_end, out.cpus) == (p.condor_start, p.condor_end, p.cpus)
            assert out.stats_format == p.stats_format
        err = parse_err(stem.with_name(stem.name + ".err").read_bytes(), str(stem) + ".err", errors)
        if p.jobs:
            assert err.jobs is not None and len(err.jobs) == len(p.jobs)
            # A preempted job's end may be read as None or as its vacate time (condor end).
            got = sorted((j.start, j.cpus, j.gpus, p.condor_end if j.end is None else j.end) for j in err.jobs)
            assert got == sorted((j.start, j.cpus, j.gpus, p.condor_end if j.end is None else j.end) for j in p.jobs)
        if p.condor_start is not None:
            assert (err.cpus, err.memory_mb, err.gpus or 0) == (p.cpus, p.memory_mb, p.gpus)
    logs = sorted(root.glob("server/entry_*/completed_jobs_*.log"))
    lines = [c for f in logs for c in completed_jobs_file(str(f), errors)]
    assert len(lines) == sum(p.completed_line for p in truth(s))
    assert not errors.counts, errors.counts
