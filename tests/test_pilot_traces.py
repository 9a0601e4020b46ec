"""A trace per counted pilot from the factory's own files (outputs/pilot_traces.py), on simulated pilots."""

from __future__ import annotations

import itertools
import json
import shutil
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.accounting.pilot import from_glidein
from gwms_obs.catalogue import Accuracy, Category, Outcome
from gwms_obs.ingest.books import PilotFacts
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.model import GlideinErr, GlideinOut, HoldInterval, Job, PilotTimes
from gwms_obs.outputs import pilot_traces as P
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import SimulationSummary, simulate
from gwms_obs.simulate.write.osg_test_result import SCRIPT_FAILURES
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing.ledger import LedgerIndex
from gwms_obs.tracing.outbox import SpoolForwarder
from gwms_obs.tracing.redact import Tally
from gwms_obs.tracing.spool import parse_spool

FACTORY = "testfactory"


class Box:
    """An outbox that keeps the requests (SpoolForwarder.enqueue's signature; its ledger and
    own_spans, for the pilots traced live: none here)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.files: list[list[dict[str, Any]]] = []  # the requests of each file written
        self.ledger = LedgerIndex()
        self.spans_per_second = 0.0  # unpaced: requests are bounded by pilots alone
        self.burst = 1

    def own_spans(self, log_dir: str, cluster: int, proc: int) -> dict[str, str] | None:
        return None

    def enqueue(
        self, request: dict[str, Any] | bytes | list[bytes], spans: int, path: str, *, scrubbed: Tally | None = None
    ) -> bool:
        # the sink hands a file over as the parts the outbox writes one after the other: requests one a line
        assert isinstance(request, list) and all(type(p) is bytes for p in request) and scrubbed is not None
        docs = [json.loads(ln) for ln in b"".join(request).split(b"\n")]
        assert spans == sum(len(ss["spans"]) for doc in docs for rs in doc["resourceSpans"] for ss in rs["scopeSpans"])
        self.requests += docs
        self.files.append(docs)
        return True


def _attrs(kvs: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for kv in kvs:
        v = kv["value"]
        if "doubleValue" in v:
            out[kv["key"]] = float(v["doubleValue"])
        elif "intValue" in v:
            out[kv["key"]] = int(v["intValue"])
        else:
            out[kv["key"]] = next(iter(v.values()))
    return out


class Pilot:
    """One pilot's trace, read back."""

    def __init__(self, rs: dict[str, Any]) -> None:
        self.resource = _attrs(rs["resource"]["attributes"])
        self.spans = [s for ss in rs["scopeSpans"] for s in ss["spans"]]
        self.by_id = {s["spanId"]: s for s in self.spans}

    @property
    def key(self) -> tuple[str, int, int]:
        r = self.resource
        return r[C.ENTRY], int(r[C.CONDOR_CLUSTER]), int(r[C.CONDOR_PROC])

    def named(self, name: str) -> list[dict[str, Any]]:
        return [s for s in self.spans if s["name"] == name]

    def one(self, name: str) -> dict[str, Any]:
        (s,) = self.named(name)
        return s

    def path(self, s: dict[str, Any]) -> list[str]:
        names = []
        while s["parentSpanId"]:
            s = self.by_id[s["parentSpanId"]]
            names.append(s["name"])
        return names


def _scan(factory: Path, **kw: Any) -> tuple[Ingest, Box, dict[tuple[str, int, int], Pilot]]:
    box = Box()
    cfg = IngestConfig(str(factory), settle_seconds=0, final=True, lost_after_seconds=0, **kw)
    sink = P.PilotTraces(box, FACTORY, batch=7)
    ing = Ingest(cfg, outlets=Outlets(traces=sink))
    ing.scan()
    sink.flush()
    pilots = [Pilot(rs) for req in box.requests for rs in req["resourceSpans"]]
    by_key = {p.key: p for p in pilots}
    assert len(by_key) == len(pilots) == sink.built  # one trace per pilot, each once
    return ing, box, by_key


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SimulationSummary]:
    out = tmp_path_factory.mktemp("factory")
    return out, simulate(out, 120, seed=31, ground_truth=True)


@pytest.fixture(scope="module")
def scanned(sim: tuple[Path, SimulationSummary]) -> tuple[Ingest, dict[tuple[str, int, int], Pilot]]:
    ing, _, pilots = _scan(sim[0])
    return ing, pilots


def test_one_trace_per_counted_pilot(scanned: tuple[Ingest, dict[tuple[str, int, int], Pilot]]) -> None:
    ing, pilots = scanned
    assert len(pilots) == len(ing.seen) > 50
    assert set(f"{e}/{c}.{p}" for e, c, p in pilots) == set(ing.seen)
    sources: Counter[str] = Counter()
    for p in pilots.values():
        (root,) = [s for s in p.spans if not s["parentSpanId"]]
        assert root["name"] == C.SPAN_PILOT
        assert p.resource[C.FACTORY] == FACTORY and p.resource[C.SERVICE_NAME] == C.SERVICE_PILOT
        sources[p.resource[P.TRACE_SOURCE]] += 1
        # the pilot's start as counted is where it runs
        start = int(p.one(P.SPAN_RUNNING)["startTimeUnixNano"]) / 1e9
        assert {s["traceId"] for s in p.spans} == {P.pilot_trace_id(FACTORY, *p.key, start)}
        for s in p.spans:  # every child inside its parent
            if s["parentSpanId"]:
                parent = p.by_id[s["parentSpanId"]]
                assert int(parent["startTimeUnixNano"]) <= int(s["startTimeUnixNano"])
                assert int(s["endTimeUnixNano"]) <= int(parent["endTimeUnixNano"])
        assert len({s["spanId"] for s in p.spans}) == len(p.spans)
    # One scan, the event log read before the .out files: pilots counted from their .out take its times.
    assert sources["glidein_out+condor_event_log"] > 50 and sources["condor_event_log"] > 0, sources


def test_validation_failure_is_error_naming_the_failing_test(
    sim: tuple[Path, SimulationSummary], scanned: tuple[Ingest, dict[tuple[str, int, int], Pilot]]
) -> None:
    _, pilots = scanned
    truth = sim[1].ground_truth
    assert truth is not None
    failed = [t for t in truth if t.kind == "validation_failed" and t.has_out]
    assert failed, "the simulation has no validation failure to look at"
    for t in failed:
        p = pilots[(t.entry, t.cluster, t.proc)]
        v = p.one(P.SPAN_VALIDATION)
        assert v["status"]["code"] == C.STATUS_ERROR
        assert t.failed_script and t.failed_script in v["status"]["message"]
        a = _attrs(v["attributes"])
        assert a[P.FAILED_TEST] == t.failed_script
        # the XML's <detail>, on one line, then the failing test's metrics
        want = " ".join(f"Validation failed in {t.failed_script}. {SCRIPT_FAILURES[t.failed_script].detail}".split())
        assert a[P.FAILURE_DETAIL].startswith(want), a[P.FAILURE_DETAIL]
        (ev,) = v["events"]
        assert ev["name"] == P.EVENT_VALIDATION_FAILED and _attrs(ev["attributes"])[P.FAILED_TEST] == t.failed_script
        assert p.path(v) == [P.SPAN_RUNNING, C.SPAN_PILOT]
        assert not p.named(P.SPAN_CONDOR)
    ok = [t for t in truth if t.kind == "ran_jobs" and t.has_out]
    for t in ok:
        v = pilots[(t.entry, t.cluster, t.proc)].one(P.SPAN_VALIDATION)
        assert "status" not in v


def test_job_spans_add_up_to_the_accounted_cpu_seconds(
    sim: tuple[Path, SimulationSummary], scanned: tuple[Ingest, dict[tuple[str, int, int], Pilot]]
) -> None:
    """cores × time of the job spans, per category, is what the accounting gives that category,
    on every pilot whose jobs never asked for more cores (or memory) than the pilot had."""
    _, pilots = scanned
    truth = sim[1].ground_truth
    assert truth is not None
    checked = 0
    for t in truth:
        if t.kind != "ran_jobs" or not t.has_out or not t.jobs:
            continue
        p = pilots[(t.entry, t.cluster, t.proc)]
        if p.named(P.SPAN_JOBS_REST) or not _fits(t):
            continue
        root = _attrs(p.one(C.SPAN_PILOT)["attributes"])
        per_cat: dict[str, float] = defaultdict(float)
        for j in p.named(P.SPAN_JOB):
            a = _attrs(j["attributes"])
            assert a[P.JOB_CPU_SECONDS] == pytest.approx(
                a[P.JOB_CPUS] * (int(j["endTimeUnixNano"]) - int(j["startTimeUnixNano"])) / 1e9
            )
            per_cat[a[P.JOB_CATEGORY]] += a[P.JOB_CPU_SECONDS]
        accounted = {
            k.removeprefix(P.CPU_SECONDS): v
            for k, v in root.items()
            if k.startswith(P.CPU_SECONDS) and k != P.CPU_SECONDS + Category.OVERHEAD.value
        }
        assert per_cat == pytest.approx(accounted), (t.entry, t.cluster, t.proc)
        assert root[P.ACCURACY] == Accuracy.EXACT.value  # per-job ads: the root says its seconds are exact
        checked += 1
    assert checked >= 10


def _fits(t: Any) -> bool:
    """The pilot's jobs never ran more cores or memory at once than it had (the partition is then plain)."""
    end = t.condor_end
    edges = sorted(
        [(j.start, 1, j.cpus, j.memory_mb) for j in t.jobs]
        + [(j.end if j.end is not None else end, -1, -j.cpus, -j.memory_mb) for j in t.jobs]
    )
    cores = mb = 0
    for _, _, c, m in edges:
        cores, mb = cores + c, mb + m
        if cores > t.cpus or (t.memory_mb and mb > t.memory_mb - 2048 * (t.cpus - cores)):
            return False
    return True


def test_ids_identical_across_two_builds_a_rescan_and_the_pool(
    sim: tuple[Path, SimulationSummary], scanned: tuple[Ingest, dict[tuple[str, int, int], Pilot]], tmp_path: Path
) -> None:
    """A rescan from nothing (a lost checkpoint), and reading in worker processes, write the same spans."""
    _, first = scanned
    _, _, again = _scan(sim[0], checkpoint=str(tmp_path / "cp.json"))
    _, _, pooled = _scan(sim[0], workers=2)
    for other in (again, pooled):
        assert other.keys() == first.keys()
        for k, p in first.items():
            assert other[k].spans == p.spans, k


def test_restart_sends_nothing_again(sim: tuple[Path, SimulationSummary], tmp_path: Path) -> None:
    cp = str(tmp_path / "cp.json")
    _, _, first = _scan(sim[0], checkpoint=cp)
    assert first
    _, box2, second = _scan(sim[0], checkpoint=cp)  # restart: the checkpoint says every pilot is counted
    assert second == {} and box2.requests == []


def _pilot(jobs: list[Job], *, cpus: int = 4, killed: bool = False) -> tuple[GlideinOut, GlideinErr]:
    t0 = 1_780_000_000.0
    out = GlideinOut(
        path="job.7.0.out",
        cluster=7,
        proc=0,
        entry="E",
        client="C",
        startup_time=t0,
        validation_end=t0 + 100,
        condor_started=True,
        condor_start=t0 + 110,
        condor_end=t0 + 5000,
        glidein_end=t0 + 5000 if killed else t0 + 5030,
        exit_code=None if killed else 0,
        cpus=cpus,
        memory_mb=cpus * 2048,
    )
    err = GlideinErr(path="job.7.0.err", jobs=jobs, gpus=0, cpus=cpus)
    return out, err


def _job(start: float, end: float | None, *, exited: bool = True, code: int | None = 0, cpus: int = 1) -> Job:
    return Job(
        start=1_780_000_000.0 + start,
        end=None if end is None else 1_780_000_000.0 + end,
        cpus=cpus,
        memory_mb=2048 * cpus,
        gpus=0,
        exited=exited,
        exit_code=code,
        global_job_id=f"vo-schedd.example.org#{int(start)}.0#1780000000",
    )


def _build(out: GlideinOut, err: GlideinErr, times: PilotTimes | None = None, **kw: Any) -> Pilot:
    acc = from_glidein(out, err, entry="E", client="C")
    assert acc is not None
    built = P.build(acc, PilotFacts("glidein_out", out, err, times=times), FACTORY, **kw)
    assert built is not None
    rs, n = built
    p = Pilot(json.loads(rs))
    assert len(p.spans) == n
    return p


def test_preempted_pilots_last_job_carries_the_eviction() -> None:
    jobs = [_job(200, 1200), _job(1300, 2600, code=3), _job(2700, None, exited=False, code=None)]
    out, err = _pilot(jobs, killed=True)
    p = _build(out, err)
    spans = sorted(p.named(P.SPAN_JOB), key=lambda s: int(s["startTimeUnixNano"]))
    assert [s.get("events", []) for s in spans[:2]] == [[], []]
    last = spans[-1]
    assert [e["name"] for e in last["events"]] == [P.EVENT_PREEMPTED]
    assert _attrs(last["attributes"])[P.JOB_CATEGORY] == Category.PREEMPTION_BADPUT.value
    assert _attrs(spans[1]["attributes"])[C.PROCESS_EXIT_CODE] == 3
    assert int(last["endTimeUnixNano"]) == int((out.condor_end or 0) * 1e9)  # ran until HTCondor ended
    # what the job is on the VO schedd, never who ran it
    assert _attrs(last["attributes"])[P.JOB_ID].startswith("vo-schedd.example.org#")


def test_queued_and_held_from_the_event_log() -> None:
    out, err = _pilot([_job(200, 1200)])
    t0 = out.startup_time or 0
    times = PilotTimes(7, 0, submitted=t0 - 900, grid_submitted=t0 - 880, started=t0 - 30)
    p = _build(out, err, times)
    root, q = p.one(C.SPAN_PILOT), p.one(P.SPAN_QUEUED)
    assert int(root["startTimeUnixNano"]) == int(q["startTimeUnixNano"]) == int((t0 - 900) * 1e9)
    assert int(q["endTimeUnixNano"]) == int((t0 - 30) * 1e9)
    assert [e["name"] for e in q["events"]] == [P.EVENT_GRID_SUBMIT]
    # a pilot that ended held while it ran (a PilotTimes with its last hold only): an event of its run
    t = PilotTimes(8, 0, submitted=t0, ended=t0 + 50, end_event="held", held_reason="Error from CE: proxy expired")
    from gwms_obs.accounting.pilot import from_event_log

    t.started = t0 + 10
    acc = from_event_log(t)
    assert acc is not None
    built = P.build(acc, PilotFacts("condor_event_log", times=t), FACTORY)
    assert built is not None
    ep = Pilot(json.loads(built[0]))
    assert ep.resource[P.TRACE_SOURCE] == "condor_event_log"
    assert not ep.named(P.SPAN_VALIDATION)  # nothing says what happened on the node
    assert not ep.one(C.SPAN_PILOT).get("events")
    run_events = ep.one(P.SPAN_RUNNING)["events"]
    assert [e["name"] for e in run_events] == [P.EVENT_HELD]
    a = _attrs(run_events[0]["attributes"])
    assert (a[P.HOLD_REASON], a[P.HOLD_CLASS]) == ("Error from CE: proxy expired", "proxy_expired")  # by its text
    assert P.HOLD_CODE not in a


def _held_pilot() -> tuple[GlideinOut, GlideinErr, PilotTimes]:
    """A pilot held twice in the CE's queue, held again while it ran, and evicted in its last job."""
    jobs = [_job(200, 1200), _job(1300, None, exited=False, code=None)]
    out, err = _pilot(jobs, killed=True)
    t0 = out.startup_time or 0
    times = PilotTimes(
        7,
        0,
        submitted=t0 - 3000,
        grid_submitted=t0 - 2990,
        started=t0 - 20,
        first_started=t0 - 20,
        ended=t0 + 5060,
        end_event="terminated",
        holds=(
            # the CE refused the factory's token, then could not be reached (HTCondor-C GAHP's words)
            HoldInterval(t0 - 2900, t0 - 2000, 0, 0, "Error connecting to schedd ce: AUTHENTICATE:1003:Failed to "
                         "authenticate with any method|AUTHENTICATE:1004:Failed to authenticate using SCITOKENS"),
            HoldInterval(t0 - 1500, t0 - 600, 0, 0, "Error connecting to schedd ce: CEDAR:6001:Failed to connect to "
                         "<192.0.2.7:9619>; Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"),
            HoldInterval(t0 + 3000, t0 + 3100, 3, 0, "The job attribute PeriodicHold expression 'x' evaluated to TRUE"),
        ),
        holds_dropped=2,
        evictions=(t0 + 5040,),  # 004 read 40 s after the node's end (HTCondor-G polls the CE)
    )  # fmt: skip
    return out, err, times


def test_every_hold_in_the_queue_is_a_held_span_with_its_class() -> None:
    out, err, times = _held_pilot()
    t0 = out.startup_time or 0
    p = _build(out, err, times)
    q = p.one(P.SPAN_QUEUED)
    assert int(q["endTimeUnixNano"]) == int((t0 - 20) * 1e9)  # the first execute
    held = sorted(p.named(P.SPAN_HELD), key=lambda s: int(s["startTimeUnixNano"]))
    assert [h["parentSpanId"] for h in held] == [q["spanId"]] * 2
    assert [(int(h["startTimeUnixNano"]), int(h["endTimeUnixNano"])) for h in held] == [
        (int((t0 - 2900) * 1e9), int((t0 - 2000) * 1e9)),
        (int((t0 - 1500) * 1e9), int((t0 - 600) * 1e9)),
    ]
    a0, a1 = (_attrs(h["attributes"]) for h in held)
    assert (a0[P.HOLD_CODE], a0[P.HOLD_SUBCODE], a0[P.HOLD_CLASS], a0[C.PHASE]) == (0, 0, "auth_failed", "held")
    assert a1[P.HOLD_CLASS] == "ce_unreachable"
    assert "eyJ" not in a1[P.HOLD_REASON] and a1[P.HOLD_REASON].startswith("Error connecting to schedd ce: CEDAR:6001")
    assert len({h["spanId"] for h in held}) == 2
    # the hold while it ran: an event of the running span, with its class; the count of holds not kept
    run = p.one(P.SPAN_RUNNING)
    names = [(e["name"], int(e["timeUnixNano"])) for e in run["events"]]
    assert names == [(P.EVENT_HELD, int((t0 + 3000) * 1e9)), (P.EVENT_EVICTED, int((t0 + 5000) * 1e9))]
    assert _attrs(run["events"][0]["attributes"])[P.HOLD_CLASS] == "periodic_hold"
    assert _attrs(p.one(C.SPAN_PILOT)["attributes"])[P.HOLDS_DROPPED] == 2
    # the eviction is on the last job too (the one HTCondor ran when the node went), not the first
    jobs = sorted(p.named(P.SPAN_JOB), key=lambda s: int(s["startTimeUnixNano"]))
    assert not jobs[0].get("events")
    assert [e["name"] for e in jobs[1]["events"]] == [P.EVENT_PREEMPTED, P.EVENT_EVICTED]
    # the same pilot twice: the same ids (a rescan sends no new span)
    assert [s["spanId"] for s in _build(out, err, times).spans] == [s["spanId"] for s in p.spans]


def test_a_hold_or_eviction_outside_the_run_is_the_roots() -> None:
    out, err, times = _held_pilot()
    t0 = out.startup_time or 0
    # evicted from an earlier run, which the .out (the last run's) does not cover
    times.evictions = (t0 - 500,)
    times.holds = (times.holds[0], HoldInterval(t0 + 9000, None, 4, 0, "Job credentials are not available"))
    times.holds_dropped = 0
    p = _build(out, err, times)
    root = p.one(C.SPAN_PILOT)
    names = [(e["name"], _attrs(e["attributes"]).get(P.HOLD_CLASS)) for e in root["events"]]
    assert names == [(P.EVENT_HELD, "proxy_expired"), (P.EVENT_EVICTED, None)]
    assert P.HOLDS_DROPPED not in _attrs(root["attributes"])
    assert not p.one(P.SPAN_RUNNING).get("events")
    assert all(e["name"] != P.EVENT_EVICTED for j in p.named(P.SPAN_JOB) for e in j.get("events", []))
    # a hold in the queue whose release the log does not have (rotated away) ends with the queue
    times.holds = (HoldInterval(t0 - 2900, None, 0, 0, "Error locating schedd ce"),)
    p = _build(out, err, times)
    (h,) = p.named(P.SPAN_HELD)
    assert int(h["endTimeUnixNano"]) == int(p.one(P.SPAN_QUEUED)["endTimeUnixNano"]) == int((t0 - 20) * 1e9)
    assert _attrs(h["attributes"])[P.HOLD_CLASS] == "ce_unreachable"


def test_jobs_beyond_the_cap_summed_in_one_span() -> None:
    jobs = [_job(200 + 40 * i, 230 + 40 * i) for i in range(30)]
    out, err = _pilot(jobs)
    p = _build(out, err, max_job_spans=10)
    assert len(p.named(P.SPAN_JOB)) == 10
    rest = p.one(P.SPAN_JOBS_REST)
    a = _attrs(rest["attributes"])
    assert a[P.JOB_COUNT] == 20
    assert a[f"{P.JOB_CPU_SECONDS}.goodput"] == pytest.approx(20 * 30)
    assert len(p.spans) == 5 + 10 + 1  # glidein, running, validation, condor, cleanup + 10 jobs + the summary


def test_pilot_text_is_masked_and_bounded_like_a_spool(tmp_path: Path) -> None:
    """What a pilot or a CE wrote (the failing test's detail, a job id, a hold reason) goes through
    the spool's masking and bounds on its way into the outbox, and is counted there."""
    t0 = 1_780_000_000.0
    out = GlideinOut(path="job.9.0.out", cluster=9, proc=0, startup_time=t0, glidein_end=t0 + 300)
    out.failure = "VO_Proxy"
    out.metrics = {"TestID": "main/setup_x509.sh", "failure": "VO_Proxy", "cmd": "x --token SECRETSECRET " + "y" * 3000}
    times = PilotTimes(9, 0, submitted=t0 - 50, started=t0 - 10, ended=t0 + 400, end_event="aborted")
    times.held_reason = "removed: Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
    err = GlideinErr(path="job.9.0.err")
    acc = from_glidein(out, err, entry="E", client="C")
    assert acc is not None and acc.outcome is Outcome.VALIDATION_FAILED
    ran, ran_err = _pilot([_job(200, 300)])
    assert ran_err.jobs is not None
    ran_err.jobs[0].global_job_id = "schedd#1.0#2 --password=hunter2hunter2"
    ran_acc = from_glidein(ran, ran_err, entry="E", client="C")
    assert ran_acc is not None
    errors = ParseErrors()
    fwd = SpoolForwarder("http://127.0.0.1:9/v1/traces", tmp_path / "outbox", errors)
    sink = P.PilotTraces(fwd, FACTORY)
    sink(acc, PilotFacts("glidein_out", out, err, times=times))
    sink(ran_acc, PilotFacts("glidein_out", ran, ran_err))
    sink.flush()
    (f,) = fwd.pending()
    body = f.read_bytes()
    for secret in (b"SECRETSECRET", b"eyJzdWIiOiJ4In0", b"hunter2"):
        assert secret not in body
    sent = [Pilot(rs) for rs in parse_spool(body).resource_spans]  # what is sent is a valid request
    detail = _attrs(sent[0].one(P.SPAN_VALIDATION)["attributes"])[P.FAILURE_DETAIL]
    assert len(detail) == 1024
    assert _attrs(sent[1].one(P.SPAN_JOB)["attributes"])[P.JOB_ID].startswith("schedd#1.0#2")
    assert errors.total("trace_spool") >= 4  # 3 masked, 1 cut: counted as a spool's are


def test_a_simulated_held_pilot_carries_its_hold(scanned: tuple[Ingest, dict[tuple[str, int, int], Pilot]]) -> None:
    held = [
        (s["name"], _attrs(e["attributes"]))
        for p in scanned[1].values()
        for s in p.spans
        for e in s.get("events", [])
        if e["name"] == P.EVENT_HELD
    ]
    assert held, "the simulated factory has a held pilot"
    for _, a in held:
        assert a[P.HOLD_CLASS] != "other" and P.HOLD_CODE in a and a[P.HOLD_REASON]


def test_completed_jobs_and_event_log_pilots_get_traces(sim: tuple[Path, SimulationSummary], tmp_path: Path) -> None:
    """Without their .out, pilots are traced from the factory's own logs, saying so."""
    tree = tmp_path / "f"
    shutil.copytree(sim[0], tree)
    for f in list(tree.rglob("job.*.out"))[::2]:
        f.unlink()
    ing, _, pilots = _scan(tree)
    sources = Counter(p.resource[P.TRACE_SOURCE] for p in pilots.values())
    assert any(s.startswith("glidein_out") for s in sources), sources
    assert any(s.startswith("completed_jobs") for s in sources), sources
    assert set(f"{e}/{c}.{p}" for e, c, p in pilots) == set(ing.seen)
    for p in pilots.values():
        if p.resource[P.TRACE_SOURCE].startswith("completed_jobs"):
            root = p.one(C.SPAN_PILOT)
            assert p.one(P.SPAN_RUNNING)["parentSpanId"] == root["spanId"]


def test_the_config_key_switches_them_off(tmp_path: Path) -> None:
    from gwms_obs.config import ConfigError, from_dict
    from gwms_obs.daemon import pilot_traces as _pilot_traces

    assert from_dict({}).pilot_traces is True
    with pytest.raises(ConfigError, match="pilot_traces must be true or false"):
        from_dict({"pilot_traces": "no"})
    errors = ParseErrors()
    assert _pilot_traces(from_dict({"pilot_traces": False, "factory_dir": str(tmp_path)}), errors, Box()) is None
    on = _pilot_traces(from_dict({"factory_name": "gfactory-x", "factory_dir": str(tmp_path)}), errors, Box())
    assert on is not None and on.factory == "gfactory-x"
    # without a name configured, the factory's monitor/descript.xml names it
    (tmp_path / "monitor").mkdir()
    (tmp_path / "monitor" / "descript.xml").write_text(
        '<glideFactoryDescript><factory FactoryName="OSG_F"/></glideFactoryDescript>'
    )
    named = _pilot_traces(from_dict({"factory_dir": str(tmp_path)}), errors, Box())
    assert named is not None and named.factory == "OSG_F"


def test_a_pilot_counted_from_its_out_gets_the_event_logs_queue(
    sim: tuple[Path, SimulationSummary], tmp_path: Path
) -> None:
    """A first scan (a backfill) counts every whole .out at once (settle by evidence); it reads the
    event log first (pipeline.py, step 3), so those pilots still get their queue and holds."""
    cp = str(tmp_path / "cp.json")
    _, _, pilots = _scan(sim[0], checkpoint=cp)
    truth = {(t.entry, t.cluster, t.proc): t for t in sim[1].ground_truth or []}
    queued = 0
    for k, p in pilots.items():
        if p.resource[P.TRACE_SOURCE] != "glidein_out+condor_event_log":
            continue
        q = p.one(P.SPAN_QUEUED)
        assert int(q["startTimeUnixNano"]) == truth[k].submitted * P.NS == int(p.one(C.SPAN_PILOT)["startTimeUnixNano"])
        assert int(q["endTimeUnixNano"]) <= int(p.one(P.SPAN_RUNNING)["startTimeUnixNano"]) + 600 * P.NS
        queued += 1
    assert queued > 50


def test_every_pilot_a_checkpoint_counts_has_its_trace_in_the_outbox(
    sim: tuple[Path, SimulationSummary], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kill right after a checkpoint loses no trace: the traces of the pilots it marks counted are
    written first (a kill between the two counts them again, and sends the same ids)."""
    from gwms_obs.config import from_dict
    from gwms_obs.daemon import export_outlets
    from gwms_obs.daemon import pilot_traces as _pilot_traces
    from gwms_obs.ingest import checkpoint

    box = Box()
    errors = ParseErrors()
    sink = _pilot_traces(from_dict({"factory_name": FACTORY}), errors, box)
    assert sink is not None
    cfg = IngestConfig(str(sim[0]), checkpoint=str(tmp_path / "cp.json"), settle_seconds=0)
    ing = Ingest(cfg, outlets=export_outlets(None, sink), errors=errors)
    checked = []
    write = checkpoint.write

    def checked_write(path: str, state: dict[str, Any]) -> None:
        sent = {f"{p.key[0]}/{p.key[1]}.{p.key[2]}" for req in box.requests for p in map(Pilot, req["resourceSpans"])}
        assert set(state["seen"]) <= sent, len(set(state["seen"]) - sent)
        checked.append(len(state["seen"]))
        write(path, state)

    monkeypatch.setattr(checkpoint, "write", checked_write)
    ing.scan()
    assert max(checked) > 50


def test_a_trace_that_cannot_be_built_is_counted_and_costs_no_pilot(
    sim: tuple[Path, SimulationSummary], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gwms_obs.config import from_dict
    from gwms_obs.daemon import export_outlets
    from gwms_obs.daemon import pilot_traces as _pilot_traces

    def broken(acc: Any, facts: PilotFacts, *a: Any, **kw: Any) -> Any:
        if acc.cluster % 2:
            raise ValueError("a pilot no builder expected")
        return real(acc, facts, *a, **kw)

    real = P.encode
    monkeypatch.setattr(P, "encode", broken)
    box = Box()
    errors = ParseErrors()
    sink = _pilot_traces(from_dict({"factory_name": FACTORY}), errors, box)
    assert sink is not None
    cfg = IngestConfig(str(sim[0]), settle_seconds=0, final=True, lost_after_seconds=0)
    ing = Ingest(cfg, outlets=export_outlets(None, sink), errors=errors)
    ing.scan()
    sink.flush()
    odd = [k for k in ing.seen if int(k.rsplit("/", 1)[1].split(".")[0]) % 2]
    assert odd and len(ing.seen) > 100  # every pilot counted
    assert ing.errors.counts[("trace_spool", "pilot_trace_failed")] == len(odd)
    assert sink.built == len(ing.seen) - len(odd)


def test_requests_fit_the_paced_forwarders_bucket(sim: tuple[Path, SimulationSummary]) -> None:
    """With batch_spans (a paced forwarder's bucket), no request holds more spans than that unless one
    pilot alone does: the forwarder then posts each whole, with no JSON decode and encode to cut it.
    A file holds ``batch`` pilots, its requests one a line (a file each cost more than its bytes)."""
    box = Box()
    sink = P.PilotTraces(box, FACTORY, batch_spans=60, batch=40)
    ing = Ingest(
        IngestConfig(str(sim[0]), settle_seconds=0, final=True, lost_after_seconds=0), outlets=Outlets(traces=sink)
    )
    ing.scan()
    sink.flush()
    sizes = [[sum(len(ss["spans"]) for ss in rs["scopeSpans"]) for rs in r["resourceSpans"]] for r in box.requests]
    assert len(sizes) > 3 and sum(map(sum, sizes)) == sink.spans
    assert all(sum(s) <= 60 or len(s) == 1 for s in sizes), sizes
    pilots = [sum(len(r["resourceSpans"]) for r in f) for f in box.files]
    assert len(box.files) > 1 and all(n == 40 for n in pilots[:-1]) and 0 < pilots[-1] <= 40, pilots
    for f in box.files:  # none cut short but a file's last
        sizes = [[sum(len(ss["spans"]) for ss in rs["scopeSpans"]) for rs in r["resourceSpans"]] for r in f]
        assert all(sum(s) + nxt[0] > 60 for s, nxt in itertools.pairwise(sizes))
