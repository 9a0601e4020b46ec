"""The ``gwms-obs`` command: export, report, inspect, simulate, check-config."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import __version__
from .config import ConfigError, ExportConfig, check, load, parse_listen
from .parse_errors import ParseErrors

log = logging.getLogger("gwms_obs")


def _time(s: str) -> float:
    """An epoch number, or an ISO 8601 date/time (UTC when no offset is given)."""
    try:
        return float(s)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {s!r} (use 2026-11-01, 2026-11-01T12:00+01:00 or an epoch)"
        ) from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def cmd_export(a: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry, start_http_server

    from .outputs.otlp import otlp_configured, start_otlp
    from .outputs.prometheus import FactoryCollector
    from .pipeline import Ingest

    try:
        cfg = load(a.config) if a.config else ExportConfig()
    except ConfigError as e:
        log.error("%s", e)
        return 2
    for k in ("factory_dir", "monitor_dir", "listen", "interval", "checkpoint", "settle_seconds", "lost_after_seconds"):
        v = getattr(a, k, None)
        if v is not None:
            setattr(cfg, k, v)
    problems = check(cfg)
    if problems:
        for p in problems:
            log.error("config: %s", p)
        return 2
    ingest = Ingest(cfg.ingest(), progress=True)
    forwarder = _spool_forwarder(a, cfg.checkpoint, ingest.errors)
    if forwarder is not None:
        ingest.spool_sink = forwarder
        forwarder.start()
    registry = CollectorRegistry()
    registry.register(FactoryCollector(ingest))
    host, port = parse_listen(cfg.listen)
    server, thread = start_http_server(port, addr=host, registry=registry)
    log.info("serving /metrics on http://%s:%d/metrics, factory %s", host, port, cfg.factory_dir)
    provider = start_otlp(ingest) if otlp_configured() else None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        while not stop.is_set():
            try:
                res = ingest.scan()
                if res.pilots:
                    log.info("scan: %d pilots (%s)", res.pilots, dict(res.by_source))
            except Exception:  # one bad scan must not end the daemon; the next one retries
                log.exception("scan failed")
            if a.once:
                break
            stop.wait(cfg.interval)
    finally:
        server.shutdown()
        thread.join(5)
        if provider is not None:
            provider.shutdown()
        if forwarder is not None:
            # What is not sent stays in the outbox for the next start.
            if not forwarder.drain(a.traces_drain_seconds if a.once else 5.0):
                log.warning("%d span spools not yet sent, kept in %s", len(forwarder.pending()), forwarder.outbox)
            forwarder.stop()
    return 0


def _spool_forwarder(a: argparse.Namespace, checkpoint: str | None, errors: ParseErrors) -> Any:
    """The SpoolForwarder for pilots' span spools, when a traces endpoint is configured."""
    import tempfile

    from .tracing.spool import SpoolForwarder, otlp_headers, traces_endpoint

    endpoint = a.traces_endpoint or traces_endpoint()
    if not endpoint:
        return None
    token = os.environ.get("GWMS_OBS_TRACES_TOKEN")
    if a.traces_token_file:
        token = Path(a.traces_token_file).read_text().strip()
    if a.traces_outbox:
        outbox = Path(a.traces_outbox)
    elif checkpoint:
        outbox = Path(checkpoint + ".traces")  # survives restarts with the rest of the state
    else:
        outbox = Path(tempfile.mkdtemp(prefix="gwms-obs-traces-"))
    log.info("forwarding pilots' span spools to %s (outbox %s)", endpoint, outbox)
    return SpoolForwarder(endpoint, outbox, errors, token=token, headers=otlp_headers())


def cmd_report(a: argparse.Namespace) -> int:
    from .outputs.report import Report
    from .pipeline import Ingest, IngestConfig

    rep = Report(since=a.since, until=a.until)
    ingest = Ingest(
        IngestConfig(
            factory_dir=a.factory_dir,
            monitor_dir=a.monitor_dir,
            settle_seconds=0.0,
            lost_after_seconds=a.lost_after_seconds,
        ),
        sink=rep.add,
        progress=True,
    )
    ingest.scan()
    text = {"table": rep.to_table, "csv": rep.to_csv, "json": rep.to_json}[a.format]()
    if a.output:
        Path(a.output).write_text(text)
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    if a.plot:
        rep.plot(a.plot)
    n = ingest.errors.total()
    if n:
        log.warning("%d pieces of input skipped as unreadable (see warnings above)", n)
    return 0


def cmd_inspect(a: argparse.Namespace) -> int:
    from .accounting.pilot import from_glidein
    from .sources.glidein_err import read_err
    from .sources.glidein_out import read_out

    errors = ParseErrors()
    path = a.file[:-4] + ".out" if a.file.endswith(".err") else a.file
    out = read_out(path, errors)
    if out is None:
        log.error("%s: cannot read", path)
        return 1
    err_path = path[:-4] + ".err" if path.endswith(".out") else None
    err = read_err(err_path, errors) if err_path and os.path.exists(err_path) else None
    acc = from_glidein(out, err)
    doc: dict[str, Any] = {
        "file": path,
        "entry": out.entry,
        "client": out.client,
        "cluster": out.cluster,
        "proc": out.proc,
        "uuid": out.uuid,
        "glidein_duration": out.glidein_duration,
        "validation_duration": out.validation_duration,
        "condor_started": out.condor_started,
        "condor_duration": out.condor_duration,
        "activations_claims": out.activations_claims,
        "cpus": acc.cpus if acc else out.cpus,
        "memory_mb": acc.memory_mb if acc else out.memory_mb,
        "gpus": acc.gpus if acc else 0,
        "stats_format": out.stats_format.value,
        "stats": {k: dataclasses.asdict(v) for k, v in out.stats.items()},
        "failure": out.failure,
        "jobs": [dataclasses.asdict(j) for j in err.jobs] if err and err.jobs is not None else None,
        "validation_scripts": [dataclasses.asdict(s) for s in err.scripts] if err else [],
    }
    if acc is not None:
        doc.update(
            {
                "outcome": acc.outcome.value,
                "accuracy": acc.partition.accuracy.value,
                "start": acc.start,
                "end": acc.end,
                "cpu_seconds": {k.value: v for k, v in acc.partition.cpu.items()},
                "gpu_seconds": {k.value: v for k, v in acc.partition.gpu.items()},
                "jobs_by_category": {k.value: v for k, v in acc.partition.jobs.items()},
            }
        )
    if errors.counts:
        doc["parse_errors"] = {f"{s}/{r}": n for (s, r), n in errors.counts.items()}
    print(json.dumps(doc, indent=2))
    return 0


def cmd_simulate(a: argparse.Namespace) -> int:
    from .simulate.factory import simulate

    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=a.pilots, unit="pilots", leave=False)
    summary = simulate(Path(a.out), a.pilots, a.seed, progress=(bar.update if bar else None))
    if bar:
        bar.close()
    print(f"wrote a simulated factory of {a.pilots} pilots to {a.out}")
    for line in summary.describe():
        print("  " + line)
    return 0


def cmd_traces(a: argparse.Namespace) -> int:
    import time

    from .tracing import conventions as C
    from .tracing import jaeger as J

    try:
        if a.trace_id:
            traces = [t for tid in a.trace_id for t in J.get_trace(a.jaeger, tid)]
        else:
            until = a.until if a.until is not None else time.time()
            since = a.since if a.since is not None else until - 86400
            services = a.service or [C.SERVICE_PILOT]
            traces = J.search(
                a.jaeger, services=services, entry=a.entry, client=a.client, start=since, end=until, limit=a.limit
            )
        rows = J.rows(traces)
        if a.format == "parquet":
            if not a.output:
                log.error("--format parquet needs --output")
                return 2
            J.to_parquet(rows, a.output)
            return 0
    except J.JaegerError as e:
        log.error("%s", e)
        return 1
    text = J.to_csv(rows) if a.format == "csv" else J.to_table(rows)
    if a.output:
        Path(a.output).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def cmd_check_config(a: argparse.Namespace) -> int:
    try:
        cfg = load(a.file)
    except ConfigError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    problems = check(cfg) if not a.syntax_only else []
    for p in problems:
        print(f"FAILED: {a.file}: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"SUCCESS: {a.file}")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gwms-obs", description="Observability for the GlideinWMS pilot factory.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    p.add_argument("--log-level", default=os.environ.get("GWMS_OBS_LOG_LEVEL", "INFO"))
    sub = p.add_subparsers(dest="cmd", required=True)

    e = sub.add_parser("export", help="follow the factory's files and serve /metrics (and OTLP)")
    e.add_argument("--config", help="TOML configuration file (flags override it)")
    e.add_argument("--factory-dir", help="the factory log dir (default /var/log/gwms-factory)")
    e.add_argument("--monitor-dir", help="entry monitoring dir (default <factory-dir>/monitor)")
    e.add_argument("--listen", help="HOST:PORT for /metrics (default 127.0.0.1:9822)")
    e.add_argument("--interval", type=float, help="seconds between scans (default 60)")
    e.add_argument("--checkpoint", help="state file; restarts neither re-count nor lose pilots")
    e.add_argument("--settle-seconds", type=float, help="age a .out must have before it is read (default 30)")
    e.add_argument("--lost-after-seconds", type=float, help="wait this long for a .out before a pilot is lost")
    e.add_argument("--once", action="store_true", help="one scan, then exit")
    e.add_argument(
        "--traces-endpoint",
        help="OTLP/HTTP traces URL for span spools found in .err files "
        "(default $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or $OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces)",
    )
    e.add_argument("--traces-token-file", help="bearer token for --traces-endpoint (default $GWMS_OBS_TRACES_TOKEN)")
    e.add_argument("--traces-outbox", help="directory of spools waiting to be sent (default <checkpoint>.traces)")
    e.add_argument("--traces-drain-seconds", type=float, default=30.0, help="with --once: wait this long for sends")
    e.set_defaults(func=cmd_export)

    r = sub.add_parser("report", help="one-shot accounting of a factory's logs")
    r.add_argument("--factory-dir", required=True)
    r.add_argument("--monitor-dir")
    r.add_argument("--since", type=_time, help="pilots that ended at or after (ISO 8601 or epoch)")
    r.add_argument("--until", type=_time, help="pilots that ended before")
    r.add_argument("--format", choices=("table", "csv", "json"), default="table")
    r.add_argument("--output", "-o", help="write here instead of stdout")
    r.add_argument("--plot", help="also draw the categories per entry into this PNG")
    r.add_argument("--lost-after-seconds", type=float, default=3600.0)
    r.set_defaults(func=cmd_report)

    i = sub.add_parser("inspect", help="one pilot (job.C.P.out, with its .err) as JSON")
    i.add_argument("file")
    i.set_defaults(func=cmd_inspect)

    s = sub.add_parser("simulate", help="write a simulated factory log tree")
    s.add_argument("--out", required=True)
    s.add_argument("--pilots", type=int, default=1000)
    s.add_argument("--seed", type=int, default=1)
    s.set_defaults(func=cmd_simulate)

    t = sub.add_parser("traces", help="pilots' spans from Jaeger, as a table, CSV or Parquet")
    t.add_argument("--jaeger", default=os.environ.get("GWMS_OBS_JAEGER_URL", "http://127.0.0.1:16686"),
                   help="Jaeger query base URL (default $GWMS_OBS_JAEGER_URL or http://127.0.0.1:16686)")  # fmt: skip
    t.add_argument("--entry", help="only traces with a span of this gwms.entry")
    t.add_argument("--client", help="only traces with a span of this gwms.client (frontend client)")
    t.add_argument("--service", action="append", help="Jaeger service (repeatable; default glidein)")
    t.add_argument("--since", type=_time, help="from (ISO 8601 or epoch; default 24 h ago)")
    t.add_argument("--until", type=_time, help="to (default now)")
    t.add_argument("--trace-id", action="append", help="these traces instead of a search (repeatable)")
    t.add_argument("--limit", type=int, default=100, help="traces per service (default 100)")
    t.add_argument("--format", choices=("table", "csv", "parquet"), default="table")
    t.add_argument("--output", "-o", help="write here instead of stdout (required for parquet)")
    t.set_defaults(func=cmd_traces)

    c = sub.add_parser("check-config", help="validate an exporter configuration file")
    c.add_argument("file")
    c.add_argument("--syntax-only", action="store_true", help="do not check that directories exist")
    c.set_defaults(func=cmd_check_config)
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    logging.basicConfig(level=a.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rc: int = a.func(a)
    return rc


if __name__ == "__main__":
    sys.exit(main())
