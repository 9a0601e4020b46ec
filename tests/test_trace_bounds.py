"""Spools bound to their glidein, length and dimension limits, the secret corpus, the outbox's bounds and backoff."""

from __future__ import annotations

import base64
import itertools
import json
import time
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing import redact
from gwms_obs.tracing.ledger import LEDGER_NAME, LedgerIndex
from gwms_obs.tracing.outbox import SpoolForwarder
from tests.support.otlp_capture import otlp_capture
from tests.support.trace_ledger import issue
from tests.support.trace_secrets import SECRETS, secret_spans

T = "4bf92f3577b34da6a3ce929d0e0e4736"
VICTIM_T = "11111111111111111111111111111111"
PARENTS = ["a000000000000001", "a000000000000002"]
RES = {C.FACTORY: "OSG", C.ENTRY: "Entry_A", C.CLIENT: "fe.main"}
DEAD = "http://127.0.0.1:9/v1/traces"


def kv(k: str, v: str | int) -> dict[str, Any]:
    return {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}


def sp(span_id: str, parent: str, trace: str = T, **kw: Any) -> dict[str, Any]:
    s = {"traceId": trace, "spanId": span_id, "parentSpanId": parent, "name": kw.pop("name", "glidein"), "kind": 1,
         "startTimeUnixNano": "1781000000000000000", "endTimeUnixNano": "1781000001000000000"}  # fmt: skip
    s.update(kw)
    return s


def spool(*spans: dict[str, Any], resource: list[dict[str, Any]] | None = None) -> bytes:
    res = resource if resource is not None else [kv(k, v) for k, v in RES.items()]
    doc = {"resourceSpans": [{"resource": {"attributes": res}, "scopeSpans": [{"scope": {}, "spans": list(spans)}]}]}
    return json.dumps(doc).encode()


def err_path(d: Path, proc: int = 0) -> str:
    if not (d / LEDGER_NAME).exists():
        issue(d, 42, T, PARENTS, RES)
    return str(d / f"job.42.{proc}.err")


def outbox_spans(fwd: SpoolForwarder) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(resource attributes, span) of everything waiting in the outbox."""
    out = []
    for p in fwd.pending():
        for rs in json.loads(p.read_bytes())["resourceSpans"]:
            res = {a["key"]: next(iter(a["value"].values())) for a in rs["resource"]["attributes"]}
            out += [(res, s) for ss in rs["scopeSpans"] for s in ss["spans"]]
    return out


# --- binding -----------------------------------------------------------------------------------


def test_a_glideins_own_spool_passes_and_is_completed_from_the_ledger(tmp_path: Path) -> None:
    errors = ParseErrors()
    fwd = SpoolForwarder(DEAD, tmp_path / "ob", errors)
    fwd(spool(sp("b000000000000001", PARENTS[1]), sp("b000000000000002", "b000000000000001"), resource=[]),
        err_path(tmp_path, 1))  # fmt: skip
    got = outbox_spans(fwd)
    assert len(got) == 2 and errors.total() == 0
    res = got[0][0]
    assert res[C.ENTRY] == "Entry_A" and res[C.CONDOR_CLUSTER] == "42" and res[C.CONDOR_PROC] == "1"
    assert res[C.SERVICE_NAME] == C.SERVICE_PILOT


@pytest.mark.parametrize(
    ("forged", "reason"),
    [
        # another pilot's trace id, under that pilot's span: the issue's attack
        (spool(sp("b000000000000001", "c000000000000009", trace=VICTIM_T)), "foreign_trace"),
        # the victim's identity in the resource, in our own trace
        (spool(sp("b000000000000001", PARENTS[0]), resource=[kv(C.ENTRY, "Victim_Entry")]), "foreign_resource"),
        (spool(sp("b000000000000001", PARENTS[0]), resource=[kv(C.CONDOR_PROC, 1)]), "foreign_resource"),
        # a sibling glidein's submit span as parent (same cluster, same trace)
        (spool(sp("b000000000000001", PARENTS[1])), "foreign_parent"),
        # a new root in the cluster's trace
        (spool(sp("b000000000000001", "")), "foreign_parent"),
        # overwriting the factory's own span
        (spool(sp(PARENTS[0], PARENTS[0])), "foreign_span"),
    ],
)
def test_forged_spools_are_refused_and_counted(tmp_path: Path, forged: bytes, reason: str) -> None:
    errors = ParseErrors()
    fwd = SpoolForwarder(DEAD, tmp_path / "ob", errors)
    fwd(forged, err_path(tmp_path, 0))
    assert not fwd.pending() and fwd.stats.refused == 1
    assert errors.counts[("trace_spool", reason)] == 2  # the span, then the refused spool


def test_forged_spans_are_dropped_from_an_otherwise_good_spool(tmp_path: Path) -> None:
    errors = ParseErrors()
    fwd = SpoolForwarder(DEAD, tmp_path / "ob", errors)
    good = sp("b000000000000001", PARENTS[0])
    child = sp("b000000000000002", "b000000000000001", attributes=[kv(C.PHASE, "setup")])
    forged = sp("b000000000000003", "c000000000000009", trace=VICTIM_T)
    orphan = sp("b000000000000004", "b000000000000003", trace=VICTIM_T)
    fwd(spool(good, child, forged, orphan), err_path(tmp_path, 0))
    assert [s["spanId"] for _, s in outbox_spans(fwd)] == ["b000000000000001", "b000000000000002"]
    assert errors.counts[("trace_spool", "foreign_trace")] == 2 and fwd.stats.unbound_spans == 2


def test_no_ledger_entry_no_forwarding(tmp_path: Path) -> None:
    errors = ParseErrors()
    fwd = SpoolForwarder(DEAD, tmp_path / "ob", errors)
    fwd(spool(sp("b000000000000001", PARENTS[0])), str(tmp_path / "job.7.0.err"))  # cluster 7 never issued
    fwd(spool(sp("b000000000000001", PARENTS[0])), str(tmp_path / "not-a-job.err"))
    assert not fwd.pending() and errors.counts[("trace_spool", "not_issued")] == 2
    lax = SpoolForwarder(DEAD, tmp_path / "ob2", errors, require_issued=False)
    lax(spool(sp("b000000000000001", PARENTS[0])), str(tmp_path / "job.7.0.err"))
    assert len(lax.pending()) == 1


def test_dimension_values_are_bounded(tmp_path: Path) -> None:
    errors = ParseErrors()
    fwd = SpoolForwarder(DEAD, tmp_path / "ob", errors)
    phase = sp("b000000000000001", PARENTS[0], attributes=[kv(C.PHASE, "x" * 1_000_000)])
    fwd(spool(phase, resource=[kv(C.SITE, "Nebraska\n{evil}")]), err_path(tmp_path))
    ((res, s),) = outbox_spans(fwd)
    assert s["attributes"] == [kv(C.PHASE, "other")] and res[C.SITE] == "invalid"
    assert errors.counts[("trace_spool", "bad_dimension")] == 2


def test_lengths_are_cut(tmp_path: Path) -> None:
    errors = ParseErrors()
    fwd = SpoolForwarder(DEAD, tmp_path / "ob", errors)
    long = sp("b000000000000001", PARENTS[0], name="n" * 1000, attributes=[kv("k", "v" * 100_000)],
              events=[{"timeUnixNano": "1781000000500000000", "name": "e" * 1000}],
              status={"code": 2, "message": "m" * 100_000})  # fmt: skip
    fwd(spool(long), err_path(tmp_path))
    ((_, s),) = outbox_spans(fwd)
    assert len(s["name"]) == redact.MAX_NAME and len(s["events"][0]["name"]) == redact.MAX_NAME
    assert len(s["attributes"][0]["value"]["stringValue"]) == redact.MAX_VALUE
    assert len(s["status"]["message"]) == redact.MAX_VALUE
    assert errors.counts[("trace_spool", "value_truncated")] == 4


def test_ledger_is_read_incrementally_and_bad_lines_are_counted(tmp_path: Path) -> None:
    errors = ParseErrors()
    idx = LedgerIndex(errors)
    assert idx.lookup(tmp_path, 1, 0) is None  # no ledger yet
    issue(tmp_path, 1, T, PARENTS, RES)
    with open(tmp_path / LEDGER_NAME, "ab") as f:
        f.write(b'{"v":1,"cluster":2,"trace_id":"nothex"}\n\xff\xfe\n')
    issue(tmp_path, 3, VICTIM_T, PARENTS, RES)
    got = idx.lookup(tmp_path, 3, 1)
    assert got is not None and got.trace_id == VICTIM_T and got.parent_span_id == PARENTS[1]
    assert idx.lookup(tmp_path, 3, 2) is None  # beyond the cluster's count
    assert idx.lookup(tmp_path, 2, 0) is None and errors.counts[("trace_spool", "ledger_bad_line")] == 2
    (tmp_path / LEDGER_NAME).write_text("")  # truncated (rotated): read again from the start
    issue(tmp_path, 4, T, PARENTS, RES)
    assert idx.lookup(tmp_path, 4, 0) is not None


# --- secrets ------------------------------------------------------------------------------------


def test_every_secret_shape_is_masked_by_the_exporter(tmp_path: Path) -> None:
    fwd = SpoolForwarder(DEAD, tmp_path / "ob", ParseErrors())
    resource, spans = secret_spans(T, PARENTS[0])
    fwd(spool(*spans, resource=[*resource, *(kv(k, v) for k, v in RES.items())]), err_path(tmp_path))
    body = b"".join(p.read_bytes() for p in fwd.pending())
    assert b"****" in body and len(outbox_spans(fwd)) == len(spans)
    text = body.decode()
    decoded = [base64.b64decode(m).decode("latin-1") for m in _bytes_values(json.loads(body))]
    for secret in SECRETS:
        assert secret not in text and all(secret not in d for d in decoded), secret


def _bytes_values(doc: Any) -> list[str]:
    if isinstance(doc, dict):
        return [doc["bytesValue"]] if "bytesValue" in doc else [x for v in doc.values() for x in _bytes_values(v)]
    if isinstance(doc, list):
        return [x for v in doc for x in _bytes_values(v)]
    return []


def test_harmless_text_is_left_alone() -> None:
    for s in ("main/setup_x509.sh", "exit code 3", "tokens: 5", "condor_startup.sh", "passed all checks",
              "gwms.trace.parent_received", "https://example.org/path"):  # fmt: skip
        assert redact.mask_text(s) == s
    for k in ("gwms.phase", "gwms.script", "process.exit.code", "gwms.glidein.uuid", "gwms.entry"):
        assert not redact.blocked_key(k)


def test_collector_role_uses_the_same_patterns() -> None:
    import yaml

    root = Path(__file__).resolve().parents[1]
    d = yaml.safe_load((root / "ansible/roles/otel_collector/defaults/main.yml").read_text())
    assert tuple(d["otel_collector_redact_key_patterns"]) == redact.KEY_PATTERNS
    assert tuple(d["otel_collector_redact_value_patterns"]) == redact.VALUE_PATTERNS


# --- the outbox ---------------------------------------------------------------------------------


def _fill(fwd: SpoolForwarder, d: Path, n: int) -> None:
    for i in range(n):
        fwd(spool(sp(f"b{i + 1:015x}", PARENTS[0], attributes=[kv("pad", "p" * 900)])), err_path(d))


def test_outbox_is_bounded_in_bytes_oldest_dropped_and_counted(tmp_path: Path) -> None:
    errors = ParseErrors()
    fwd = SpoolForwarder(DEAD, tmp_path / "ob", errors, max_outbox_bytes=5000)
    _fill(fwd, tmp_path, 20)
    names = [p.name for p in fwd.pending()]
    assert 0 < fwd.outbox_bytes() <= 5000 and sum(p.stat().st_size for p in fwd.pending()) <= 5000
    assert errors.counts[("trace_spool", "outbox_full")] == fwd.stats.dropped_files == 20 - len(names)
    newest = json.loads(fwd.pending()[-1].read_bytes())["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"]
    assert newest == f"b{20:015x}"  # the newest kept, the oldest went
    # One spool larger than the whole bound is refused, not allowed to empty the outbox.
    big = SpoolForwarder(DEAD, tmp_path / "ob2", errors, max_outbox_bytes=500)
    _fill(big, tmp_path, 1)
    assert not big.pending() and big.stats.dropped_files == 1


def test_outbox_is_bounded_in_age_across_a_restart(tmp_path: Path) -> None:
    errors = ParseErrors()
    ob = tmp_path / "ob"
    ob.mkdir()
    old = f"{time.time_ns() - 10 * 86400 * 10**9:020d}-1-000001-7.json"
    (ob / old).write_text("{}")
    fwd = SpoolForwarder(DEAD, ob, errors, max_outbox_age=86400)
    _fill(fwd, tmp_path, 1)
    assert [p.name for p in fwd.pending()] != [] and old not in [p.name for p in fwd.pending()]
    assert errors.counts[("trace_spool", "outbox_expired")] == 1 and fwd.stats.dropped_spans == 7


def test_rejected_requests_are_bounded(tmp_path: Path) -> None:
    with otlp_capture(always=400) as cap:
        fwd = SpoolForwarder(cap.traces_url, tmp_path / "ob", ParseErrors(), max_rejected=3)
        _fill(fwd, tmp_path, 6)
        assert fwd.send_once()
    assert len(list((tmp_path / "ob" / "rejected").iterdir())) == 3 and not fwd.pending()


def test_new_spools_do_not_bypass_the_backoff(tmp_path: Path) -> None:
    """The issue's 11 POSTs in 1.1 s to a 503 collector: now each retry waits out its backoff."""
    with otlp_capture(always=503) as cap:
        fwd = SpoolForwarder(cap.traces_url, tmp_path / "ob", ParseErrors(), retry_min=0.4, retry_max=5)
        fwd.start()
        t0 = time.monotonic()
        _fill(fwd, tmp_path, 1)
        while time.monotonic() - t0 < 1.5:  # spools keep arriving, each one notifies the sender
            _fill(fwd, tmp_path, 1)
            time.sleep(0.05)
        fwd.stop()
        times = list(cap.times)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # first try at once, then after 0.4 s and 0.8 s: at most 3 posts in 1.5 s
    assert 2 <= len(times) <= 3, times
    assert all(g >= 0.35 for g in gaps), gaps
    assert gaps[0] < 0.8  # the first backoff is retry_min, not more


def test_retry_after_is_honoured(tmp_path: Path) -> None:
    with otlp_capture(statuses=[503], retry_after="1") as cap:
        fwd = SpoolForwarder(cap.traces_url, tmp_path / "ob", ParseErrors(), retry_min=0.05, retry_max=5)
        _fill(fwd, tmp_path, 1)
        fwd.start()
        assert fwd.drain(10)
        fwd.stop()
        times = list(cap.times)
    assert len(times) == 2 and times[1] - times[0] >= 0.95
