"""A VO frontend's monitor dir: group_<g>/frontend_status.xml, frontend_status.xml, descript.xml.

The layout of ``glideinFrontendMonitoring.groupStats.write_file``,
``glideinFrontendMonitorAggregator.aggregateStatus`` and
``write_frontend_descript_xml`` (xmlFormat's: three-space indent, a dict's
elements sorted by name, ``name`` first then the attributes sorted, a group's
totals summed over its factories only, the frontend's over its groups).
tests/test_frontend_status_writer.py holds it byte for byte to files GlideinWMS
itself wrote (tests/fixtures/glideinwms_frontend/).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ...catalogue import Source
from ..formats import updated_block, xml_attrs
from ..plan import FrontendReport
from ..scenario import CLIENTS, FACTORY, GLIDEIN_NAME, EntrySpec

SOURCE = Source.FRONTEND_STATUS
FILE = "frontend_status.xml"
DESCRIPT = "descript.xml"
_HEAD = '<?xml version="1.0" encoding="ISO-8859-1"?>\n\n'
_TAB = "   "
# What a group's <total> sums over its factories (groupStats.get_total), and the frontend's over groups.
_SUMMED = ("MatchedJobs", "Requested", "MatchedGlideins", "MatchedCores")
_AGGREGATED = ("Jobs", "Glideins", "MatchedJobs", "MatchedGlideins", "MatchedCores", "Requested")


@dataclass(slots=True)
class Match:
    """One <factory> (``<entry>@<glidein>@<factory>@<pool node>``) or <state> of a group."""

    down: bool
    matched_jobs: dict[str, int]  # Idle, EffIdle, OldIdle, Running, RunningHere
    matched_glideins: dict[str, int]  # Total, Idle, Running, Failed
    matched_cores: dict[str, int]  # Total, Idle, Running
    requested: dict[str, int]  # Idle, MaxRun
    attrs: dict[str, str] = field(default_factory=dict)  # the factory ad's attributes the frontend logs
    params: dict[str, str] = field(default_factory=dict)  # the request's parameters

    def classes(self) -> dict[str, dict[str, int]]:
        return {
            "MatchedCores": self.matched_cores,
            "MatchedGlideins": self.matched_glideins,
            "MatchedJobs": self.matched_jobs,
            "Requested": self.requested,
        }


@dataclass(slots=True)
class Group:
    jobs: dict[str, int]  # the schedds' user jobs: Idle, OldIdle, Running, Total, Idle_3600
    glideins: dict[str, int]  # the VO pool's glideins: Idle, Running, Total
    factories: dict[str, Match]
    states: dict[str, Match]  # MatchedUp, MatchedDown, Unmatched

    def total(self) -> dict[str, dict[str, int]]:
        out = _sum_common(m.classes() for m in self.factories.values())
        out.update({"Glideins": self.glideins, "Jobs": self.jobs})
        return out


def _sum_common(
    items: Iterable[Mapping[str, Mapping[str, int]]], classes: tuple[str, ...] = _SUMMED
) -> dict[str, dict[str, int]]:
    """Sum class by class, keeping an attribute only if every item has it (GlideinWMS's totals)."""
    out: dict[str, dict[str, int]] = {}
    for item in items:
        for c in classes:
            if c not in item:
                continue
            if c not in out:
                out[c] = dict(item[c])
            else:
                out[c] = {a: v + item[c][a] for a, v in out[c].items() if a in item[c]}
    return out


def _el(tag: str, attrs: Iterable[tuple[str, object]], ind: str, children: list[str] | None = None) -> str:
    a = xml_attrs(attrs)
    head = f"{ind}<{tag}{' ' + a if a else ''}"
    if children is None:
        return head + "/>\n"
    return head + ">\n" + "".join(children) + f"{ind}</{tag}>\n"


def _named(tag: str, name: str, rest: Iterable[tuple[str, object]], ind: str, children: list[str]) -> str:
    """An element of a dict: ``name`` first, the rest sorted (xmlFormat.dict2string)."""
    a = xml_attrs(rest)
    return f'{ind}<{tag} name="{name}"{" " + a if a else ""}>\n' + "".join(children) + f"{ind}</{tag}>\n"


def _classes(classes: Mapping[str, Mapping[str, int]], ind: str) -> list[str]:
    return [_el(c, classes[c].items(), ind) for c in sorted(classes)]


def _match(tag: str, name: str, m: Match, ind: str) -> str:
    inner = ind + _TAB
    params = [f'{inner}{_TAB * 2}<Parameter name="{k}" val="{v}"/>\n' for k, v in sorted(m.params.items())]
    children = [_el("Attributes", m.attrs.items(), inner)]
    children += _classes({k: v for k, v in m.classes().items() if k != "Requested"}, inner)
    children.append(_el("Requested", m.requested.items(), inner, [_el("Parameters", (), inner + _TAB, params)]))
    return _named(tag, name, [("Down", "Down" if m.down else "Up")], ind, children)


def _matches(tag: str, items: Mapping[str, Match], ind: str) -> list[str]:
    return [_match(tag, n, items[n], ind + _TAB) for n in sorted(items)]


def _updated(t: int, ind: str) -> str:
    """time2xml's block; a group's file ignores its leading tab (get_xml_updated)."""
    return "\n".join(line[len(_TAB) - len(ind) :] for line in updated_block(t).split("\n"))


def group_xml(updated: int, g: Group) -> bytes:
    """``group_<g>/frontend_status.xml`` as groupStats.write_file writes it."""
    return (
        _HEAD
        + "<VOFrontendGroupStats>\n"
        + _updated(updated, "")
        + "\n"
        + _el("factories", (), _TAB, _matches("factory", g.factories, _TAB))
        + _el("states", (), _TAB, _matches("state", g.states, _TAB))
        + _el("total", (), _TAB, _classes(g.total(), _TAB * 2))
        + "</VOFrontendGroupStats>\n\n"
    ).encode("utf-8")


def frontend_xml(updated: int, groups: Mapping[str, Group]) -> bytes:
    """The frontend-wide ``frontend_status.xml`` as aggregateStatus writes it from the groups' files."""
    t2, t3 = _TAB * 2, _TAB * 3
    blocks = []
    for name in sorted(groups):
        g = groups[name]
        blocks.append(
            _named(
                "group",
                name,
                (),
                t2,
                [
                    _el("total", (), t3, _classes(g.total(), t3 + _TAB)),
                    _el("factories", (), t3, _matches("factory", g.factories, t3)),
                    _el("states", (), t3, _matches("state", g.states, t3)),
                ],
            )
        )
    total = _sum_common((g.total() for g in groups.values()), _AGGREGATED)
    per: dict[str, dict[str, list[dict[str, dict[str, int]]]]] = {"factories": {}, "states": {}}
    for g in groups.values():
        for fos, items in (("factories", g.factories), ("states", g.states)):
            for n, m in items.items():
                per[fos].setdefault(n, []).append(m.classes())

    def sums(fos: str, tag: str) -> list[str]:
        out = []
        for n in sorted(per[fos]):
            # Every class is there, an empty one too, and an attribute any group has is summed
            # (aggregateStatus's per-factory totals, unlike its frontend total).
            s: dict[str, dict[str, int]] = {c: {} for c in _AGGREGATED}
            for classes in per[fos][n]:
                for c, attrs in classes.items():
                    for a, v in attrs.items():
                        s[c][a] = s[c].get(a, 0) + v
            out.append(_named(tag, n, (), _TAB * 2, _classes(s, t3)))
        return out

    return (
        _HEAD
        + "<VOFrontendStats>\n"
        + _updated(updated, _TAB)
        + "\n"
        + _el("groups", (), _TAB, blocks)
        + _el("total", (), _TAB, _classes(total, t2))
        + _el("factories", (), _TAB, sums("factories", "factory"))
        + _el("states", (), _TAB, sums("states", "state"))
        + "</VOFrontendStats>\n\n"
    ).encode("utf-8")


def descript_xml(updated: int, frontend_name: str) -> bytes:
    """``descript.xml`` as write_frontend_descript_xml writes it (no monitor link)."""
    return (
        _HEAD
        + "<glideinFrontendDescript>\n"
        + _updated(updated, _TAB)
        + "\n"
        + f'{_TAB}<frontend FrontendName="{frontend_name}"/>\n'
        + f'{_TAB}<monitor_footer display_txt=""  href_link=""/>\n'
        + "</glideinFrontendDescript>"
    ).encode("utf-8")


# --- the simulated factory's frontends (simulate/factory.py) ---------------------------------------
DIR = "frontend"  # <simulated tree>/frontend/<FrontendName>/monitor/: each frontend's monitor dir
POOL_NODE = "gfactory-1.example.org"  # the factory's collector, as the frontends name it


def simulated(
    now: int, entries: Iterable[EntrySpec], views: Mapping[str, tuple[Mapping[str, Counter[str]], list[FrontendReport]]]
) -> dict[str, bytes]:
    """Each frontend client's view of the entries it asks of, consistent with their schedd_status.xml:
    what it requested and its matching jobs are the reports the factory received, its glideins the
    factory's queue counts (``views``: entry -> (queues by client_log_name, reports in spec.clients order)).
    Returns {path under DIR: bytes}; a frontend is a client_name's part before its last dot, its group
    the client's group."""
    fronts: dict[str, dict[str, Group]] = {}
    for spec in entries:
        queues, reports = views[spec.name]
        for key, report in zip(spec.clients, reports, strict=True):
            c = CLIENTS[key]
            q = queues.get(c.log_name, Counter())
            frontend = c.client_name.rsplit(".", 1)[0]
            g = fronts.setdefault(frontend, {}).setdefault(c.group, Group({}, {}, {}, {}))
            running = q["JobsRunHere"] + report.jobs_running_elsewhere
            g.factories[f"{spec.name}@{GLIDEIN_NAME}@{FACTORY}@{POOL_NODE}"] = Match(
                down=False,
                matched_jobs={
                    "Idle": report.jobs_idle,
                    "EffIdle": report.jobs_idle,
                    "OldIdle": 0,
                    "Running": running,
                    "RunningHere": q["JobsRunHere"],
                },
                matched_glideins={
                    "Total": q["GlideTotal"],
                    "Idle": q["GlideIdle"],
                    "Running": q["GlideRunning"],
                    "Failed": 0,
                },
                matched_cores={
                    "Total": q["CoresTotal"],
                    "Idle": q["CoresTotal"] - q["CoresRunning"],
                    "Running": q["CoresRunning"],
                },
                requested={"Idle": report.requested_idle, "MaxRun": 300},
                attrs={"GLIDEIN_Site": spec.site},
                params={"GLIDECLIENT_ReqNode": POOL_NODE},
            )
    out: dict[str, bytes] = {}
    for frontend, groups in fronts.items():
        for name, g in groups.items():
            up = _sum_common(m.classes() for m in g.factories.values())
            zero = {c: dict.fromkeys(v, 0) for c, v in up.items()}
            down = Match(True, zero["MatchedJobs"], zero["MatchedGlideins"], zero["MatchedCores"], zero["Requested"])
            # Every entry is up and every job matched: MatchedUp is their sum, the others zero.
            g.states = {
                "MatchedUp": Match(
                    False, up["MatchedJobs"], up["MatchedGlideins"], up["MatchedCores"], up["Requested"]
                ),
                "MatchedDown": down,
                "Unmatched": down,
            }
            idle, run = up["MatchedJobs"]["Idle"], up["MatchedJobs"]["Running"]
            g.jobs = {"Idle": idle, "OldIdle": 0, "Running": run, "Total": idle + run, "Idle_3600": 0}
            mg = up["MatchedGlideins"]
            g.glideins = {"Idle": mg["Idle"], "Running": mg["Running"], "Total": mg["Total"]}
            out[f"{DIR}/{frontend}/monitor/group_{name}/{FILE}"] = group_xml(now, g)
        out[f"{DIR}/{frontend}/monitor/{FILE}"] = frontend_xml(now, groups)
        out[f"{DIR}/{frontend}/monitor/{DESCRIPT}"] = descript_xml(now, frontend)
    return out
