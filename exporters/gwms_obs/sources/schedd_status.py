"""Reader for ``monitor/entry_<entry>/schedd_status.xml`` (``condorQStats.write_file``).

Root ``<glideFactoryEntryQStats>``: ``<updated>`` (UTC ``unixtime``),
``<downtime status=..>``, ``<frontends><frontend name=client_log_name>`` each
with ``ClientMonitor``, ``Downtime``, ``Requested`` and ``Status`` attributes,
and ``<total>`` with the same. Attributes are kept raw, Idle included: Status
Idle is Wait+Pending+StageIn+IdleOther, so the exporter must not add it.
"""

from __future__ import annotations

import math
from xml.etree.ElementTree import Element

from ..catalogue import Source
from ..model import EntryStatus, FrontendStatus
from ..parse_errors import ParseErrors
from .descript import entry_from_dir, load_xml

_SRC = Source.SCHEDD_STATUS.value
_MAX_SCHEDD_XML = 16 << 20


def _ints(el: Element | None, path: str, errors: ParseErrors) -> dict[str, int]:
    out: dict[str, int] = {}
    if el is None:
        return out
    for k, v in el.attrib.items():
        try:
            f = float(v)  # values are scaled by the frontend fraction, may be "3.0"
        except ValueError:
            errors.record(_SRC, "bad_value", path, None, f"{k}={v[:50]}")
            continue
        if not math.isfinite(f):
            errors.record(_SRC, "bad_value", path, None, f"{k}={v[:50]}")
            continue
        out[k] = round(f)
    return out


def _frontend(el: Element, path: str, errors: ParseErrors) -> FrontendStatus:
    dt = el.find("Downtime")
    return FrontendStatus(
        status=_ints(el.find("Status"), path, errors),
        requested=_ints(el.find("Requested"), path, errors),
        client_monitor=_ints(el.find("ClientMonitor"), path, errors),
        downtime=dt is not None and dt.get("status") == "True",
    )


def read_schedd_status(
    path: str, errors: ParseErrors, entry: str | None = None, *, root: str | None = None
) -> EntryStatus | None:
    """Parse one entry's schedd_status.xml; None (counted) when unusable.

    Only a regular file is read (inside ``root``, when given; see :mod:`gwms_obs.sources.files`).
    """
    doc = load_xml(path, _SRC, errors, _MAX_SCHEDD_XML, root=root)
    if doc is None:
        return None
    if doc.tag != "glideFactoryEntryQStats":
        errors.record(_SRC, "bad_root", path, None, doc.tag[:100])
        return None
    entry = entry or entry_from_dir(path)
    if entry is None:
        errors.record(_SRC, "no_entry", path, None, "not under monitor/entry_<entry>/")
        return None
    updated: float | None = None
    utc = doc.find("updated/timezone[@name='UTC']")
    if utc is not None and (ut := utc.get("unixtime")) is not None:
        try:
            updated = float(ut)
        except ValueError:
            errors.record(_SRC, "bad_value", path, None, f"unixtime={ut[:50]}")
        else:
            if not math.isfinite(updated):
                updated = None
    dt = doc.find("downtime")
    frontends: dict[str, FrontendStatus] = {}
    for fe in doc.findall("frontends/frontend"):
        name = fe.get("name")
        if not name:
            errors.record(_SRC, "bad_frontend", path, None, "frontend without a name")
            continue
        frontends[name] = _frontend(fe, path, errors)
    total_el = doc.find("total")
    total = _frontend(total_el, path, errors) if total_el is not None else FrontendStatus()
    return EntryStatus(entry, updated, dt is not None and dt.get("status") == "True", frontends, total)
