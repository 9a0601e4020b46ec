"""Lint every panel and rule expression: valid PromQL, known metric names only.

Grafana's ``$__`` macros are not PromQL, so they are replaced by durations
first; template variables inside label-matcher strings (``=~"$entry"``)
are valid as they are. Names must come from the catalogue or names.py.
Every selector of a panel or variable must carry the factory matcher
(:func:`missing_factory`; on the span metrics, their own factory label): the boards
read one factory's Prometheus or the global Thanos query, and the factory variable
chooses on the latter.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import promql_parser as pp

from gwms_obs.catalogue import FACTORY_LABEL as FACTORY

from . import names as N
from .board import FACTORY_SEL, SPAN_FACTORY_SEL, TOPN, TOPN_DEFAULT

# Grafana's macros -> something PromQL accepts with the same type.
MACROS = {
    "$__rate_interval": "5m",
    "$__interval_ms": "60000",
    "$__interval": "1m",
    "$__range_ms": "3600000",
    "$__range_s": "3600",
    "$__range": "1h",
}
_VAR = re.compile(r"\$(\w+)|\$\{(\w+)\}")
# Variables used outside label matchers (topk($topn, ...)) must become PromQL too: their defaults.
# The factory variable's default is its All, ".*": what a query run outside Grafana means by it.
DEFAULTS = {TOPN: str(TOPN_DEFAULT), FACTORY: ".*"}


def substitute(expr: str, variables: dict[str, str] | None = None, *, keep: tuple[str, ...] = ()) -> str:
    """``expr`` with Grafana's macros replaced (longest first) and, if given, variables;
    the variables named in ``keep`` are left as they are."""
    for k in sorted(MACROS, key=len, reverse=True):
        expr = expr.replace(k, MACROS[k])
    values = {k: v for k, v in {**DEFAULTS, **(variables or {})}.items() if k not in keep}
    return _VAR.sub(lambda m: values.get(m.group(1) or m.group(2), m.group(0)), expr)


def _children(node: Any) -> Iterator[Any]:
    for attr in ("expr", "lhs", "rhs", "param", "vector_selector"):
        child = getattr(node, attr, None)
        if child is not None and not isinstance(child, (str, int, float)):
            yield child
    yield from getattr(node, "args", None) or ()


def selectors(node: Any) -> Iterator[Any]:
    if type(node).__name__ == "VectorSelector":
        yield node
        return
    for c in _children(node):
        yield from selectors(c)


def check_expr(expr: str, allowed: frozenset[str] | None = None) -> list[str]:
    """Problems with one expression (empty when it is fine)."""
    allowed = N.allowed() if allowed is None else allowed
    try:
        tree = pp.parse(substitute(expr))
    except ValueError as e:
        return [f"not PromQL: {e}: {expr}"]
    problems = []
    for sel in selectors(tree):
        if not sel.name:
            problems.append(f"selector without a metric name: {expr}")
        elif sel.name not in allowed:
            problems.append(f"unknown metric {sel.name!r} (not in the catalogue or names.py): {expr}")
    return problems


def missing_factory(expr: str) -> list[str]:
    """Selectors of a panel or variable expression without ``factory=~"$factory"`` (board.FACTORY_SEL),
    or, for the span metrics and the rules over them, ``gwms_factory=~"$factory"`` (board.SPAN_FACTORY_SEL).

    Without it a panel would mix every factory on the global Thanos query (or on a Prometheus
    several factories' collectors write to), whatever the factory variable says; with it the
    panel is the same on one factory's Prometheus, where the label is absent and the
    variable's All (".*") matches the empty string.
    """
    want = f"${FACTORY}"
    try:
        tree = pp.parse(substitute(expr, keep=(FACTORY,)))
    except ValueError as e:
        return [f"not PromQL: {e}: {expr}"]
    problems = []
    for sel in selectors(tree):
        span = sel.name in N.BY_SPAN_FACTORY
        label, matcher = (N.SPAN_FACTORY, SPAN_FACTORY_SEL) if span else (FACTORY, FACTORY_SEL)
        if not any(m.name == label and m.op == pp.MatchOp.Re and m.value == want for m in sel.matchers.matchers):
            problems.append(f"selector {sel} without {matcher}: {expr}")
    return problems


def metric_names(expr: str) -> set[str]:
    return {s.name for s in selectors(pp.parse(substitute(expr))) if s.name}


def dashboard_exprs(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """``(where, expr)`` of every panel target and query variable of a dashboard."""
    for p in doc.get("panels", []):
        for t in p.get("targets", []):
            yield f"{doc['uid']} panel {p['id']} {p['title']!r} {t['refId']}", t["expr"]
    for v in doc.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]
            # Grafana's label_values(expr, label) and query_result(expr) wrap PromQL
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)|query_result\((.*)\)", q, re.S)
            yield f"{doc['uid']} variable {v['name']}", (m.group(1) or m.group(2)) if m else q


def rule_exprs(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for g in doc["groups"]:
        for r in g["rules"]:
            yield f"{g['name']} {r.get('alert') or r.get('record')}", r["expr"]
