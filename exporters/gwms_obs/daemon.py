"""The exporter daemon's composition root: ``gwms-obs export`` once its flags are read.

It wires one scan loop to its outputs: the ingest (sources → accounting), the
/metrics server, the OTLP push, the span forwarder with the pilot traces, the
exporter's own spans, and the signals that stop it. ``cli.py`` reads the
flags and the config file, checks them and locks the checkpoint; everything
that runs after that is here.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import native
from .config import ExportConfig, factory_pending
from .parse_errors import ParseErrors
from .settings import parse_listen

if TYPE_CHECKING:
    from .ingest.outlets import Outlets

log = logging.getLogger("gwms_obs")


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where spans go (export's and report --traces's flags): None falls back to the OTEL_* variables,
    a new outbox beside the checkpoint (else a temporary one), $GWMS_OBS_TRACES_TOKEN."""

    endpoint: str | None = None
    token_file: str | None = None
    outbox: str | None = None
    drain_seconds: float = 30.0

    def token(self) -> str | None:
        """The exporter's own credential for the collector: the token file, else $GWMS_OBS_TRACES_TOKEN."""
        if self.token_file:
            return Path(self.token_file).read_text().strip()
        return os.environ.get("GWMS_OBS_TRACES_TOKEN")


@dataclass(frozen=True, slots=True)
class Run:
    """How this run of the exporter goes: once or as a daemon, from a fresh checkpoint or not."""

    once: bool = False
    reset_checkpoint: bool = False
    workers: int = 1
    traces: Delivery = Delivery()


# While the factory's log dir is not there yet, look for it this often at least (seconds).
FACTORY_WAIT_POLL = 10.0
# Python's full collections walk every object the daemon keeps, the GIL held all along: 0.9-1.4 s
# each at 300,000 pilots, and a tick's garbage set one off every few ticks (/metrics stalled for as
# long; a third of the ticks' CPU). After a full scan, at most this often, the heap is collected once
# and frozen (gc.freeze): later collections walk only what was made since, and the next one here
# collects what the frozen part let go of in between.
HEAP_FREEZE_SECONDS = 3600.0


class Heap:
    """The daemon's long-lived objects frozen out of the collector after the full scans (HEAP_FREEZE_SECONDS)."""

    def __init__(self, every: float = HEAP_FREEZE_SECONDS) -> None:
        self.every = every
        self.frozen_at: float | None = None
        self.last_collect_seconds = 0.0

    def after_full_scan(self) -> bool:
        """Collect and freeze, if the last time is ``every`` ago (or never); True if it did."""
        now = time.monotonic()
        if self.frozen_at is not None and now - self.frozen_at < self.every:
            return False
        gc.unfreeze()  # the frozen objects are collected again, with the rest, once
        gc.collect()
        gc.freeze()
        self.frozen_at = time.monotonic()
        self.last_collect_seconds = self.frozen_at - now
        log.debug("heap: collected in %.2fs, %d objects frozen", self.last_collect_seconds, gc.get_freeze_count())
        return True

    def close(self) -> None:
        gc.unfreeze()


def run(cfg: ExportConfig, a: Run) -> int:
    """The exporter, once its configuration is checked and its checkpoint locked: 0, or what --once exits with."""
    from .ingest.checkpoint import CheckpointError
    from .outputs import self_trace
    from .outputs.http import listen
    from .outputs.otlp import otlp_configured, start_otlp
    from .outputs.prometheus import Exposition
    from .outputs.serve import ServingChild
    from .pipeline import Ingest

    errors = ParseErrors()  # the scans' and the forwarder's: one count of what was wrong, on /metrics
    try:
        forwarder = span_forwarder(a.traces, cfg.ingest.checkpoint, errors, cfg.trace_spans_per_second)
        token = a.traces.token()
    except OSError as e:
        log.error("span forwarder: %s", e)
        return 2
    # Before /metrics: its pilot histograms' exemplars name the traces built here.
    traces = pilot_traces(cfg, errors, forwarder) if forwarder is not None else None
    try:
        ingest = Ingest(
            dataclasses.replace(cfg.ingest, reset_checkpoint=a.reset_checkpoint, workers=a.workers),
            outlets=export_outlets(forwarder, traces),
            errors=errors,
        )
    except CheckpointError as e:  # refused rather than re-count: the message says what to do
        log.error("%s", e)
        return 2
    server = exposition = None
    if a.once:  # one scan serves no scrape: binding the port would only clash with the daemon's
        log.info("one scan of factory %s (--once: /metrics is not served)", cfg.ingest.factory_dir)
    else:
        stats = forwarder.stats if forwarder is not None else None
        # The ledger's families rendered once per change (the restored checkpoint's first), served as bytes.
        exposition = Exposition(ingest, stats, traces.factory if traces is not None else None)
        host, port = parse_listen(cfg.listen)
        try:
            sock = listen(host, port)  # here, so the port is ours across restarts of the serving process
        except OSError as e:  # in use, or a host name that does not resolve here
            log.error("cannot listen on %s: %s", cfg.listen, e.strerror or e)
            return 2
        # /metrics answered by a process of its own (a scan holds our GIL), from the renders published to it.
        server = ServingChild(exposition, sock)
        exposition.start()
        try:
            server.start()
        except OSError as e:
            log.error("cannot start the /metrics serving process: %s", e)
            server.close()
            exposition.stop()
            return 2
        log.info("serving /metrics on http://%s:%d/metrics, factory %s", host, port, cfg.ingest.factory_dir)
    log.info("readers: %s", native.describe())
    if forwarder is not None:
        forwarder.start()
    provider = start_otlp(ingest) if otlp_configured() else None
    own_spans = self_trace.configure(token)  # the scans as spans, when OTEL_* ask for traces
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    failed = False  # what --once exits with
    heap = Heap()
    waiting: str | None = None  # why the factory dir is not ready, while the daemon waits for it
    if not a.once and cfg.ingest.factory_dir and ingest.watch():
        log.info(
            "discovery: inotify; a full scan at start and every %gs, what changed read every %gs",
            cfg.ingest.full_scan_seconds,
            cfg.ingest.tick_seconds,
        )
    try:
        while not stop.is_set():
            # --once has checked the dir; the daemon looks before each scan (a factory not started yet)
            # (none on a frontend host without a factory: factory_dir = "")
            pending = None if a.once or not cfg.ingest.factory_dir else factory_pending(cfg.ingest.factory_dir)
            if pending:
                if pending != waiting:
                    log.warning(
                        "factory_dir: %s: waiting for the factory to create it (/metrics is served meanwhile)", pending
                    )
                waiting = pending
                stop.wait(min(cfg.interval, FACTORY_WAIT_POLL))
                continue
            if waiting:
                log.info("factory_dir %s is ready: scanning", cfg.ingest.factory_dir)
                waiting = None
            try:
                with self_trace.scan_span(ingest) as traced:
                    res = traced.result = ingest.scan()
                if res.failed:
                    failed = True  # counted and logged by the scan; the other sources went on
                if res.pilots:
                    by_source = ", ".join(f"{k} {n}" for k, n in res.by_source.items())  # StrEnum: str() is the value
                    log.info("scan: %d pilots (%s)", res.pilots, by_source)
            except Exception as e:  # one bad scan must not end the daemon; the next one retries
                failed = True
                log.error("scan failed: %s: %s", type(e).__name__, e)
                log.debug("scan failure", exc_info=True)  # the traceback, for bug reports
            if traces is not None:
                traces.flush()  # the scan's last pilots, in one request
            if exposition is not None and ingest.last_scan_full:
                # The scan's counts on /metrics now, not after the renderer's gap. A watched tick does
                # not wake it: its own look at the ledger renders within its gap, which bounds the share
                # of CPU renders take (a render per tick was 0.17 s a second at 56 entries).
                exposition.changed()
            if not a.once and ingest.last_scan_full:
                heap.after_full_scan()
            if a.once:
                break
            # Watching: a short tick reads what changed; scanning (configured, or a fallback): interval.
            stop.wait(cfg.ingest.tick_seconds if ingest.discovery is not None else cfg.interval)
    finally:
        heap.close()
        ingest.close()  # what the last ticks changed is saved
        if server is not None:
            server.close()
        if exposition is not None:
            exposition.stop()
        if provider is not None:
            provider.shutdown()
        if own_spans is not None:
            own_spans.shutdown()  # flushes the last scans' spans (bounded by the SDK's export timeout)
        if forwarder is not None:
            # What is not sent stays in the outbox for the next start.
            if not forwarder.drain(a.traces.drain_seconds if a.once else 5.0):
                log.warning("%d span spools not yet sent, kept in %s", len(forwarder.pending()), forwarder.outbox)
            forwarder.stop()
    return 1 if a.once and failed else 0


def export_outlets(forwarder: Any, traces: Any) -> Outlets:
    """Where the daemon's scans send what they count besides the ledger: the pilots' span spools to
    the forwarder, a trace per pilot, and those traces written before a checkpoint marks their
    pilots counted (a kill in between sends them again, rather than never)."""
    from .ingest.outlets import Outlets

    return Outlets(
        spools=forwarder,
        traces=traces,
        flush_traces=traces.flush if traces is not None else None,
        progress=True,
    )


def pilot_traces(cfg: ExportConfig, errors: ParseErrors, forwarder: Any) -> Any:
    """A trace per counted pilot into the forwarder's outbox (``pilot_traces = false``: none)."""
    if not cfg.pilot_traces:
        return None
    from .outputs.pilot_traces import PilotTraces, factory_name

    name = cfg.factory_name or factory_name(cfg.ingest.monitor, errors)
    log.info("a trace per counted pilot, factory %r in their ids", name)
    # A pilot the factory traced live (its trace ledger) gets its log spans inside that trace.
    traces = PilotTraces(
        forwarder,
        name,
        rules=cfg.ingest.rules,
        errors=errors,
        ledger=forwarder.ledger,
        own_spans=forwarder.own_spans,
        batch_spans=request_spans(forwarder),
    )
    return traces


def request_spans(forwarder: Any) -> int | None:
    """The most spans a pilot-trace request should hold: a paced forwarder's bucket, so it is sent whole."""
    return int(forwarder.burst) if forwarder.spans_per_second > 0 else None


def span_forwarder(
    a: Delivery, checkpoint: str | None, errors: ParseErrors, spans_per_second: float | None = None
) -> Any:
    """The SpoolForwarder for pilots' span spools and pilot traces, when a traces endpoint is configured."""
    import tempfile

    from .tracing.outbox import SPANS_PER_SECOND, SpoolForwarder, otlp_headers, traces_endpoint

    endpoint = a.endpoint or traces_endpoint()
    if not endpoint:
        return None
    token = a.token()
    if a.outbox:
        outbox = Path(a.outbox)
    elif checkpoint:
        outbox = Path(checkpoint + ".traces")  # survives restarts with the rest of the state
    else:
        outbox = Path(tempfile.mkdtemp(prefix="gwms-obs-traces-"))
    rate = SPANS_PER_SECOND if spans_per_second is None else spans_per_second
    fwd = SpoolForwarder(
        endpoint, outbox, errors, token=token, headers=otlp_headers(), checkpoint=checkpoint, spans_per_second=rate
    )
    paced = f"at most {rate:g} spans/s" if rate else "unpaced"
    log.info("forwarding pilots' span spools to %s (outbox %s, %s)", endpoint, outbox, paced)
    return fwd
