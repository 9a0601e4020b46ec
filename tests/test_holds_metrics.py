"""Issue 33's event-log metrics: holds by class (of glideins still queued too), glideins held now,
seconds held, the CE down (025/026) and the grid submit -> execute histogram; through the exporter's
scan, its checkpoint and /metrics, and the newest hold's reason logged redacted and bounded."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from prometheus_client.core import Metric

from gwms_obs import catalogue
from gwms_obs.catalogue import HoldClass
from gwms_obs.ingest import condor_event_log as stage_mod
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.outputs.prometheus import FactoryCollector
from gwms_obs.pipeline import Ingest

T0 = 1_780_000_000.0  # 2026-05-28
LOG = "client/user_fe/glidein_g/entry_E/condor_activity_20260528_fe.main.log"
TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJmYWN0b3J5In0.c2lnbmF0dXJl"


def _hms(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def ev(code: str, c: int, t: float, *body: str) -> str:
    return f"{code} ({c}.000.000) {_hms(t)} " + "\n".join(body) + "\n...\n"


def held(c: int, t: float, reason: str, code: int, sub: int) -> str:
    # JobHeldEvent::formatBody (HTCondor src/condor_utils/condor_event.cpp)
    return ev("012", c, t, "Job was held.", f"\t{reason}", f"\tCode {code} Subcode {sub}")


def submitted(c: int, t: float) -> str:
    return ev("000", c, t, "Job submitted from host: <192.0.2.1:9615?sock=schedd_1>")


def grid_submitted(c: int, t: float) -> str:
    # GridSubmitEvent::formatBody, as in tests/fixtures/condor_event_log_sample.log
    return ev(
        "027",
        c,
        t,
        "Job submitted to grid resource",
        "    GridResource: condor ce.example.org ce.example.org:9619",
        f"    GridJobId: condor ce.example.org ce.example.org:9619 {c + 7000}.0",
    )


def grid_resource(c: int, t: float, *, down: bool) -> str:
    # GridResourceDownEvent / GridResourceUpEvent::formatBody (condor_event.cpp)
    head = "Detected Down Grid Resource" if down else "Grid Resource Back Up"
    return ev("026" if down else "025", c, t, head, "    GridResource: condor ce.example.org ce.example.org:9619")


AUTH = (
    'Error connecting to schedd ce.example.org: SECMAN:2010:Received "DENIED" from server for user '
    f"fe@factory using method TOKEN. AUTHENTICATE:1003:Failed to authenticate with any method token={TOKEN}"
)
PERIODIC = (
    "The job attribute PeriodicHold expression 'JobStatus == 1 && time() - EnteredCurrentStatus > 3600'"
    " evaluated to TRUE"
)


def factory(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "factory"
    (f / LOG).parent.mkdir(parents=True)
    (f / LOG).write_text(text)
    return f


def families(ing: Ingest) -> dict[str, Metric]:
    return {m.name: m for m in FactoryCollector(ing).collect()}


def samples(fams: dict[str, Metric], m: catalogue.MetricDef, suffix: str = "") -> dict[tuple[str, ...], float]:
    fam = fams[m.base if m.type == "counter" else m.name]
    name = m.name + suffix
    return {tuple(s.labels[k] for k in m.labels): s.value for s in fam.samples if s.name == name}


def test_holds_of_queued_glideins_are_counted_by_class_and_held_now(tmp_path: Path) -> None:
    text = (
        submitted(1, T0)
        + held(1, T0 + 60, AUTH, 0, 0)  # still held at the end: auth_failed held now
        + submitted(2, T0)
        + held(2, T0 + 60, PERIODIC, 3, 0)
        + ev("013", 2, T0 + 660, "Job was released.", "\tvia condor_release (by user fe)")  # 600 s held
        + submitted(3, T0)
        + held(3, T0 + 100, "Something new from a CE", 77, 3)  # unknown code: other
        + held(3, T0 + 110, "a second 012 while held", 77, 3)  # not a second hold
        + ev("009", 3, T0 + 400, "Job was aborted.", "\tby the factory")  # removed while held: 300 s
    )
    f = factory(tmp_path, text)
    ing = Ingest(IngestConfig(factory_dir=str(f), settle_seconds=0.0))
    ing.scan()
    fams = families(ing)
    pool = ("E", "user_fe", "unknown")
    assert samples(fams, catalogue.HOLDS) == {
        (*pool, HoldClass.AUTH_FAILED.value): 1.0,
        (*pool, HoldClass.PERIODIC_HOLD.value): 1.0,
        (*pool, HoldClass.OTHER.value): 1.0,
    }
    assert samples(fams, catalogue.HELD_GLIDEINS) == {(*pool, HoldClass.AUTH_FAILED.value): 1.0}
    assert samples(fams, catalogue.HELD_SECONDS) == {pool: 900.0}

    # The held glidein is released and runs: nothing is held now; its 3600 s count once, the
    # counters stay (read once: the cursor moved past them).
    with open(f / LOG, "a") as out:
        out.write(ev("013", 1, T0 + 3660, "Job was released.", "\tvia condor_release (by user fe)"))
    ing.scan()
    fams = families(ing)
    assert samples(fams, catalogue.HELD_GLIDEINS) == {}
    assert samples(fams, catalogue.HELD_SECONDS) == {pool: 4500.0}
    assert sum(samples(fams, catalogue.HOLDS).values()) == 3.0


def test_held_now_and_counters_survive_a_restart(tmp_path: Path) -> None:
    f = factory(tmp_path, submitted(1, T0) + held(1, T0 + 60, AUTH, 0, 0))
    cp = str(tmp_path / "cp.json")
    ing = Ingest(IngestConfig(factory_dir=str(f), settle_seconds=0.0, checkpoint=cp))
    ing.scan()
    again = Ingest(IngestConfig(factory_dir=str(f), settle_seconds=0.0, checkpoint=cp))
    again.scan()  # nothing new read: the hold is not counted twice, and is still held now
    fams = families(again)
    pool = ("E", "user_fe", "unknown", HoldClass.AUTH_FAILED.value)
    assert samples(fams, catalogue.HOLDS) == {pool: 1.0}
    assert samples(fams, catalogue.HELD_GLIDEINS) == {pool: 1.0}
    with open(f / LOG, "a") as out:
        out.write(ev("009", 1, T0 + 1060, "Job was aborted.", "\tby the factory"))
    again.scan()
    fams = families(again)
    assert samples(fams, catalogue.HELD_GLIDEINS) == {}
    assert samples(fams, catalogue.HELD_SECONDS) == {pool[:3]: 1000.0}


def test_the_newest_hold_is_logged_redacted_and_bounded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    long = AUTH + " \x1b[31m" + "x" * 5000
    text = "".join(submitted(c, T0) + held(c, T0 + 60 + c, long, 0, 0) for c in range(1, 30))
    f = factory(tmp_path, text)
    with caplog.at_level(logging.INFO, logger="gwms_obs.holds"):
        Ingest(IngestConfig(factory_dir=str(f), settle_seconds=0.0)).scan()
    lines = [r.getMessage() for r in caplog.records if r.name == "gwms_obs.holds"]
    assert len(lines) == 1, lines  # 29 holds of one class within LOG_EVERY: one line
    line = lines[0]
    assert "entry E" in line and "class auth_failed" in line and "code/subcode 0/0" in line and LOG in line
    assert TOKEN not in line and "****" in line and "\x1b" not in line
    reason = line.split("): ", 1)[1]
    assert len(reason) <= stage_mod.REASON_CHARS and reason.endswith("...")


def test_ce_down_and_up_and_the_grid_queue(tmp_path: Path) -> None:
    text = (
        submitted(1, T0)
        + grid_submitted(1, T0 + 30)
        + ev("001", 1, T0 + 630, "Job executing on host: gridjob")  # 600 s in the CE's queue
        + submitted(2, T0)
        + grid_resource(2, T0 + 100, down=True)
        + grid_resource(3, T0 + 160, down=True)
    )
    f = factory(tmp_path, text)
    ing = Ingest(IngestConfig(factory_dir=str(f), settle_seconds=0.0))
    ing.scan()
    fams = families(ing)
    assert samples(fams, catalogue.ENTRY_CE_DOWN) == {("E", "unknown"): 1.0}
    assert samples(fams, catalogue.ENTRY_CE_DOWN_SINCE) == {("E", "unknown"): T0 + 100}
    with open(f / LOG, "a") as out:
        out.write(grid_resource(2, T0 + 3700, down=False))
        out.write(ev("005", 1, T0 + 4000, "Job terminated.", "\t(1) Normal termination (return value 0)"))
    ing.scan()
    fams = families(ing)
    assert samples(fams, catalogue.ENTRY_CE_DOWN) == {("E", "unknown"): 0.0}
    assert samples(fams, catalogue.ENTRY_CE_DOWN_SINCE) == {}
    # The ended pilot (no .out: counted from the event log, long past lost_after_seconds) carries
    # both queue times: submit -> execute 630 s, the CE's accepting it -> execute 600 s.
    for m, v in ((catalogue.PILOT_QUEUE_TIME, 630.0), (catalogue.PILOT_GRID_QUEUE_TIME, 600.0)):
        assert samples(fams, m, "_sum") == {("E", "user_fe", "unknown"): v}, m.name
        assert samples(fams, m, "_count") == {("E", "user_fe", "unknown"): 1.0}, m.name


def test_ce_state_out_of_order_logs() -> None:
    from gwms_obs.accounting.ledger import Ledger

    led = Ledger()
    led.grid_resource("E", "S", True, 200.0)  # one client's log: down at 200
    led.grid_resource("E", "S", False, 100.0)  # another's, read later: up at 100 (older) changes nothing
    assert led.ce_down == {("E", "S"): 1.0} and led.ce_down_since == {("E", "S"): 200.0}
    led.grid_resource("E", "S", True, 150.0)  # an earlier 026 after the newest 025: the outage began then
    assert led.ce_down_since == {("E", "S"): 150.0}
    led.grid_resource("E", "S", False, 300.0)
    assert led.ce_down == {("E", "S"): 0.0} and led.ce_down_since == {}
    back = Ledger.from_json(led.to_json())
    assert back.ce_down == led.ce_down and back.ce == led.ce
