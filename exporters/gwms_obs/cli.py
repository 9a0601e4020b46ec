"""The ``gwms-obs`` command: export, report, inspect, simulate, traces, analyze, check-config, controller."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from . import __version__, native
from .catalogue import Category
from .config import ExportConfig, check, dir_problems, load
from .controller import cli as controller_cli
from .parse_errors import ParseErrors
from .settings import ConfigError

log = logging.getLogger("gwms_obs")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_level(s: str) -> str:
    if s.upper() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"invalid level {s!r} (choose from {', '.join(LOG_LEVELS)}, any case)")
    return s.upper()


def _number_of_seconds(s: str, *, positive: bool) -> float:
    """A finite number of seconds (> 0 or >= 0): nan or inf would make a scan loop spin or never end."""
    try:
        v = float(s)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and (v > 0 if positive else v >= 0)):
        bound = "> 0" if positive else ">= 0"
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds {bound}, got {s!r}")
    return v


def _seconds(s: str) -> float:
    return _number_of_seconds(s, positive=False)


def _positive_seconds(s: str) -> float:
    return _number_of_seconds(s, positive=True)


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {s!r}")
    return v


def _time(s: str) -> float:
    """An epoch number, or an ISO 8601 date/time (UTC when no offset is given)."""
    try:
        v = float(s)
    except ValueError:
        pass
    else:
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"not a time: {s!r}")
        return v
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a time: {s!r} (use 2026-11-01, 2026-11-01T12:00+01:00 or an epoch)"
        ) from None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def _end_time(s: str) -> float:
    """``now`` (this moment) or a time as :func:`_time` reads it."""
    return datetime.now(UTC).timestamp() if s == "now" else _time(s)


def _empty_window(a: argparse.Namespace) -> bool:
    """--since at or after --until selects nothing, surely a mistake: say so (and exit 2)."""
    if a.since is None or a.until is None or a.since < a.until:
        return False

    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).isoformat()

    log.error("--since %s is not before --until %s: nothing can be in range", iso(a.since), iso(a.until))
    return True


def cmd_export(a: argparse.Namespace) -> int:
    from .ingest.checkpoint import CheckpointError
    from .ingest.checkpoint_lock import acquire

    try:
        cfg = load(a.config) if a.config else ExportConfig()
    except ConfigError as e:
        log.error("%s", e)
        return 2
    for k in ("factory_dir", "monitor_dir", "listen", "interval", "checkpoint", "settle_seconds", "lost_after_seconds"):
        v = getattr(a, k, None)
        if v is not None:
            cfg.set(k, v)
    # The daemon waits for a factory dir not created yet; one scan (--once) of nothing is a mistake.
    problems = check(cfg, wait_for_factory=not a.once)
    if problems:
        for p in problems:
            log.error("config: %s", p)
        return 2
    try:  # before the checkpoint is read: one exporter per checkpoint, --once included
        lock = acquire(cfg.ingest.checkpoint) if cfg.ingest.checkpoint else None
    except CheckpointError as e:
        log.error("%s", e)
        return 2
    from .daemon import Run, run

    try:
        return run(cfg, Run(once=a.once, reset_checkpoint=a.reset_checkpoint, workers=a.workers, traces=_delivery(a)))
    finally:
        if lock is not None:
            lock.release()


def _delivery(a: argparse.Namespace) -> Any:
    """The span delivery flags export and report --traces share (_traces_delivery)."""
    from .daemon import Delivery

    return Delivery(a.traces_endpoint, a.traces_token_file, a.traces_outbox, a.traces_drain_seconds)


def _factory_window_ok(a: argparse.Namespace) -> bool:
    """report's and analyze's checks before any scan: the dirs, the window, matplotlib for --plot."""
    problems = dir_problems(a.factory_dir, a.monitor_dir, ("--factory-dir", "--monitor-dir"))
    for p in problems:
        log.error("%s", p)
    if problems or _empty_window(a):
        return False
    if a.plot:
        try:  # before the scan and the table, not after them
            import matplotlib  # noqa: F401
        except ImportError:
            log.error("--plot needs matplotlib, which is not installed: pip install 'gwms-obs[plot]'")
            return False
    return True


def cmd_import_rrd(a: argparse.Namespace) -> int:
    """GlideinWMS's RRD history (a factory's or a frontend's), before the cutover, as OpenMetrics
    for promtool's backfill."""
    from .outputs.rrd_history import RrdHistory

    monitor = Path(a.monitor_dir)
    if not monitor.is_dir():
        log.error("%s: not a directory (the factory's or the frontend's monitor dir)", monitor)
        return 2
    factory, frontend = any(monitor.glob("entry_*")), any(monitor.glob("group_*"))
    if not factory and not frontend:
        log.error("%s: neither a factory's monitor dir (entry_*) nor a frontend's (group_*)", monitor)
        return 2
    if shutil.which("rrdtool") is None:
        log.error("rrdtool not found: import-rrd reads the RRDs with `rrdtool dump` (Debian package rrdtool)")
        return 2
    h = RrdHistory(
        cutover=a.cutover,
        sites=dict(a.site or ()),
        frontend_clients=dict(a.frontend_client or ()),
        scrape={"job": a.job, "instance": a.instance},
    )
    if factory:
        h.add_tree(monitor)
    if frontend:
        h.add_frontend_tree(monitor)
    if a.output:
        with open(a.output, "w", encoding="utf-8") as out:
            h.write(out)
    else:
        h.write(sys.stdout)
    bad = h.errors.total()
    log.info("import-rrd: %d RRD files read, %d samples, %d bad pieces of input skipped", h.files, h.samples, bad)
    return 1 if h.files == 0 else 0


def cmd_report(a: argparse.Namespace) -> int:
    from .ingest.config import IngestConfig
    from .ingest.outlets import Outlets
    from .outputs.history import History
    from .outputs.report import Report
    from .pipeline import Ingest

    if not _factory_window_ok(a):
        return 2
    if a.format == "openmetrics" and a.plot:
        log.error("--plot draws the report's table; with --format openmetrics, run report again without it")
        return 2
    if a.pilots and (a.format == "openmetrics" or a.plot):
        log.error("--pilots lists the pilots of one cell as a table, csv or json: without --plot or openmetrics")
        return 2
    if a.compare_glideinwms and (a.format not in ("table", "json") or a.plot or a.pilots or a.traces):
        log.error("--compare-glideinwms is a table or json of its own: without --plot, --pilots or --traces")
        return 2
    if a.compare_glideinwms:
        return _compare_glideinwms(a)
    rep = Report(since=a.since, until=a.until, cell=a.pilots)
    history = History(step=a.step, since=a.since, until=a.until) if a.format == "openmetrics" else None
    errors = ParseErrors()  # the scan's and the traces' forwarder's
    sender = _report_traces(a, errors, rep) if a.traces else None
    if a.traces and sender is None:
        return 2
    ingest = Ingest(
        IngestConfig.one_shot(a.factory_dir, a.monitor_dir, a.lost_after_seconds, a.workers),
        outlets=Outlets(
            accounts=history.add if history else rep.add,
            traces=sender[2] if sender is not None else None,
            factory_log=history.add_factory_log if history else rep.add_factory_log,
            holds=rep.health.add_hold,
            times=history.add_times if history else rep.health.add_times,
            progress=True,
        ),
        errors=errors,
    )
    res = ingest.scan()
    traced = _send_report_traces(a, sender[0], sender[1]) if sender is not None else True
    if history:
        text = history.to_openmetrics()
    elif a.pilots:
        factory = _factory_name(a, a.factory_dir, ingest.errors)
        text = {"table": rep.pilots_to_table, "csv": rep.pilots_to_csv, "json": rep.pilots_to_json}[a.format](factory)
    else:
        text = {"table": rep.to_table, "csv": rep.to_csv, "json": rep.to_json}[a.format]()
    rc = _deliver(a, text, rep.plot, rep.plot_problem, ingest.errors.total(), res.failed, "report")
    return rc or (0 if traced else 1)  # traces left in the outbox: said above, and not a success


def _compare_glideinwms(a: argparse.Namespace) -> int:
    """``report --compare-glideinwms``: per entry, GlideinWMS's completed_jobs numbers beside ours."""
    from .ingest.config import IngestConfig
    from .ingest.outlets import Outlets
    from .outputs.compare_glideinwms import Comparison
    from .pipeline import Ingest

    cmp = Comparison(since=a.since, until=a.until)
    errors = ParseErrors()
    ingest = Ingest(
        IngestConfig.one_shot(a.factory_dir, a.monitor_dir, a.lost_after_seconds, a.workers),
        outlets=Outlets(accounts=cmp.add, progress=True),
        errors=errors,
    )
    res = ingest.scan()
    cmp.add_factory(a.factory_dir, errors)
    monitor = Path(a.monitor_dir or os.path.join(a.factory_dir, "monitor"))
    if any(monitor.glob("entry_*/frontend_*/Log_Completed.rrd")):
        if shutil.which("rrdtool") is None:
            log.warning("%s has Log_Completed RRDs, but rrdtool (Debian package rrdtool) is not installed", monitor)
        else:
            cmp.add_rrd_tree(monitor, errors)
    text = cmp.to_json() if a.format == "json" else cmp.to_table()
    return _deliver(a, text, lambda _p: True, lambda: None, errors.total(), res.failed, "comparison")


def _report_traces(a: argparse.Namespace, errors: ParseErrors, rep: Any) -> tuple[Any, Any, Any] | None:
    """``report --traces``: a trace per pilot that ended in the window, built as export builds it
    (the same ids: sending a window again, or one the daemon sent, adds nothing to Jaeger).
    Returns the forwarder, the pilot traces, and the scan's trace outlet (the window's pilots to them)."""
    from .daemon import request_spans, span_forwarder
    from .outputs.pilot_traces import PilotTraces

    try:
        forwarder = span_forwarder(_delivery(a), None, errors, a.trace_spans_per_second)
    except OSError as e:
        log.error("span forwarder: %s", e)
        return None
    if forwarder is None:
        log.error(
            "--traces needs --traces-endpoint, $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        return None
    name = _factory_name(a, a.factory_dir, errors)
    traces = PilotTraces(
        forwarder,
        name,
        errors=errors,
        ledger=forwarder.ledger,
        own_spans=forwarder.own_spans,
        batch_spans=request_spans(forwarder),
    )

    def in_window(acc: Any, facts: Any) -> None:
        if rep.wants(acc):
            traces(acc, facts)

    forwarder.start()  # sends while the scan reads: the outbox is written a batch at a time
    log.info("a trace per pilot of the window, factory %r in their ids", name)
    return forwarder, traces, in_window


def _send_report_traces(a: argparse.Namespace, forwarder: Any, traces: Any) -> bool:
    """The last batch into the outbox, then wait (at most --traces-drain-seconds) for the collector."""
    traces.flush()
    try:
        sent = forwarder.drain(a.traces_drain_seconds)
    finally:
        forwarder.stop()
    st = forwarder.stats
    log.info("pilot traces: %d built (%d spans), %d spans sent", traces.built, traces.spans, st.sent_spans)
    if not sent:
        log.error(
            "%d requests not sent within %gs, kept in %s: run again with --traces-outbox %s to send them",
            len(forwarder.pending()), a.traces_drain_seconds, forwarder.outbox, forwarder.outbox,
        )  # fmt: skip
    return bool(sent)


def _deliver(
    a: argparse.Namespace,
    text: str,
    plot: Callable[[str], bool],
    plot_problem: Callable[[], str | None],
    skipped: int,
    failed: Sequence[str],
    what: str,
) -> int:
    """report's and analyze's ending: the text to --output or stdout, the --plot, what was skipped or failed."""
    try:
        if a.output:
            Path(a.output).write_text(text)
        else:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
        drawn = plot(a.plot) if a.plot else True
    except BrokenPipeError:
        raise  # `| head`: main() handles it
    except OSError as e:
        log.error("cannot write %s: %s", e.filename or a.output or a.plot, e.strerror or e)
        return 1
    if not drawn:
        log.warning("%s not written: nothing to plot (%s)", a.plot, plot_problem())
    if skipped:
        log.warning("%d pieces of input skipped as unreadable (see warnings above)", skipped)
    if failed:
        log.error("incomplete %s: reading %s failed (see errors above)", what, ", ".join(sorted(set(failed))))
        return 1
    return 0


def cmd_inspect(a: argparse.Namespace) -> int:
    from .accounting.pilot import from_glidein
    from .sources.glidein_err import read_err
    from .sources.glidein_out import read_out

    errors = ParseErrors()
    path = a.file[:-4] + ".out" if a.file.endswith(".err") else a.file
    if a.config:
        try:  # its factory_name and monitor_dir name the pilot's trace
            load(a.config)
        except ConfigError as e:
            log.error("%s", e)
            return 2
    try:  # one clear line here, rather than read_out's parse-error warning and a vague error
        with open(path, "rb"):
            pass
    except OSError as e:
        log.error("%s: cannot read: %s", path, e.strerror or e)
        return 1
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
    if acc is not None:
        doc.update(_trace_links(a, path, out.entry, out.cluster, out.proc, acc.start, errors))
    if errors.counts:
        doc["parse_errors"] = {f"{s}/{r}": n for (s, r), n in errors.counts.items()}
    print(json.dumps(doc, indent=2))
    return 0


_JOB_FILE = re.compile(r"^job\.([0-9]{1,12})\.([0-9]{1,9})\.out$")


def _trace_links(
    a: argparse.Namespace, path: str, entry: str | None, cluster: int | None, proc: int | None, start: float,
    errors: ParseErrors,
) -> dict[str, Any]:  # fmt: skip
    """inspect's pilot_trace_id, Jaeger link and pilot page link, with the names export puts in the id:
    the entry and cluster.proc of the file's place (entry_NAME/job.C.P.out), the factory's name."""
    from .outputs.pilot_traces import pilot_trace_id
    from .sources.descript import entry_from_dir

    m = _JOB_FILE.match(os.path.basename(path))
    if m:
        cluster, proc = int(m.group(1)), int(m.group(2))
    entry = entry_from_dir(os.path.dirname(os.path.abspath(path))) or entry
    if not entry or cluster is None or proc is None:
        return {"trace_id": None}
    factory = _factory_name(a, _factory_dir_of(path), errors)
    tid = pilot_trace_id(factory, entry, cluster, proc, start)
    jaeger = a.jaeger_url.rstrip("/")
    doc: dict[str, Any] = {"factory_name": factory, "trace_id": tid, "jaeger_link": f"{jaeger}/trace/{tid}"}
    if a.controller_url:
        doc["pilot_page"] = f"{a.controller_url.rstrip('/')}/pilots/{tid}"
    return doc


def _factory_dir_of(path: str) -> str | None:
    """FACTORY of FACTORY/client/user_*/glidein_*/entry_*/job.C.P.out, else None."""
    parts = Path(os.path.abspath(path)).parents
    return str(parts[4]) if len(parts) > 4 and parts[3].name == "client" else None


def _factory_name(a: argparse.Namespace, factory_dir: str | None, errors: ParseErrors) -> str:
    """The factory's name in pilot trace ids, as export gets it: --factory-name, the --config's
    factory_name, else monitor/descript.xml's FactoryName (--monitor-dir, the config's, <factory>/monitor),
    else this host's name."""
    from .outputs.pilot_traces import factory_name

    if a.factory_name:
        return str(a.factory_name)
    cfg = load(a.config) if getattr(a, "config", None) else None
    if cfg is not None and cfg.factory_name:
        return cfg.factory_name
    monitor = getattr(a, "monitor_dir", None) or (cfg.ingest.monitor_dir if cfg is not None else None)
    if monitor is None:
        where = (cfg.ingest.factory_dir if cfg is not None else None) or factory_dir
        monitor = os.path.join(where, "monitor") if where else ""
    return factory_name(monitor, errors)


def cmd_simulate(a: argparse.Namespace) -> int:
    from .simulate.factory import simulate

    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=a.pilots, unit="pilots", leave=False)
    from .simulate.scenario import DEFAULT_ENTRIES, fleet

    entries = fleet(a.entries, anomalies=a.anomalies) if a.entries else DEFAULT_ENTRIES
    summary = simulate(
        Path(a.out),
        a.pilots,
        a.seed,
        end=a.end,
        entries=entries,
        anomalies=a.anomalies,
        progress=(bar.update if bar else None),
    )
    if bar:
        bar.close()
    print(f"wrote a simulated factory of {a.pilots} pilots on {len(summary.by_entry)} entries to {a.out}")
    lines = summary.describe()
    if len(entries) > 20:  # a fleet: the totals, not a line per entry (and the labels' line)
        sites = f"{len(entries)} entries on {len({e.site for e in entries})} sites"
        lines = [*lines[:2], sites, *lines[2 + len(summary.by_entry) :]]
    for line in lines:
        print("  " + line)
    return 0


def cmd_traces(a: argparse.Namespace) -> int:
    import time

    from .tracing import conventions as C
    from .tracing import jaeger as J

    if _empty_window(a):
        return 2
    # Two factories may share a Jaeger (and entry names): the factory's traces only, named as export
    # names them, when given one (--factory-name, or the exporter's --config); else every factory's.
    try:
        factory = _factory_name(a, None, ParseErrors()) if a.factory_name or a.config else None
    except ConfigError as e:
        log.error("%s", e)
        return 2
    try:
        if a.trace_id:
            traces = [t for tid in a.trace_id for t in J.get_trace(a.jaeger, tid)]
        else:
            until = a.until if a.until is not None else time.time()
            since = a.since if a.since is not None else until - 86400
            services = a.service or [C.SERVICE_PILOT]
            traces = J.search(
                a.jaeger, services=services, factory=factory, entry=a.entry, client=a.client, start=since,
                end=until, limit=a.limit,
            )  # fmt: skip
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


def _http_url(s: str) -> str:
    """An http(s) URL with a host (Jaeger's query base)."""
    from urllib.parse import urlsplit

    u = urlsplit(s)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise argparse.ArgumentTypeError(f"expected an http(s) URL such as http://127.0.0.1:16686, got {s!r}")
    return s


def cmd_analyze(a: argparse.Namespace) -> int:
    from .analysis import render
    from .analysis.collect import collect
    from .analysis.result import analyze
    from .tracing.jaeger import JaegerError

    if not _factory_window_ok(a):
        return 2
    factory = None
    if a.jaeger:  # Jaeger's pilots of this factory only, named as export names its traces
        try:
            factory = _factory_name(a, a.factory_dir, ParseErrors())
        except ConfigError as e:
            log.error("%s", e)
            return 2
        log.info("reading the pilots of factory %r from Jaeger (gwms.factory; --factory-name to change)", factory)
    try:
        data, ingest, res = collect(
            a.factory_dir,
            a.monitor_dir,
            since=a.since,
            until=a.until,
            jaeger=a.jaeger,
            jaeger_limit=a.limit,
            factory=factory,
            lost_after_seconds=a.lost_after_seconds,
            progress=True,
            workers=a.workers,
        )
    except JaegerError as e:
        log.error("cannot read Jaeger: %s", e)
        return 1
    an = analyze(data)
    text = {"table": render.to_table, "csv": render.to_csv, "json": render.to_json}[a.format](an)
    return _deliver(
        a,
        text,
        lambda path: render.plot(an, path),
        lambda: render.plot_problem(an),
        ingest.errors.total(),
        res.failed,
        "analysis",
    )


def cmd_check_config(a: argparse.Namespace) -> int:
    try:
        cfg = load(a.file)
    except ConfigError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    problems = check(cfg, filesystem=not a.syntax_only)
    for p in problems:
        print(f"FAILED: {a.file}: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"SUCCESS: {a.file}")
    return 0


def _factory_window(
    p: argparse.ArgumentParser,
    factory_help: str,
    format_help: str,
    plot_help: str,
    formats: tuple[str, ...] = ("table", "csv", "json"),
) -> None:
    """The arguments report and analyze share: the factory, the pilots' time window, the outputs."""
    p.add_argument("--factory-dir", required=True, help=factory_help)
    p.add_argument("--monitor-dir", help="entry monitoring dir, for site names (default <factory-dir>/monitor)")
    p.add_argument("--since", type=_time, help="pilots that ended at or after (ISO 8601 or epoch)")
    p.add_argument("--until", type=_time, help="pilots that ended before (ISO 8601 or epoch)")
    p.add_argument("--format", choices=formats, default="table", help=format_help)
    p.add_argument("--output", "-o", help="write here instead of stdout")
    p.add_argument("--plot", help=plot_help)
    p.add_argument(
        "--lost-after-seconds",
        type=_seconds,
        default=3600.0,
        help="a pilot with no .out this long after it ended is lost (default 3600)",
    )
    p.add_argument(
        "--workers",
        type=_positive_int,
        help="processes that read the pilots' files of a large tree, >= 1 "
        "(default: the cores this process may use, at most 4; the numbers are the same with any)",
    )


def _traces_delivery(p: argparse.ArgumentParser, *, drain: float) -> None:
    """Where export and report --traces send spans, with what credential, through which outbox."""
    p.add_argument(
        "--traces-endpoint",
        help="OTLP/HTTP traces URL for span spools found in .err files and pilot traces "
        "(default $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, or $OTEL_EXPORTER_OTLP_ENDPOINT/v1/traces)",
    )
    p.add_argument("--traces-token-file", help="bearer token for --traces-endpoint (default $GWMS_OBS_TRACES_TOKEN)")
    p.add_argument(
        "--traces-outbox", help="directory of spans waiting to be sent (default <checkpoint>.traces, else a new one)"
    )
    p.add_argument(
        "--traces-drain-seconds",
        type=_seconds,
        default=drain,
        help=f"one-shot runs: wait at most this long for the collector to take what was queued (default {drain:g})",
    )


def _trace_names(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--factory-name",
        help="the factory's name in pilot trace ids, as export's factory_name "
        "(default: monitor/descript.xml's FactoryName, else this host's name)",
    )


# The prometheus role's exporter job and target (tests/test_import_rrd.py holds them equal).
SCRAPE_JOB, SCRAPE_INSTANCE = "gwms-obs", "localhost:9822"


def _entry_site(s: str) -> tuple[str, str]:
    """ENTRY=SITE, for import-rrd."""
    entry, sep, site = s.partition("=")
    if not sep or not entry:
        raise argparse.ArgumentTypeError(f"expected ENTRY=SITE, got {s!r}")
    return entry, site


def _group_client(s: str) -> tuple[str, str]:
    """GROUP=CLIENT, for import-rrd on a frontend's tree."""
    group, sep, client = s.partition("=")
    if not sep or not group or not client:
        raise argparse.ArgumentTypeError(f"expected GROUP=CLIENT, got {s!r}")
    return group, client


def _cell(s: str) -> tuple[str, Category]:
    """ENTRY:CATEGORY, one cell of report's table."""
    entry, sep, cat = s.rpartition(":")
    if not sep or not entry:
        raise argparse.ArgumentTypeError(f"expected ENTRY:CATEGORY, got {s!r}")
    try:
        return entry, Category(cat)
    except ValueError:
        raise argparse.ArgumentTypeError(f"category {cat!r}: one of {', '.join(c.value for c in Category)}") from None


def _sub(sub: Any, name: str, help: str, example: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = sub.add_parser(
        name,
        help=help,
        description=help[0].upper() + help[1:] + ".",
        epilog="example:\n  " + example,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return p


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gwms-obs", description="Observability for the GlideinWMS pilot factory.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__} (readers: {native.describe()})")
    # No default here: main() reads $GWMS_OBS_LOG_LEVEL only when the flag is absent, and names it when it is bad.
    p.add_argument(
        "--log-level",
        type=_log_level,
        help=f"one of {', '.join(LOG_LEVELS)}, any case (default $GWMS_OBS_LOG_LEVEL or INFO)",
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    e = _sub(
        sub,
        "export",
        "follow the factory's files and serve /metrics (and OTLP)",
        "gwms-obs export --factory-dir /var/log/gwms-factory --checkpoint /var/lib/gwms-obs/checkpoint.json",
    )
    e.add_argument("--config", help="TOML configuration file (flags override it)")
    e.add_argument(
        "--factory-dir",
        help="the factory log dir, with client/ and server/ (default /var/log/gwms-factory); "
        "until the factory creates it, export waits (--once refuses)",
    )
    e.add_argument("--monitor-dir", help="entry monitoring dir (default <factory-dir>/monitor)")
    e.add_argument("--listen", help="HOST:PORT for /metrics (default 127.0.0.1:9822)")
    e.add_argument("--interval", type=_positive_seconds, help="seconds between scans, > 0 (default 60)")
    e.add_argument("--checkpoint", help="state file; restarts neither re-count nor lose pilots")
    e.add_argument(
        "--reset-checkpoint",
        action="store_true",
        help="ignore the checkpoint (another factory's, corrupt, old) and overwrite it: counts start over",
    )
    e.add_argument("--settle-seconds", type=_seconds, help="age a .out must have before it is read (default 30)")
    e.add_argument(
        "--lost-after-seconds", type=_seconds, help="wait this long for a .out before a pilot is lost (default 3600)"
    )
    e.add_argument(
        "--once",
        action="store_true",
        help="one scan, then exit, serving no /metrics (1 if the scan or any source in it failed)",
    )
    _traces_delivery(e, drain=30.0)
    e.add_argument(
        "--workers",
        type=_positive_int,
        default=1,
        help="processes that read the pilots' files of a backfill (a first scan of thousands), >= 1 "
        "(default 1: the factory's host keeps its cores; the numbers are the same with any)",
    )
    e.set_defaults(func=cmd_export)

    r = _sub(
        sub,
        "report",
        "one-shot accounting of a factory's logs",
        "gwms-obs report --factory-dir /var/log/gwms-factory --since 2026-11-01 --format csv",
    )
    _factory_window(
        r,
        "the factory log dir, with client/ and server/",
        "table: hours and shares by entry; csv: tidy seconds per entry, client, category; json: with pilot counts; "
        "openmetrics: the exporter's counters every --step, to backfill with promtool tsdb create-blocks-from "
        "openmetrics (docs/scale-out.md)",
        "also draw the categories per entry into this PNG (needs gwms-obs[plot])",
        formats=("table", "csv", "json", "openmetrics"),
    )
    r.add_argument(
        "--step",
        type=_positive_seconds,
        default=300.0,
        help="with --format openmetrics: seconds between samples (default 300)",
    )
    r.add_argument(
        "--pilots",
        type=_cell,
        metavar="ENTRY:CATEGORY",
        help="list the pilots behind one cell of the table (their cluster.proc, seconds in CATEGORY, outcome and "
        f"trace id) instead of the table; CATEGORY one of {', '.join(c.value for c in Category)}",
    )
    r.add_argument(
        "--compare-glideinwms",
        action="store_true",
        help="per entry, GlideinWMS's own numbers for the window (its completed_jobs lines: validation, idle, "
        "nosuccess and badput waste, goodput, terminated) beside ours, with the documented reason for each "
        "difference (docs/accounting.md); --format table or json",
    )
    _trace_names(r)
    r.add_argument(
        "--traces",
        action="store_true",
        help="also send a trace per pilot that ended in the window to the collector, as export builds them "
        "(the same ids: a window sent twice, or one the daemon sent, adds nothing)",
    )
    _traces_delivery(r, drain=300.0)
    r.add_argument(
        "--trace-spans-per-second",
        type=_seconds,
        default=None,
        help="with --traces: at most this many spans a second on average, so a backfill does not flood Jaeger "
        "(default 300; 0: unpaced)",
    )
    r.set_defaults(func=cmd_report)

    ir = _sub(
        sub,
        "import-rrd",
        "a factory's or a VO frontend's GlideinWMS RRD history, before a cutover, as OpenMetrics for promtool's "
        "backfill",
        "gwms-obs import-rrd /var/lib/gwms-factory/web-area/monitor --cutover 2026-11-01T00:00 -o rrd.om\n"
        "  promtool tsdb create-blocks-from openmetrics --max-block-duration=4374h rrd.om /var/lib/prometheus/data\n"
        "gwms-obs import-rrd /var/lib/gwms-frontend/web-area/monitor --cutover 2026-11-01T00:00 -o frontend-rrd.om",
    )
    ir.add_argument(
        "monitor_dir",
        help="a factory's monitor dir (entry_*/frontend_*/*.rrd) or a frontend's (group_*/*/Status_Attributes.rrd); "
        "which one is told by its entry_* or group_* subdirectories",
    )
    ir.add_argument(
        "--cutover",
        type=_time,
        required=True,
        help="no sample at or after this instant (ISO 8601 or epoch): when the live exporter's data begins",
    )
    ir.add_argument(
        "--site",
        type=_entry_site,
        action="append",
        metavar="ENTRY=SITE",
        help="the site label of an entry's series (repeatable; default: its GLIDEIN_Site in the monitor dir's "
        "descript.xml files, as the exporter reads it, else unknown)",
    )
    ir.add_argument(
        "--frontend-client",
        type=_group_client,
        action="append",
        metavar="GROUP=CLIENT",
        help="a frontend group's client label, the name the factory labels its requests with (repeatable; "
        "default: <FrontendName of the monitor dir's descript.xml>.<group>, as export's frontend source names it; "
        "give the same as export's [frontend_clients])",
    )
    ir.add_argument(
        "--job",
        default=SCRAPE_JOB,
        help=f"the job label Prometheus gives the live exporter's series (default {SCRAPE_JOB}, the prometheus "
        "role's prometheus_exporter_job; empty: none): the same labels make imported and live data one series",
    )
    ir.add_argument(
        "--instance",
        default=SCRAPE_INSTANCE,
        help=f"the instance label, the exporter's target as Prometheus scrapes it (default {SCRAPE_INSTANCE}, "
        "the prometheus role's prometheus_exporter_targets; empty: none)",
    )
    ir.add_argument("--output", "-o", help="write here instead of stdout")
    ir.set_defaults(func=cmd_import_rrd)

    i = _sub(
        sub,
        "inspect",
        "one pilot (job.C.P.out, with its .err) as JSON",
        "gwms-obs inspect /var/log/gwms-factory/client/user_fe/glidein_gfactory_instance/entry_x/job.123.0.out",
    )
    i.add_argument("file", help="the pilot's .out (or .err) file")
    _trace_names(i)
    i.add_argument(
        "--config", help="the exporter's TOML configuration, for its factory_name and monitor_dir (flags override it)"
    )
    i.add_argument("--monitor-dir", help="entry monitoring dir, for the factory's name (default <factory-dir>/monitor)")
    i.add_argument(
        "--jaeger-url",
        type=_http_url,
        default=os.environ.get("GWMS_OBS_JAEGER_URL", "http://127.0.0.1:16686"),
        help="Jaeger UI base URL of the trace link (default $GWMS_OBS_JAEGER_URL or http://127.0.0.1:16686)",
    )
    i.add_argument(
        "--controller-url",
        type=_http_url,
        default=os.environ.get("GWMS_OBS_CONTROLLER_URL") or None,
        help="the controller, for the pilot page's link (default $GWMS_OBS_CONTROLLER_URL; none: no link)",
    )
    i.set_defaults(func=cmd_inspect)

    s = _sub(
        sub,
        "simulate",
        "write a simulated factory log tree",
        "gwms-obs simulate --out /tmp/factory --pilots 1000 --seed 1",
    )
    s.add_argument("--out", required=True, help="directory to write the factory into")
    s.add_argument("--pilots", type=_positive_int, default=1000, help="how many pilots (default 1000)")
    s.add_argument("--seed", type=int, default=1, help="random seed: the same seed writes the same tree (default 1)")
    s.add_argument(
        "--entries",
        type=_positive_int,
        help="a fleet of N entries (5 per site) behaving like the 7 default ones in turn, to see the"
        " dashboards at a large factory's scale (default: the 7 entries, each its own kind of trouble)",
    )
    s.add_argument(
        "--anomalies",
        action="store_true",
        help="add entries with labelled anomalies (a slow validation script, resource-hog jobs, a site drifting"
        " worse) and write their labels, black holes included, to <out>/anomalies.json; with --entries,"
        " every tenth entry or so carries each",
    )
    s.add_argument(
        "--end",
        type=_end_time,
        help="the snapshot's time: `now`, an epoch or an ISO 8601 time; the files end there, as a factory"
        " watched live since then (default: a fixed day in June 2026, so the same seed writes the same tree)",
    )
    s.set_defaults(func=cmd_simulate)

    t = _sub(
        sub,
        "traces",
        "pilots' spans from Jaeger, as a table, CSV or Parquet",
        "gwms-obs traces --jaeger http://127.0.0.1:16686 --entry CMSHTPC_T2_US_Nebraska_red --format csv -o t.csv",
    )
    t.add_argument("--jaeger", default=os.environ.get("GWMS_OBS_JAEGER_URL", "http://127.0.0.1:16686"),
                   help="Jaeger query base URL (default $GWMS_OBS_JAEGER_URL or http://127.0.0.1:16686)")  # fmt: skip
    t.add_argument(
        "--factory-name",
        help="only this factory's pilots (gwms.factory, export's factory_name; default: every factory's, "
        "or the --config's)",
    )
    t.add_argument(
        "--config",
        help="the exporter's TOML configuration: only its factory's pilots (its factory_name, else its "
        "monitor dir's FactoryName, as export names its traces)",
    )
    t.add_argument("--entry", help="only traces with a span of this gwms.entry")
    t.add_argument("--client", help="only traces with a span of this gwms.client (frontend client)")
    t.add_argument("--service", action="append", help="Jaeger service (repeatable; default glidein)")
    t.add_argument("--since", type=_time, help="from (ISO 8601 or epoch; default 24 h ago)")
    t.add_argument("--until", type=_time, help="to (default now)")
    t.add_argument("--trace-id", action="append", help="these traces instead of a search (repeatable)")
    t.add_argument("--limit", type=_positive_int, default=100, help="traces per service (default 100)")
    t.add_argument(
        "--format",
        choices=("table", "csv", "parquet"),
        default="table",
        help="table for people, CSV, or Parquet (needs pyarrow and --output)",
    )
    t.add_argument("--output", "-o", help="write here instead of stdout (required for parquet)")
    t.set_defaults(func=cmd_traces)

    an = _sub(
        sub,
        "analyze",
        "validation time per entry, phase and script from the pilots' spans, outliers, and ranked actions",
        "gwms-obs analyze --factory-dir /var/log/gwms-factory --jaeger http://127.0.0.1:16686 --plot actions.png",
    )
    _factory_window(
        an,
        "the factory log dir (accounting; spools in .err)",
        "table: actions, durations, flagged pilots; csv: one row per entry and phase or script; json: all",
        "also draw the top actions into this PNG (needs gwms-obs[plot])",
    )
    an.add_argument("--jaeger", type=_http_url, help="also read the pilots' spans from this Jaeger query base URL")
    an.add_argument(
        "--limit", type=_positive_int, default=200, help="with --jaeger: traces to fetch per entry (default 200)"
    )
    _trace_names(an)  # with --jaeger: this factory's traces only (another may share the Jaeger)
    an.add_argument(
        "--config", help="the exporter's TOML configuration, for its factory_name (--factory-name overrides it)"
    )
    an.set_defaults(func=cmd_analyze)

    c = _sub(
        sub,
        "check-config",
        "validate an exporter configuration file",
        "gwms-obs check-config /etc/gwms-obs/exporter.toml",
    )
    c.add_argument("file", help="the TOML configuration file")
    c.add_argument(
        "--syntax-only",
        action="store_true",
        help="check keys, types and values, but not the directories and files they name",
    )
    c.set_defaults(func=cmd_check_config)

    controller_cli.add_parser(sub, _sub)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    a = p.parse_args(argv)
    level = a.log_level
    if level is None:
        try:
            level = _log_level(os.environ.get("GWMS_OBS_LOG_LEVEL") or "INFO")
        except argparse.ArgumentTypeError as e:
            p.error(f"$GWMS_OBS_LOG_LEVEL: {e}")
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        rc: int = a.func(a)
        sys.stdout.flush()  # a closed pipe fails here, where it is handled, not at exit
    except BrokenPipeError:
        # `gwms-obs inspect F | head -1`: as the Python docs advise (signal module, "Note on
        # SIGPIPE"), point stdout at devnull so the final flush at exit cannot fail again. Exit
        # 141 (128 + SIGPIPE) like a C filter killed by SIGPIPE: what `set -o pipefail` expects.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:  # Ctrl-C during a report or simulate: no traceback either
        return 130
    return rc


if __name__ == "__main__":
    sys.exit(main())
