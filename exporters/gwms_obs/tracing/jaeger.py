"""``gwms-obs traces``: pilots' spans from Jaeger's HTTP query API, as a table or CSV.

The table is the tracer2022 prototype's (seed 000): trace:span, parent,
entry, client, start (UTC), duration (µs), plus status and span name.
Jaeger's ``/api/traces`` search takes a service, a time range (µs) and
``tags`` (JSON, matched against span and resource attributes); the factory,
entry and client filters are applied again here, to whole traces, so the
answer does not depend on which attributes a storage backend searches. Two
factories sharing a Jaeger may have entries of the same name: ``factory``
(the traces' ``gwms.factory``, the exporter's ``factory_name``) keeps one's.
"""

from __future__ import annotations

import csv
import io
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import astuple, dataclass, fields
from datetime import UTC, datetime
from typing import Any

from . import conventions as C

COLUMNS = ("trace:span", "parent", "entry", "client", "start (UTC)", "duration (µs)", "status", "name")


@dataclass(frozen=True, slots=True)
class Row:
    trace_span: str
    parent: str
    entry: str
    client: str
    start: str
    duration_us: int
    status: str
    name: str


class JaegerError(RuntimeError):
    pass


def _get(url: str, timeout: float) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return {"data": []}
        raise JaegerError(f"{url}: HTTP {e.code}") from None
    except (OSError, ValueError) as e:
        raise JaegerError(f"{url}: {e}") from None


def search(
    base: str,
    *,
    services: Iterable[str] = (C.SERVICE_PILOT,),
    factory: str | None = None,
    entry: str | None = None,
    client: str | None = None,
    start: float | None = None,
    end: float | None = None,
    limit: int = 100,
    timeout: float = 30.0,
) -> list[dict[str, Any]]:
    """Traces (Jaeger API JSON) of the services with a span matching the filters, deduplicated."""
    tags = {k: v for k, v in ((C.FACTORY, factory), (C.ENTRY, entry), (C.CLIENT, client)) if v}
    seen: dict[str, dict[str, Any]] = {}
    for service in services:
        q: dict[str, str] = {"service": service, "limit": str(limit)}
        if tags:
            q["tags"] = json.dumps(tags)
        if start is not None:
            q["start"] = str(int(start * 1e6))
        if end is not None:
            q["end"] = str(int(end * 1e6))
        doc = _get(f"{base.rstrip('/')}/api/traces?{urllib.parse.urlencode(q)}", timeout)
        for t in doc.get("data") or []:
            seen.setdefault(t["traceID"], t)
    return [t for t in seen.values() if _matches(t, tags)]


def get_trace(base: str, trace_id: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    doc = _get(f"{base.rstrip('/')}/api/traces/{trace_id}", timeout)
    return list(doc.get("data") or [])


def _tags(span: dict[str, Any], processes: dict[str, Any]) -> dict[str, Any]:
    """Span tags over its process's (resource) tags."""
    proc = span.get("process") or processes.get(span.get("processID", ""), {})
    out = {t["key"]: t.get("value") for t in proc.get("tags", [])}
    out.update({t["key"]: t.get("value") for t in span.get("tags", [])})
    return out


def _matches(trace: dict[str, Any], tags: dict[str, str]) -> bool:
    if not tags:
        return True
    procs = trace.get("processes") or {}
    return any(all(str(_tags(s, procs).get(k)) == v for k, v in tags.items()) for s in trace.get("spans", []))


def _status(tags: dict[str, Any]) -> str:
    code = str(tags.get("otel.status_code", "")).upper()
    if code in ("ERROR", "OK"):
        return code
    return "ERROR" if tags.get("error") in (True, "true") else "UNSET"


def rows(traces: Iterable[dict[str, Any]]) -> list[Row]:
    """One row per span; a trace's entry/client fill spans that lack them (phases inherit the pilot's)."""
    out: list[Row] = []
    for t in traces:
        procs = t.get("processes") or {}
        spans = t.get("spans", [])
        tagged = [_tags(s, procs) for s in spans]
        default = {k: next((str(tg[k]) for tg in tagged if tg.get(k)), "") for k in (C.ENTRY, C.CLIENT)}
        for s, tg in sorted(zip(spans, tagged, strict=True), key=lambda x: (x[0]["traceID"], x[0]["startTime"])):
            parent = next((r["spanID"] for r in s.get("references", []) if r.get("refType") == "CHILD_OF"), "")
            out.append(
                Row(
                    f"{s['traceID']}:{s['spanID']}",
                    parent,
                    str(tg.get(C.ENTRY) or default[C.ENTRY]),
                    str(tg.get(C.CLIENT) or default[C.CLIENT]),
                    datetime.fromtimestamp(s["startTime"] / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3],
                    int(s["duration"]),
                    _status(tg),
                    s.get("operationName", ""),
                )
            )
    return out


def to_table(rs: list[Row]) -> str:
    cells = [COLUMNS, *(tuple(str(v) for v in astuple(r)) for r in rs)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(c, widths, strict=True)).rstrip() for c in cells) + "\n"


def to_csv(rs: list[Row]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(COLUMNS)
    w.writerows(astuple(r) for r in rs)
    return buf.getvalue()


def to_parquet(rs: list[Row], path: str) -> None:
    """Parquet through pyarrow, when installed (not a dependency of gwms-obs)."""
    try:
        import pyarrow as pa  # type: ignore[import-not-found, unused-ignore]
        import pyarrow.parquet as pq  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        raise JaegerError("--format parquet needs pyarrow, which is not installed; use --format csv") from None
    names = [f.name for f in fields(Row)]
    cols = {n: [getattr(r, n) for r in rs] for n in names}
    pq.write_table(pa.table(cols), path)
