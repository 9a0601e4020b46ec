"""The forwarder's outbox is its own directory (issue 29, item 4): never the checkpoint's, never anyone else's files.

Pointed at the checkpoint's directory, the forwarder used to POST
checkpoint.json to the collector as spans and delete it (every restart then
counted every pilot again), and any other *.json there went as outbox_expired.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from gwms_obs.cli import main
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.tracing.outbox import OUTBOX_MARKER, OUTBOX_PREFIX, OutboxError, SpoolForwarder
from tests.support.otlp_capture import otlp_capture
from tests.support.servers import free_port
from tests.test_trace_spool import PARENTS, glidein, line, span

CHECKPOINT = b'{"v": 7, "stages": {"glidein_files": {"cursors": {}}}}'  # what must survive, byte for byte
FOREIGN = b'{"resourceSpans": []}'  # someone's *.json, even one that looks like a request


def state_dir(tmp_path: Path) -> Path:
    """/var/lib/gwms-obs after a run: the checkpoint and an unrelated JSON file."""
    d = tmp_path / "state"
    d.mkdir()
    (d / "checkpoint.json").write_bytes(CHECKPOINT)
    (d / "notes.json").write_bytes(FOREIGN)
    return d


def untouched(d: Path) -> bool:
    return (d / "checkpoint.json").read_bytes() == CHECKPOINT and (d / "notes.json").read_bytes() == FOREIGN


def test_the_checkpoints_directory_is_refused_and_nothing_is_sent_or_deleted(tmp_path: Path) -> None:
    d = state_dir(tmp_path)
    (tmp_path / "link").symlink_to(d)
    with otlp_capture() as cap:
        # Told where the checkpoint is: its directory, the same through a symlink, or one above it.
        for outbox in (d, tmp_path / "link", tmp_path):
            with pytest.raises(OutboxError, match="checkpoint") as e:
                SpoolForwarder(cap.traces_url, outbox, ParseErrors(), checkpoint=d / "checkpoint.json")
            assert isinstance(e.value, OSError)  # cli.py's `except OSError` turns it into exit 2
        # Not told (the cli as it was): an unmarked directory holding files not ours is refused too.
        with pytest.raises(OSError, match="did not write") as refused:
            SpoolForwarder(cap.traces_url, d, ParseErrors(), max_outbox_age=0.0)
        assert "checkpoint.json" in str(refused.value)
        reqs = list(cap.requests)
    assert reqs == [] and untouched(d) and not (d / OUTBOX_MARKER).exists()
    # Its own directory beside the checkpoint (the default <checkpoint>.traces) is fine.
    SpoolForwarder(cap.traces_url, tmp_path / "checkpoint.json.traces", ParseErrors(), checkpoint=d / "checkpoint.json")


def test_files_not_ours_in_a_marked_outbox_are_left_in_place_counted_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The checkpoint written later into an outbox already in use: only our requests are sent, expired, deleted."""
    ob = tmp_path / "ob"
    errors = ParseErrors()
    SpoolForwarder("http://127.0.0.1:9/v1/traces", ob, errors)  # first use: marks it
    (ob / "checkpoint.json").write_bytes(CHECKPOINT)
    (ob / "notes.json").write_bytes(FOREIGN)
    old = time.time() - 30 * 86400  # older than the age bound: still not ours to expire
    os.utime(ob / "notes.json", (old, old))
    with otlp_capture() as cap:
        fwd = SpoolForwarder(cap.traces_url, ob, errors, retry_min=0.05)
        fwd(line(span(parentSpanId=PARENTS[0])), glidein(tmp_path))
        fwd.start()
        assert fwd.drain(20)
        for _ in range(3):
            assert fwd.send_once()  # each pass lists the outbox again
        fwd.stop()
        reqs = list(cap.requests)
    assert len(reqs) == 1 and json.loads(reqs[0].body)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] == (
        "00f067aa0ba902b7"
    )
    assert untouched(ob) and not (ob / "rejected").exists()
    assert (ob / OUTBOX_MARKER).is_file()
    assert errors.counts[("trace_spool", "outbox_foreign")] == 2  # once per file, however many passes
    assert ("trace_spool", "outbox_expired") not in errors.counts
    logged = [r.getMessage() for r in caplog.records if "outbox_foreign" in r.getMessage()]
    assert len(logged) == 2 and any(str(ob / "checkpoint.json") in m for m in logged)


def test_the_earlier_versions_outbox_is_adopted_and_its_requests_sent(tmp_path: Path) -> None:
    """Requests the earlier version left (no prefix) are ours: the outbox is adopted, they are sent first."""
    ob = tmp_path / "ob"
    (ob / "rejected").mkdir(parents=True)
    body = json.dumps({"resourceSpans": []}).encode()
    old = f"{time.time_ns() - 10**9:020d}-123-000001-4.json"
    (ob / old).write_bytes(body)
    (ob / "rejected" / f"{time.time_ns() - 10**10:020d}-123-000000-2.json").write_bytes(body)
    with otlp_capture() as cap:
        fwd = SpoolForwarder(cap.traces_url, ob, ParseErrors())
        fwd(line(span(parentSpanId=PARENTS[0])), glidein(tmp_path))
        names = [p.name for p in fwd.pending()]
        assert names[0] == old and names[1].startswith(OUTBOX_PREFIX)
        assert fwd.send_once()
        reqs = list(cap.requests)
    assert len(reqs) == 2 and reqs[0].body == body
    assert fwd.stats.sent_spans == 4 + 1 and (ob / OUTBOX_MARKER).is_file()


def test_export_refuses_the_checkpoints_directory_as_outbox(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The issue's restart: `--traces-outbox /var/lib/gwms-obs` beside its checkpoint is exit 2 and one clear line."""
    factory = tmp_path / "f"
    (factory / "client").mkdir(parents=True)
    d = state_dir(tmp_path)
    with otlp_capture() as cap:
        rc = main(["export", "--factory-dir", str(factory), "--listen", f"127.0.0.1:{free_port()}", "--once",
                   "--checkpoint", str(d / "checkpoint.json"), "--reset-checkpoint",
                   "--traces-endpoint", cap.traces_url, "--traces-outbox", str(d)])  # fmt: skip
        reqs = list(cap.requests)
    assert rc == 2 and reqs == []
    assert any("span forwarder" in r.getMessage() and str(d) in r.getMessage() for r in caplog.records)
    assert (d / "notes.json").read_bytes() == FOREIGN
