"""What the factory issued to each glidein: its trace, its parent span, its identity.

The factory writes one line per submit cluster into ``gwms-trace-ledger.jsonl``
in the entry's client log directory, the directory condor returns the
glideins' ``job.C.P.out/.err`` into. Pilots cannot write there (condor brings
back only their own output files, under names the submit file fixes), so the
exporter trusts the ledger and uses it to bind a spool found in
``job.C.P.err`` to that glidein: its spans must be in the cluster's trace,
its root must hang under the glidein's own ``glidein submit`` span, and its
resource must name the entry, client and job the factory knows.

Line format (one JSON object, ``v`` = 1)::

    {"v":1,"cluster":C,"trace_id":"<32 hex>","span_id":"<16 hex of condor_submit>",
     "spans":["<16 hex of glidein submit, proc 0>", ...],
     "resource":{"gwms.factory":...,"gwms.entry":...,"gwms.client":..., ...}}
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ..catalogue import Source
from ..parse_errors import ParseErrors
from . import conventions as C

LEDGER_NAME: Final = "gwms-trace-ledger.jsonl"
MAX_LINE: Final = 1 << 20  # a cluster of 10,000 glideins is ~190 KB
MAX_RECORDS: Final = 200_000  # clusters remembered per ledger (oldest forgotten first)
SOURCE = Source.TRACE_SPOOL.value


@dataclass(frozen=True, slots=True)
class Issued:
    """What the factory issued to one glidein."""

    cluster: int
    proc: int
    trace_id: str
    parent_span_id: str  # the glidein's "glidein submit" span
    factory_span_ids: frozenset[str]  # every span of the factory in this trace
    resource: dict[str, str]


def append_record(
    log_dir: str | os.PathLike[str],
    cluster: int,
    trace_id: str,
    span_id: str,
    spans: list[str],
    resource: dict[str, str],
) -> Path:
    """Append one cluster's line (one write on an O_APPEND descriptor, so lines of processes do not interleave)."""
    path = Path(log_dir) / LEDGER_NAME
    line = json.dumps(
        {"v": 1, "cluster": cluster, "trace_id": trace_id, "span_id": span_id, "spans": spans, "resource": resource},
        separators=(",", ":"),
    ).encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line + b"\n")
    finally:
        os.close(fd)
    return path


class _File:
    __slots__ = ("ino", "offset", "records")

    def __init__(self, ino: int) -> None:
        self.ino = ino
        self.offset = 0
        self.records: OrderedDict[int, dict[str, Any]] = OrderedDict()


class LedgerIndex:
    """Reads ledgers incrementally, on demand; bad lines are skipped and counted."""

    def __init__(self, errors: ParseErrors | None = None, max_records: int = MAX_RECORDS) -> None:
        self.errors = errors
        self.max_records = max_records
        self._files: dict[Path, _File] = {}

    def lookup(self, log_dir: str | os.PathLike[str], cluster: int, proc: int) -> Issued | None:
        path = Path(log_dir) / LEDGER_NAME
        f = self._files.get(path)
        rec = f.records.get(cluster) if f else None
        if rec is None:  # not seen yet: read what was appended since
            f = self._refresh(path)
            rec = f.records.get(cluster) if f else None
        if rec is None or not 0 <= proc < len(rec["spans"]):
            return None
        return Issued(
            cluster,
            proc,
            rec["trace_id"],
            rec["spans"][proc],
            frozenset([rec["span_id"], *rec["spans"]]),
            rec["resource"],
        )

    def _refresh(self, path: Path) -> _File | None:
        try:
            fh = open(path, "rb")  # noqa: SIM115 - closed below; fstat needs the open file
        except OSError:
            return None
        with fh:
            st = os.fstat(fh.fileno())
            f = self._files.get(path)
            if f is None or f.ino != st.st_ino or st.st_size < f.offset:  # new, replaced or truncated
                f = self._files[path] = _File(st.st_ino)
            fh.seek(f.offset)
            while True:
                here = fh.tell()
                line = fh.readline(MAX_LINE + 1)
                if not line:
                    break
                if not line.endswith(b"\n"):
                    if len(line) > MAX_LINE:  # skip the rest of an over-long line
                        self._bad(path, here, "line too long")
                        while line and not line.endswith(b"\n"):
                            line = fh.readline(MAX_LINE + 1)
                        f.offset = fh.tell()
                        continue
                    break  # being written: read it next time
                f.offset = fh.tell()
                rec = self._record(line)
                if rec is None:
                    self._bad(path, here, line[:80].decode("ascii", "replace"))
                    continue
                f.records[rec["cluster"]] = rec
                f.records.move_to_end(rec["cluster"])
                while len(f.records) > self.max_records:
                    f.records.popitem(last=False)
        return f

    def _bad(self, path: Path, offset: int, detail: str) -> None:
        if self.errors is not None:
            self.errors.record(SOURCE, "ledger_bad_line", str(path), offset, detail)

    @staticmethod
    def _record(line: bytes) -> dict[str, Any] | None:
        with contextlib.suppress(ValueError, RecursionError):
            d = json.loads(line)
            if not isinstance(d, dict) or d.get("v") != 1:
                return None
            cluster, spans, res = d.get("cluster"), d.get("spans"), d.get("resource")
            if not (isinstance(cluster, int) and not isinstance(cluster, bool) and cluster >= 0):
                return None
            if not (C.is_trace_id(d.get("trace_id")) and C.is_span_id(d.get("span_id"))):
                return None
            if not isinstance(spans, list) or not all(C.is_span_id(s) for s in spans):
                return None
            if not isinstance(res, dict) or not all(isinstance(v, str) for v in res.values()):
                return None
            return {
                "cluster": cluster,
                "trace_id": d["trace_id"].lower(),
                "span_id": d["span_id"].lower(),
                "spans": [s.lower() for s in spans],
                "resource": res,
            }
        return None
