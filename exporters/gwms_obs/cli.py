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
    return 0


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
