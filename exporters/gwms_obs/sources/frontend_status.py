"""Reader for a VO frontend's monitor dir (``frontend/glideinFrontendMonitoring.py``).

``<monitor>/group_<group>/frontend_status.xml`` (``groupStats.write_file``), root
``<VOFrontendGroupStats>``: ``<updated>`` (UTC ``unixtime``), ``<factories>`` of
``<factory name="<entry>@<glidein>@<factory>@<pool node>" Down="Up|Down">`` and
``<states>`` of ``<state name="MatchedUp|MatchedDown|Unmatched">``, each with
``MatchedJobs``, ``MatchedGlideins``, ``MatchedCores`` and ``Requested``
attributes, and ``<total>`` with ``Jobs`` (the schedds' user jobs) and
``Glideins`` (the VO pool's) besides the factories' sums.

``<monitor>/frontend_status.xml`` (``glideinFrontendMonitorAggregator.aggregateStatus``),
root ``<VOFrontendStats>``: the groups' data again and their sums; only its
``<updated>`` and group names are read here (the groups' own files are newer
or as new, and carry each group's time). ``<monitor>/descript.xml``
(``write_frontend_descript_xml``) names the frontend.

The frontend writes these files, not pilots, but a half-written or corrupt file
must not stop the exporter: every problem is counted with its file (and the
parser's line and column), the file or the value is skipped, the rest kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from xml.etree.ElementTree import Element

from ..catalogue import Source
from ..model import FrontendGroupStatus, FrontendMatch
from ..parse_errors import ParseErrors
from .descript import load_xml

_SRC = Source.FRONTEND_STATUS.value
_MAX_XML = 16 << 20  # a group with thousands of entries writes a few MB
MAX_NAME = 256  # an entry, group or factory name longer than this is not GlideinWMS's
MAX_MATCHES = 5000  # factory entries in one group's file; more are counted and skipped
STATES = ("MatchedUp", "MatchedDown", "Unmatched")  # groupStats.states_names


@dataclass(slots=True)
class FrontendWide:
    """The frontend-wide frontend_status.xml: when the aggregator last ran, and which groups it saw."""

    updated: float | None
    groups: list[str]


def split_glideid(name: str) -> tuple[str, str] | None:
    """``<entry>@<glidein>@<factory>@<pool node>`` -> (entry, the rest); None when it is not one."""
    entry, sep, rest = name.partition("@")
    return (entry, rest) if sep and entry and rest else None


def _updated(doc: Element, path: str, errors: ParseErrors) -> float | None:
    utc = doc.find("updated/timezone[@name='UTC']")
    raw = utc.get("unixtime") if utc is not None else None
    if raw is None:
        errors.record(_SRC, "no_updated", path, None, "no <updated><timezone name='UTC' unixtime=...>")
        return None
    try:
        t = float(raw)
    except ValueError:
        t = math.nan
    if not math.isfinite(t):
        errors.record(_SRC, "bad_value", path, None, f"unixtime={raw[:50]}")
        return None
    return t


def _ints(el: Element | None, where: str, path: str, errors: ParseErrors) -> dict[str, int]:
    out: dict[str, int] = {}
    if el is None:
        return out
    for k, v in el.attrib.items():
        try:
            f = float(v)
        except ValueError:
            f = math.nan
        if not math.isfinite(f) or f < 0:
            errors.record(_SRC, "bad_value", path, None, f"{where}/{el.tag} {k}={v[:50]}")
            continue
        out[k] = round(f)
    return out


def _match(el: Element, where: str, path: str, errors: ParseErrors) -> FrontendMatch:
    down = el.get("Down")
    return FrontendMatch(
        down={"Down": True, "Up": False}.get(down) if down is not None else None,
        matched_jobs=_ints(el.find("MatchedJobs"), where, path, errors),
        matched_glideins=_ints(el.find("MatchedGlideins"), where, path, errors),
        matched_cores=_ints(el.find("MatchedCores"), where, path, errors),
        requested=_ints(el.find("Requested"), where, path, errors),
    )


def _name(el: Element, path: str, errors: ParseErrors) -> str | None:
    name = el.get("name")
    if not name or len(name) > MAX_NAME or not name.isprintable():
        errors.record(_SRC, "bad_name", path, None, f"<{el.tag} name={(name or '')[:60]!r}>")
        return None
    return name


def group_from_dir(path: str) -> str | None:
    """``.../group_<group>/frontend_status.xml`` -> ``<group>``."""
    d = path.replace("\\", "/").rstrip("/").split("/")
    parent = d[-2] if len(d) >= 2 else ""
    return parent[len("group_") :] if parent.startswith("group_") and len(parent) > len("group_") else None


def read_group_status(
    path: str, errors: ParseErrors, group: str | None = None, *, root: str | None = None
) -> FrontendGroupStatus | None:
    """One group's frontend_status.xml; None (counted) when unusable. A bad entry or value is
    counted and skipped, the rest of the file kept."""
    doc = load_xml(path, _SRC, errors, _MAX_XML, root=root)
    if doc is None:
        return None
    if doc.tag != "VOFrontendGroupStats":
        errors.record(_SRC, "bad_root", path, None, doc.tag[:100])
        return None
    group = group or group_from_dir(path)
    if group is None or len(group) > MAX_NAME:
        errors.record(_SRC, "no_group", path, None, "not under <monitor>/group_<group>/")
        return None
    factories: dict[tuple[str, str], FrontendMatch] = {}
    for el in doc.findall("factories/factory"):
        name = _name(el, path, errors)
        if name is None:
            continue
        key = split_glideid(name)
        if key is None:
            errors.record(_SRC, "bad_name", path, None, f"factory {name[:60]!r} is not <entry>@<factory>")
            continue
        if len(factories) >= MAX_MATCHES:
            errors.record(_SRC, "too_many_entries", path, None, f"more than {MAX_MATCHES}")
            break
        factories[key] = _match(el, f"factory {name[:60]}", path, errors)
    states: dict[str, FrontendMatch] = {}
    for el in doc.findall("states/state"):
        name = _name(el, path, errors)
        if name is None:
            continue
        if name not in STATES:
            errors.record(_SRC, "bad_name", path, None, f"state {name[:60]!r}")
            continue
        states[name] = _match(el, f"state {name}", path, errors)
    total = doc.find("total")
    return FrontendGroupStatus(
        group=group,
        updated=_updated(doc, path, errors),
        jobs=_ints(total.find("Jobs") if total is not None else None, "total", path, errors),
        glideins=_ints(total.find("Glideins") if total is not None else None, "total", path, errors),
        factories=factories,
        states=states,
    )


def read_frontend_status(path: str, errors: ParseErrors, *, root: str | None = None) -> FrontendWide | None:
    """The frontend-wide frontend_status.xml: its time and its groups; None (counted) when unusable."""
    doc = load_xml(path, _SRC, errors, _MAX_XML, root=root)
    if doc is None:
        return None
    if doc.tag != "VOFrontendStats":
        errors.record(_SRC, "bad_root", path, None, doc.tag[:100])
        return None
    groups = [n for el in doc.findall("groups/group") if (n := _name(el, path, errors)) is not None]
    return FrontendWide(_updated(doc, path, errors), groups)


def read_frontend_name(path: str, errors: ParseErrors, *, root: str | None = None) -> str | None:
    """``FrontendName`` of the frontend's monitor/descript.xml; None (counted) when it says none."""
    doc = load_xml(path, _SRC, errors, root=root)
    if doc is None:
        return None
    el = doc.find("frontend") if doc.tag == "glideinFrontendDescript" else None
    name = el.get("FrontendName") if el is not None else None
    if not name or len(name) > MAX_NAME or not name.isprintable():
        errors.record(_SRC, "bad_descript", path, None, f"<{doc.tag[:60]}> without a usable FrontendName")
        return None
    return name
