"""The outbox's bounds drop from the head of its queue (tracing/outbox.py keeps the requests in
order instead of sorting every name at each enqueue): a request cut short by an outage keeps
its place there, and one from before a restart is older than anything written after it."""

from __future__ import annotations

from pathlib import Path

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.tracing.outbox import SpoolForwarder, _name_spans
from tests.test_trace_pacing import _collector, _request


def test_a_request_cut_short_keeps_its_place_at_the_head_of_the_queue(tmp_path: Path) -> None:
    one = _request(1, 5)  # requests of one size; their names say how many spans
    with _collector() as (url, col):
        errors = ParseErrors()
        fwd = SpoolForwarder(url, tmp_path / "o", errors, require_issued=False, spans_per_second=1000)
        assert fwd.enqueue(_request(10, 300), 3000, "t") and fwd.enqueue(one, 5, "t")
        col.fail, col.ok_before_fail = 503, 1
        assert not fwd.send_once()  # the first 1,000 spans sent, then the outage
        cut, queued = fwd.pending()
        assert _name_spans(cut.name) == 2000 and _name_spans(queued.name) == 5
        # A bound that holds two of the small ones: the request cut short is the oldest, it goes alone.
        fwd.max_outbox_bytes = 2 * queued.stat().st_size
        assert fwd.enqueue(one, 6, "t")  # the enqueue is where the bounds are kept
    assert [_name_spans(p.name) for p in fwd.pending()] == [5, 6]
    assert errors.counts[("trace_spool", "outbox_full")] == 1 and fwd.stats.dropped_spans == 2000


def test_after_a_restart_the_outbox_left_behind_is_dropped_first(tmp_path: Path) -> None:
    errors = ParseErrors()
    dead = "http://127.0.0.1:9/v1/traces"
    one = _request(1, 5)  # one size; the names say 1 to 4 spans
    first = SpoolForwarder(dead, tmp_path / "o", errors, require_issued=False)
    for n in (1, 2, 3):
        assert first.enqueue(one, n, "t")
    again = SpoolForwarder(dead, tmp_path / "o", errors, require_issued=False, max_outbox_bytes=first.outbox_bytes())
    assert again.enqueue(one, 4, "t")  # over the bound by one request: the oldest goes
    assert [_name_spans(p.name) for p in again.pending()] == [2, 3, 4]
    assert again.stats.dropped_spans == 1
