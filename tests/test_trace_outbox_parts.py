"""A request handed to the outbox as its parts (outputs/pilot_traces.py: a pilot's text each) is
written as they are, one after the other, never joined into one copy first: the file holds
exactly their concatenation, whatever writev does, and a write that fails leaves nothing behind.

A file of several requests, one a line (outputs/pilot_traces.py with a paced forwarder: a file
each cost more than its bytes), is posted a line at a time as it is, each span once, and a send
cut short keeps the lines not sent."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.tracing import outbox as O
from gwms_obs.tracing.redact import Tally
from tests.test_trace_pacing import _collector, _ids, _request


def _parts(pilots: int) -> list[bytes]:
    parts = [b'{"resourceSpans":[']
    for i in range(pilots):
        parts += (json.dumps({"resource": {"attributes": []}, "scopeSpans": [], "n": i}).encode(), b",")
    parts[-1] = b"]}"
    return parts


def _forwarder(tmp_path: Path) -> tuple[O.SpoolForwarder, ParseErrors]:
    errors = ParseErrors()
    return O.SpoolForwarder("http://127.0.0.1:9/v1/traces", tmp_path / "o", errors, require_issued=False), errors


@pytest.mark.parametrize("pilots", [1, 14, 700])  # 700 pilots: 1,401 parts, more than a writev takes
def test_the_parts_are_written_as_one_request(tmp_path: Path, pilots: int) -> None:
    fwd, errors = _forwarder(tmp_path)
    parts = _parts(pilots)
    assert fwd.enqueue(parts, pilots, "t", scrubbed=Tally())
    (f,) = fwd.pending()
    assert f.read_bytes() == b"".join(parts)
    assert [rs["n"] for rs in json.loads(f.read_bytes())["resourceSpans"]] == list(range(pilots))
    assert fwd.outbox_bytes() == len(b"".join(parts)) and O._name_spans(f.name) == pilots
    assert not errors.counts and not [n for n in os.listdir(fwd.outbox) if n.startswith(".tmp.")]


def test_a_short_write_writes_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """writev may write less than asked (a signal, a nearly full disk): the rest follows, in order."""
    fwd, _ = _forwarder(tmp_path)
    real = os.writev
    short: list[int] = []

    def writev(fd: int, bufs: list[bytes]) -> int:
        n = real(fd, [bytes(memoryview(b"".join(bufs))[:1001])])  # cut inside a part
        short.append(n)
        return n

    monkeypatch.setattr(os, "writev", writev)
    parts = _parts(40)
    assert fwd.enqueue(parts, 40, "t", scrubbed=Tally())
    assert short == [1001]
    (f,) = fwd.pending()
    assert f.read_bytes() == b"".join(parts)


def test_a_failed_write_is_counted_and_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fwd, errors = _forwarder(tmp_path)

    def full(fd: int, bufs: list[bytes]) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "writev", full)
    assert not fwd.enqueue(_parts(3), 3, "t", scrubbed=Tally())
    assert errors.counts == {("trace_spool", "outbox_unwritable"): 1}
    assert fwd.pending() == [] and fwd.outbox_bytes() == 0
    assert sorted(os.listdir(fwd.outbox)) == [O.OUTBOX_MARKER]  # no half-written temporary


def test_an_encoded_request_still_needs_its_builders_scrubbing(tmp_path: Path) -> None:
    fwd, _ = _forwarder(tmp_path)
    with pytest.raises(ValueError, match="scrubbed"):
        fwd.enqueue(_parts(2), 2, "t")


def _lines(requests: list[dict[str, object]]) -> list[bytes]:
    """Requests one a line, as PilotTraces writes them (compact JSON: a span begins {"traceId":")."""
    return [b"\n".join(json.dumps(r, separators=(",", ":")).encode() for r in requests)]


def test_a_file_of_requests_one_a_line_is_posted_a_line_at_a_time(tmp_path: Path) -> None:
    reqs = [_request(3, 90), _request(1, 250), _request(2, 5)]  # 270, 250 and 10 spans
    with _collector() as (url, col):
        fwd = O.SpoolForwarder(url, tmp_path / "o", ParseErrors(), require_issued=False, spans_per_second=300)
        assert fwd.enqueue(_lines(reqs), 530, "t", scrubbed=Tally())
        assert fwd.send_once()
    assert col.bodies == reqs  # each line whole, in order: nothing decoded and cut again
    assert fwd.stats.sent_spans == 530 and fwd.stats.sent_requests == 3 and not fwd.pending()


def test_unpaced_a_file_of_lines_still_goes_a_line_at_a_time(tmp_path: Path) -> None:
    """The file is not one JSON document: whole, the collector would refuse it."""
    reqs = [_request(2, 10), _request(2, 10)]
    with _collector() as (url, col):
        fwd = O.SpoolForwarder(url, tmp_path / "o", ParseErrors(), require_issued=False, spans_per_second=0)
        assert fwd.enqueue(_lines(reqs), 40, "t", scrubbed=Tally())
        assert fwd.send_once()
    assert col.bodies == reqs and fwd.stats.collector_rejected == 0


def test_an_outage_in_a_file_of_lines_keeps_the_lines_not_sent(tmp_path: Path) -> None:
    reqs = [_request(1, 100), _request(1, 200), _request(3, 10)]
    with _collector() as (url, col):
        fwd = O.SpoolForwarder(url, tmp_path / "o", ParseErrors(), require_issued=False, spans_per_second=1000)
        assert fwd.enqueue(_lines(reqs), 330, "t", scrubbed=Tally())
        col.fail, col.ok_before_fail = 503, 1
        assert not fwd.send_once()  # the second line hit the outage
        (left,) = fwd.pending()
        assert O._name_spans(left.name) == 230 and left.read_bytes() == _lines(reqs[1:])[0]
        assert fwd.outbox_bytes() == left.stat().st_size
        col.fail = None
        assert fwd.send_once()
    assert col.bodies == reqs and _ids(col.bodies) == _ids(reqs)  # every span once: none lost, none twice
    assert fwd.stats.sent_spans == 330 and fwd.stats.dropped_spans == 0


def test_a_document_written_on_several_lines_is_not_taken_for_requests(tmp_path: Path) -> None:
    """Only lines that each are a request are posted one by one; anything else goes as before."""
    req = _request(2, 5)
    with _collector() as (url, col):
        fwd = O.SpoolForwarder(url, tmp_path / "o", ParseErrors(), require_issued=False, spans_per_second=0)
        assert fwd.enqueue([json.dumps(req, indent=1).encode()], 10, "t", scrubbed=Tally())
        assert fwd.send_once()
    assert col.bodies == [req]
