"""Pilots' files still arriving: a .err cut before the line glidein_startup.sh writes last.

A pilot whose .out and .err both end with their final marker is complete and
counted at once (ingest/glidein_files.py, settle by evidence); one cut short
waits ``settle_seconds``, as a file the factory is still receiving does. Tests
that exercise the wait by age cut the .err files with :func:`cut_errs` and put
the whole files back with :func:`finish`.
"""

from __future__ import annotations

import os
from pathlib import Path

from gwms_obs.sources.glidein_err import XML_END


def cut_errs(root: Path, mtime: float | None = None) -> dict[Path, bytes]:
    """Cut every .err under ``root`` before its end marker; the whole bytes of each, to :func:`finish`.

    ``mtime``: the cut files' mtime (default: the one each had).
    """
    return cut_errs_of(sorted(root.glob("client/*/*/entry_*/job.*.err")), mtime)


def cut_errs_of(errs: list[Path], mtime: float | None = None) -> dict[Path, bytes]:
    """:func:`cut_errs` of these files."""
    whole: dict[Path, bytes] = {}
    for err in errs:
        data = err.read_bytes()
        at = data.rfind(XML_END)
        if at < 0:
            continue  # cut short already (a simulated anomaly): it waits anyway
        whole[err] = data
        st = err.stat()
        err.write_bytes(data[:at])
        t = st.st_mtime if mtime is None else mtime
        os.utime(err, (t, t))
    return whole


def finish(whole: dict[Path, bytes], mtime: float | None = None) -> None:
    """The cut files written whole again (``mtime``: as of that time; default now); gone ones stay gone."""
    for err, data in whole.items():
        if not err.parent.is_dir() or not err.exists():
            continue
        err.write_bytes(data)
        if mtime is not None:
            os.utime(err, (mtime, mtime))
