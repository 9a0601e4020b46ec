"""A request handed to the outbox as its parts (outputs/pilot_traces.py: a pilot's text each) is
written as they are, one after the other, never joined into one copy first: the file holds
exactly their concatenation, whatever writev does, and a write that fails leaves nothing behind."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.tracing import outbox as O
from gwms_obs.tracing.redact import Tally


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
