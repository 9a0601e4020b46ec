"""The span outbox: spools and built traces queued on disk, posted to the collector in the background.

:class:`SpoolForwarder` is the pipeline's ``spool_sink``: it binds each parsed
spool to its glidein, stores it in an outbox directory at once (cheap, so the
scan never waits on the network), and a background thread posts the outbox to
the collector, paced, retrying with backoff while the collector is away, so no
span is lost to an outage or a restart of the exporter.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote

from ..parse_errors import ParseErrors
from .bind import bind_spool, own_phases
from .ledger import LedgerIndex
from .redact import Tally, scrub_resource_spans
from .spool import MAX_SPANS, SOURCE, Reporter, Spool, SpoolError, parse_spool

log = logging.getLogger("gwms_obs.tracing.outbox")

_JOB_ERR = re.compile(r"job\.([0-9]{1,12})\.([0-9]{1,9})\.err")


MAX_OUTBOX_BYTES = 128 << 20  # requests waiting for the collector; the oldest go first
MAX_OUTBOX_AGE = 3 * 86400.0  # seconds; older requests are dropped (Jaeger's view has moved on)
MAX_REJECTED = 100  # requests the collector refused, kept for a look
# Pacing: spans posted per second, on average, at most (0: unpaced). A factory finishing
# 100,000 pilots a day sends ~30 spans/s (~25 spans a pilot); ten times that leaves room for
# its busiest hours and catches up a 1-hour collector outage (~110k spans) in ~7 minutes,
# while a backfill of weeks reaches Jaeger at a rate its collector queue absorbs.
SPANS_PER_SECOND: Final = 300.0
OUTBOX_MARKER: Final = ".gwms-obs-outbox"  # written when a directory becomes an outbox
OUTBOX_PREFIX: Final = "gwms-spool-"
# Requests in the outbox: <prefix><ns:020d>-<pid>-<seq>-<spans>.json. The forwarder sends,
# expires and deletes only these; the earlier version wrote them without the prefix, and
# those are still sent after an upgrade.
_OUTBOX_NAME = re.compile(r"(?:gwms-spool-)?([0-9]{20})-[0-9]{1,10}-[0-9]{6,20}-([0-9]{1,9})\.json")
# Glideins whose returned spool's phases are remembered for their pilot trace (outputs.pilot_traces),
# which is built right after the spool is read; the oldest are forgotten first.
MAX_OWN_SPANS: Final = 10_000
MAX_FOREIGN_LOGGED = 1000  # names of files not ours in the outbox, each counted and logged once


# --- forwarding -------------------------------------------------------------------------------


def otlp_headers(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``OTEL_EXPORTER_OTLP_TRACES_HEADERS`` (or ``..._HEADERS``): k=v pairs, %-encoded values."""
    env = os.environ if env is None else env
    raw = env.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS", env.get("OTEL_EXPORTER_OTLP_HEADERS", ""))
    out: dict[str, str] = {}
    for item in raw.split(","):
        k, sep, v = item.partition("=")
        if sep and k.strip():
            out[k.strip()] = unquote(v.strip())
    return out


class OutboxError(OSError):
    """The outbox cannot be the forwarder's own directory: it would send and delete what is not a spool."""


def _outbox_own(name: str) -> bool:
    """A name the forwarder writes in its outbox (a request, a temporary, the marker, rejected/)."""
    return bool(_OUTBOX_NAME.fullmatch(name)) or name in (OUTBOX_MARKER, "rejected") or name.startswith(".tmp.")


def claim_outbox(outbox: str | os.PathLike[str], checkpoint: str | os.PathLike[str] | None = None) -> Path:
    """Make ``outbox`` the forwarder's own directory, or raise :class:`OutboxError` saying why not.

    Refused: the checkpoint's directory or one above it (symlinks resolved), and
    a directory not yet marked as an outbox that holds anything the forwarder
    did not write (an empty one, or the earlier version's outbox, is adopted).
    The marker is written on success; the resolved directory is returned.
    """
    real = Path(outbox).resolve()
    if checkpoint:
        state = Path(checkpoint).resolve().parent
        if real == state or real in state.parents:
            raise OutboxError(
                f"traces outbox {outbox} is {'' if real == state else 'above '}the directory of the checkpoint "
                f"{checkpoint}: the forwarder would send and delete what is not a spool; "
                f"give it a directory of its own (the default is {checkpoint}.traces)"
            )
    if (real / OUTBOX_MARKER).is_file():
        return real
    try:
        foreign = sorted(n for n in os.listdir(real) if not _outbox_own(n))
    except FileNotFoundError:
        foreign = []
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        shown = ", ".join(repr(n[:60]) for n in foreign[:3]) + more
        raise OutboxError(
            f"traces outbox {outbox} holds files the forwarder did not write ({shown}) and is not marked "
            f"{OUTBOX_MARKER}: give it a directory of its own"
        )
    real.mkdir(parents=True, exist_ok=True)
    (real / OUTBOX_MARKER).write_text(
        f"gwms-obs span outbox: the exporter sends and deletes {OUTBOX_PREFIX}*.json here, nothing else\n"
    )
    return real


def traces_endpoint(env: Mapping[str, str] | None = None) -> str | None:
    """The OTLP/HTTP traces URL the OTEL_* variables name, as the SDK resolves it."""
    env = os.environ if env is None else env
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    return base.rstrip("/") + "/v1/traces" if base else None


@dataclass
class ForwarderStats:
    accepted: int = 0  # spools validated and queued
    refused: int = 0  # spools refused by validation or binding
    sent_requests: int = 0
    sent_spans: int = 0
    collector_rejected: int = 0  # requests refused by the collector (kept in outbox/rejected)
    failures: int = 0  # transient send failures (retried)
    unbound_spans: int = 0  # spans dropped: not the glidein's trace, parent or resource
    dropped_files: int = 0  # outbox files dropped: over the byte bound or too old
    dropped_spans: int = 0
    paced_seconds: float = 0.0  # time the sender waited to keep under spans_per_second


# --- forwarding -------------------------------------------------------------------------------


class SpoolForwarder:
    """``Ingest.spool_sink``: validate, bind to the glidein, redact, queue on disk, post in the background.

    Sending is paced: at most ``spans_per_second`` spans a second on average
    (a token bucket holding one second's worth; 0 turns pacing off). A request
    larger than that is posted in pieces of one second's spans, so a backfill
    reaches the collector as a steady stream, never as one flood; the scan is
    not slowed (enqueue only writes a file), the outbox's bounds still apply.

    The outbox is bounded: at most ``max_outbox_bytes`` of requests (the
    oldest are dropped to make room) and none older than
    ``max_outbox_age`` seconds; each drop is counted
    (``outbox_full``/``outbox_expired``) and logged. After a failed post the
    sender waits out its backoff (doubling from ``retry_min`` to
    ``retry_max``, or the collector's ``Retry-After``) however many new
    spools arrive meanwhile.
    """

    def __init__(
        self,
        endpoint: str,
        outbox: Path,
        errors: ParseErrors,
        *,
        token: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        retry_min: float = 0.5,
        retry_max: float = 30.0,
        max_spans: int = MAX_SPANS,
        max_outbox_bytes: int = MAX_OUTBOX_BYTES,
        max_outbox_age: float = MAX_OUTBOX_AGE,
        max_rejected: int = MAX_REJECTED,
        ledger: LedgerIndex | None = None,
        require_issued: bool = True,
        checkpoint: str | os.PathLike[str] | None = None,
        spans_per_second: float = SPANS_PER_SECOND,
    ) -> None:
        if not (math.isfinite(spans_per_second) and spans_per_second >= 0):
            raise ValueError(f"spans_per_second must be a finite number >= 0, got {spans_per_second}")
        # Before anything is read or written there: refused (OutboxError, an OSError) when it is not ours.
        claim_outbox(outbox, checkpoint)
        self.endpoint = endpoint
        self.outbox = Path(outbox)
        self.rejected_dir = self.outbox / "rejected"
        self.errors = errors
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        self.timeout = timeout
        self.retry_min = retry_min
        self.retry_max = retry_max
        self.max_spans = max_spans
        self.max_outbox_bytes = max_outbox_bytes
        self.max_outbox_age = max_outbox_age
        self.max_rejected = max_rejected
        # Without a ledger entry a spool cannot be tied to its glidein: refused
        # unless require_issued=False (a factory that does not trace its submits).
        self.ledger = ledger if ledger is not None else LedgerIndex(errors)
        self.require_issued = require_issued
        self.stats = ForwarderStats()
        self.spans_per_second = spans_per_second
        # The bucket holds one second's spans (at least one span): the largest piece posted at once.
        self.burst = max(1, int(spans_per_second))
        self._tokens = float(self.burst)
        self._tokens_at = time.monotonic()
        self._seq = 0
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._retry_after = 0.0  # the collector's Retry-After of the last failure, seconds
        self._foreign: set[str] = set()  # names of files not ours, counted and logged once
        # (log dir, cluster, proc) -> the phases (and root) its bound spool had, for own_spans()
        self._own: OrderedDict[tuple[str, int, int], dict[str, str]] = OrderedDict()
        # name -> size of the requests waiting, oldest first: the outbox's bounds are kept on this
        self._sizes: dict[str, int] = {}
        for p in self.pending():
            with contextlib.suppress(OSError):
                self._sizes[p.name] = p.stat().st_size

    # The sink: called by the scan, must be quick and must not raise.
    def __call__(self, spool: bytes, path: str) -> None:
        try:
            parsed = parse_spool(spool, path, self.errors, max_spans=self.max_spans)
            self._bind(parsed, path)
        except SpoolError as e:
            self.errors.record(SOURCE, e.reason, path, None, f"spool refused: {e}")
            self.stats.refused += 1
            return
        if self.enqueue(parsed.request(), parsed.spans, path):
            self.stats.accepted += 1

    def enqueue(
        self, request: dict[str, Any] | bytes | list[bytes], spans: int, path: str, *, scrubbed: Tally | None = None
    ) -> bool:
        """Queue one ExportTraceServiceRequest built here (outputs.pilot_traces); False when dropped.

        The spans are masked and cut as a pilot's spool is (``tracing.redact``),
        unless the caller did it to each text from a pilot already and says so
        with what it changed (``scrubbed``): every key and value of a request
        through the regexes costs ~10 times building it. Such a request may
        come encoded (OTLP/JSON bytes), or as the parts whose concatenation it is,
        written as they are (a joined copy of a ~200 KB request cost more than the
        write itself). Quick, never raises.
        """
        if isinstance(request, (bytes, list)):
            if scrubbed is None:
                raise ValueError("an encoded request must be scrubbed by its builder")
            tally = scrubbed
            parts = [request] if isinstance(request, bytes) else request
        else:
            tally = scrub_resource_spans(request["resourceSpans"]) if scrubbed is None else scrubbed
            parts = [json.dumps(request, separators=(",", ":")).encode()]
        size = sum(map(len, parts))
        for reason, n in (("secret_masked", tally.redacted), ("value_truncated", tally.truncated)):
            for _ in range(n):
                self.errors.record(SOURCE, reason, path, None, f"{n} in this spool")
        if size > self.max_outbox_bytes:
            detail = f"{size} bytes, outbox bound {self.max_outbox_bytes}"
            self._count_drop("outbox_full", path, spans, detail)
            return False
        with self._cond:
            self._seq += 1
            # The span count rides in the name: the sender's statistics need no re-parse.
            name = f"{OUTBOX_PREFIX}{time.time_ns():020d}-{os.getpid()}-{self._seq:06d}-{spans}.json"
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp.", dir=self.outbox)
            try:
                _write_all(fd, parts)
            finally:
                os.close(fd)
            os.replace(tmp, self.outbox / name)
        except OSError as e:
            self.errors.record(SOURCE, "outbox_unwritable", path, None, str(e))
            if tmp is not None:  # a half-written temporary (a full disk) is not left behind
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return False
        with self._cond:
            self._sizes[name] = size
            self._enforce_bounds()
            self._cond.notify_all()
        return True

    def _bind(self, parsed: Spool, path: str) -> None:
        m = _JOB_ERR.fullmatch(os.path.basename(path))
        issued = self.ledger.lookup(os.path.dirname(path), int(m[1]), int(m[2])) if m else None
        if issued is None:
            if self.require_issued:
                raise SpoolError("not_issued", "no trace issued to this glidein in the factory's ledger")
            return
        report = Reporter(self.errors, path)
        before = parsed.spans
        bind_spool(parsed, issued, report)
        self.stats.unbound_spans += before - parsed.spans
        if parsed.spans == 0:
            first = report.first
            raise SpoolError(first.reason if first else "empty", "nothing of this glidein's own trace")
        with self._cond:
            self._own[(os.path.dirname(path), issued.cluster, issued.proc)] = own_phases(parsed, issued)
            while len(self._own) > MAX_OWN_SPANS:
                self._own.popitem(last=False)

    def own_spans(self, log_dir: str, cluster: int, proc: int) -> dict[str, str] | None:
        """The phases of glidein ``cluster.proc``'s spool, read from ``log_dir``'s job.C.P.err (span ids by
        phase, its root as ``glidein``); None when none came back. Asked once, by its pilot trace."""
        with self._cond:
            return self._own.pop((log_dir, cluster, proc), None)

    # --- the outbox's bounds ---
    def _enforce_bounds(self) -> None:
        """Drop requests older than the age bound, then the oldest until under the byte bound (lock held).

        ``_sizes`` is in queue order, oldest first (the outbox sorted at start, then each request
        as it is written), so this looks only at what it drops: it runs at every enqueue, where
        sorting every name (a regex each) cost ~0.3 ms a request with 141 waiting, and more the
        longer a collector outage lasts."""
        cutoff = time.time_ns() - int(self.max_outbox_age * 1e9)
        sizes = self._sizes
        while sizes and _name_time(oldest := next(iter(sizes))) < cutoff:
            self._drop(oldest, "outbox_expired", f"older than {self.max_outbox_age:.0f} s")
        total = sum(sizes.values())
        while sizes and total > self.max_outbox_bytes:
            oldest = next(iter(sizes))
            total -= sizes[oldest]
            self._drop(oldest, "outbox_full", f"outbox over {self.max_outbox_bytes} bytes, oldest dropped")

    def _drop(self, name: str, reason: str, detail: str) -> None:
        self._sizes.pop(name, None)
        with contextlib.suppress(FileNotFoundError):
            (self.outbox / name).unlink()
        self._count_drop(reason, str(self.outbox / name), _name_spans(name), detail)

    def _count_drop(self, reason: str, path: str, spans: int, detail: str) -> None:
        self.stats.dropped_files += 1
        self.stats.dropped_spans += spans
        self.errors.record(SOURCE, reason, path, None, f"{spans} spans dropped: {detail}")

    def outbox_bytes(self) -> int:
        with self._cond:
            return sum(self._sizes.values())

    def pending(self) -> list[Path]:
        """The requests waiting, oldest first; anything else in the outbox is left alone (counted, logged once)."""
        try:
            names = os.listdir(self.outbox)
        except FileNotFoundError:
            return []
        for n in names:
            if not _outbox_own(n) and n not in self._foreign and len(self._foreign) < MAX_FOREIGN_LOGGED:
                self._foreign.add(n)
                self.errors.record(SOURCE, "outbox_foreign", str(self.outbox / n), None, "not a spool: left in place")
        return [self.outbox / n for n in sorted((n for n in names if _OUTBOX_NAME.fullmatch(n)), key=_name_key)]

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="gwms-trace-forwarder", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def drain(self, timeout: float) -> bool:
        """Wait until the outbox is empty (sent, rejected or dropped); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self.pending():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.notify_all()
                self._cond.wait(min(left, 0.5))
        return True

    def send_once(self) -> bool:
        """Post everything in the outbox, oldest first, paced; False when the collector is unreachable
        (or the forwarder is stopping: what is left stays in the outbox)."""
        for p in self.pending():
            try:
                body = p.read_bytes()
            except FileNotFoundError:
                continue
            if not self._send_file(p, body):
                return False
            with self._cond:
                self._sizes.pop(p.name, None)
                self._cond.notify_all()
        return True

    def _send_file(self, p: Path, body: bytes) -> bool:
        """Post one outbox file (in pieces when it holds more than the bucket); True when it is
        done with (sent, or refused for good and moved aside), False to retry it later."""
        spans = _name_spans(p.name)
        # requests one a line (outputs.pilot_traces, a file cut short): posted as they are
        pieces: list[tuple[bytes, int]] | None = _lines(body) if b"\n" in body else None
        lines = pieces is not None
        if pieces is None and self.spans_per_second > 0 and spans > self.burst:
            pieces = _pieces(body, self.burst)
        if pieces is None:  # small, unpaced, or not an OTLP/JSON document: posted whole (the collector judges it)
            pieces = [(body, spans)]
        for k, (piece, n) in enumerate(pieces):
            if not self._pace(n):  # stopping
                self._keep_rest(p, pieces[k:], lines)
                return False
            ok = self._post(piece, p.name)
            if ok is None:
                self._refund(n)
                self._keep_rest(p, pieces[k:], lines)
                return False
            if not ok:
                self._reject(p)
                return True
            self.stats.sent_requests += 1
            self.stats.sent_spans += n
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
        return True

    def _pace(self, spans: int) -> bool:
        """Wait until ``spans`` may go without the mean rate passing spans_per_second; False when stopping.

        A piece larger than the bucket (a single spool's resource that cannot be split finer
        is never larger than one second's spans, but the unpaced fallback can be) waits for a
        full bucket and leaves it in debt, so the mean rate still holds.
        """
        if self.spans_per_second <= 0:
            return not self._stop
        waited = 0.0
        with self._cond:
            while not self._stop:
                now = time.monotonic()
                self._tokens = min(float(self.burst), self._tokens + (now - self._tokens_at) * self.spans_per_second)
                self._tokens_at = now
                need = min(spans, self.burst)
                if self._tokens >= need:
                    self._tokens -= spans
                    self.stats.paced_seconds += waited
                    return True
                wait = (need - self._tokens) / self.spans_per_second
                self._cond.wait(wait)  # new spools may wake us: the bucket is recomputed
                waited += time.monotonic() - now
            self.stats.paced_seconds += waited
            return False

    def _refund(self, spans: int) -> None:
        """A failed post sent nothing: its spans go back into the bucket."""
        with self._cond:
            self._tokens = min(float(self.burst), self._tokens + spans)

    def _keep_rest(self, p: Path, rest: list[tuple[bytes, int]], lines: bool = False) -> None:
        """After a partial send, the file holds only what is not sent yet (same place in the queue);
        ``lines``: its requests were one a line, and the rest stay so."""
        spans = _name_spans(p.name)
        left = sum(n for _, n in rest)
        if left == spans:
            return  # nothing of it sent
        if lines:
            body = b"\n".join(b for b, _ in rest)
        else:
            docs = [json.loads(b)["resourceSpans"] for b, _ in rest]
            body = json.dumps({"resourceSpans": [rs for d in docs for rs in d]}, separators=(",", ":")).encode()
        name = _OUTBOX_SPANS.sub(f"-{left}.json", p.name)
        with self._cond:
            if p.name not in self._sizes:  # dropped by the bounds meanwhile: nothing to keep
                return
            try:
                fd, tmp = tempfile.mkstemp(prefix=".tmp.", dir=self.outbox)
                with os.fdopen(fd, "wb") as f:
                    f.write(body)
                os.replace(tmp, self.outbox / name)
                if name != p.name:
                    p.unlink()
            except OSError as e:  # the whole file stays: its sent part is sent again (same ids)
                log.warning("cannot rewrite %s after a partial send: %s", p.name, e)
                return
            # renamed in its place in the queue (the bounds drop from its head)
            self._sizes = {
                (name if k == p.name else k): (len(body) if k == p.name else v) for k, v in self._sizes.items()
            }

    def _reject(self, p: Path) -> None:
        # A 4xx other than 408/429 will not change on retry (bad token, bad data): kept for a look.
        self.rejected_dir.mkdir(exist_ok=True)
        with contextlib.suppress(OSError):
            os.replace(p, self.rejected_dir / p.name)
        self._prune_rejected()
        self.stats.collector_rejected += 1

    def _post(self, body: bytes, name: str) -> bool | None:
        """True sent, False refused for good, None retry later."""
        req = urllib.request.Request(self.endpoint, data=body, headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                reply = r.read()
        except urllib.error.HTTPError as e:
            if e.code in (408, 429) or e.code >= 500:
                self.stats.failures += 1
                self._retry_after = _retry_after(e.headers.get("Retry-After") if e.headers else None)
                log.warning("collector answered %d for %s; retrying", e.code, name)
                return None
            self.errors.record(SOURCE, "collector_rejected", str(self.outbox / name), None, f"HTTP {e.code}")
            return False
        except (OSError, ValueError) as e:
            self.stats.failures += 1
            self._retry_after = 0.0
            log.warning("cannot send spans to %s: %s; retrying", self.endpoint, e)
            return None
        with contextlib.suppress(ValueError, AttributeError):
            partial = json.loads(reply or b"{}").get("partialSuccess") or {}
            if int(partial.get("rejectedSpans", 0)):
                log.warning("collector rejected %s spans of %s: %s", partial["rejectedSpans"], name, partial)
        return True

    def _prune_rejected(self) -> None:
        """Requests the collector refused are kept for a look, the newest max_rejected of them."""
        with contextlib.suppress(OSError):
            ours = (p for p in self.rejected_dir.iterdir() if _OUTBOX_NAME.fullmatch(p.name))
            old = sorted(ours, key=lambda p: _name_key(p.name))[: -self.max_rejected or None]
            for q in old:
                with contextlib.suppress(OSError):
                    q.unlink()

    def _run(self) -> None:
        delay = self.retry_min
        not_before = 0.0  # monotonic time before which nothing is posted (backoff)
        while True:
            with self._cond:
                while not self._stop:
                    wait = not_before - time.monotonic()
                    if wait > 0:  # a notification (a new spool) only wakes us: the backoff still holds
                        self._cond.wait(wait)
                        continue
                    self._enforce_bounds()
                    if self._sizes or self.pending():
                        break
                    self._cond.wait(5.0)  # woken by the sink; the timeout picks up files of a restart
                if self._stop:
                    return
            if self.send_once():
                delay = self.retry_min
                not_before = 0.0
            else:
                not_before = time.monotonic() + min(max(delay, self._retry_after), self.retry_max)
                delay = min(delay * 2, self.retry_max)


_IOV_MAX: Final = 1024  # parts a writev takes at most: Linux's IOV_MAX (and the BSDs')


def _write_all(fd: int, parts: list[bytes]) -> None:
    """Every byte of ``parts``, in order, into ``fd``: a writev each 1024 parts, so a request is
    never copied whole; a short write (rare on a regular file) writes the rest of its chunk."""
    for k in range(0, len(parts), _IOV_MAX):
        chunk = parts[k : k + _IOV_MAX]
        done = os.writev(fd, chunk)
        if done < sum(map(len, chunk)):
            rest = memoryview(b"".join(chunk))[done:]
            while rest:
                rest = rest[os.write(fd, rest) :]


# How each span of a pilot trace begins (outputs.pilot_traces, compiled or not): a pilot's text
# in a value has its quotes escaped, so only spans count.
_SPAN_START: Final = b'{"traceId":"'
_LINE_START: Final = b'{"resourceSpans":['  # and each request (outputs.pilot_traces' _REQUEST_HEAD)


def _lines(body: bytes) -> list[tuple[bytes, int]] | None:
    """A file of requests one a line (only outputs.pilot_traces writes them: JSON text escapes a
    newline), each with its spans; None when it is not one (a document on several lines)."""
    lines = [ln for ln in body.split(b"\n") if ln]
    if not all(ln.startswith(_LINE_START) for ln in lines):
        return None
    return [(ln, ln.count(_SPAN_START)) for ln in lines]


def _pieces(body: bytes, size: int) -> list[tuple[bytes, int]] | None:
    """An ExportTraceServiceRequest cut into requests of at most ``size`` spans each (a resource's
    spans split across pieces, each piece naming its resource and scope); None when not one."""
    try:
        doc = json.loads(body)
        pieces: list[tuple[bytes, int]] = []
        cur: list[dict[str, Any]] = []
        n = 0
        for rs in doc["resourceSpans"]:
            for ss in rs.get("scopeSpans", []):
                spans = ss.get("spans", [])
                i = 0
                while i < len(spans):
                    take = spans[i : i + size - n]
                    cur.append(
                        {
                            "resource": rs.get("resource", {}),
                            "scopeSpans": [{"scope": ss.get("scope", {}), "spans": take}],
                        }
                    )
                    n += len(take)
                    i += len(take)
                    if n >= size:
                        pieces.append((json.dumps({"resourceSpans": cur}, separators=(",", ":")).encode(), n))
                        cur, n = [], 0
        if cur:
            pieces.append((json.dumps({"resourceSpans": cur}, separators=(",", ":")).encode(), n))
    except (ValueError, RecursionError, KeyError, TypeError, AttributeError):
        return None
    return pieces or None


_OUTBOX_SPANS = re.compile(r"-[0-9]{1,9}\.json$")


def _name_time(name: str) -> int:
    m = _OUTBOX_NAME.fullmatch(name)
    return int(m[1]) if m else 0


def _name_key(name: str) -> tuple[int, str]:
    """Oldest first, whichever version named the file."""
    return _name_time(name), name


def _name_spans(name: str) -> int:
    m = _OUTBOX_NAME.fullmatch(name)
    return int(m[2]) if m else 0


def _retry_after(value: str | None) -> float:
    """Retry-After in seconds (the HTTP-date form is not used by the collector)."""
    with contextlib.suppress(TypeError, ValueError):
        return max(0.0, float(value))  # type: ignore[arg-type]
    return 0.0
