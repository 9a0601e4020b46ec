"""What the controller accepts from a request: every field checked and bounded before it is stored or audited.

The JSON API (api.py) and the web page (web.py) build their rule requests,
ids and reasons here, so a field means the same and is refused the same way
whichever door it came in by, with ``Denied("invalid")`` naming the field.
What is kept of a refused request goes through :func:`visible`, whose output
every backend stores and every page shows as it is: a NUL (PostgreSQL's text
refuses it), a lone surrogate (SQLite cannot encode it), a control or
bidirectional-override character (it would rewrite the audit page for its
reader) become a visible escape such as ``\\u202e``.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping
from typing import Any

from .policy import Denied, Effect, Kind, Selector

MAX_REASON = 500  # characters of a change's reason
MAX_DETAIL = 1000  # characters of a refusal's detail, or of a refused request's reason, as audited
MAX_DEPTH = 4  # a rule request nests two levels ({"effect": {"verbosity": ...}}); more is not a rule
# the latest expiry accepted, from now: past ten years a rule is open-ended in all but name, and a
# millisecond timestamp (1.8e12: year 59,000) no date formatter shows
MAX_HORIZON = 10 * 366 * 86400.0
MAX_ID_DIGITS = 18  # ids and counts fit a signed 64-bit integer
STATUS = {
    "read_only": 403, "wrong_kind": 403, "out_of_scope": 403, "above_cap": 403, "invalid": 400, "not_found": 404,
}  # fmt: skip

# the bidirectional formatting characters (Unicode's Bidi_Control property): they reorder the text after them
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cs", "Zl", "Zp"})  # controls, surrogates, line and paragraph separators


def _unsafe(c: str) -> bool:
    return c in _BIDI or unicodedata.category(c) in _UNSAFE_CATEGORIES


def first_unsafe(text: str) -> str | None:
    """The first character of ``text`` that may not be stored or shown as it is, or None."""
    if text.isprintable():  # every unsafe character is unprintable: the common case costs one C call
        return None
    return next((c for c in text if _unsafe(c)), None)


def visible(text: str, limit: int = MAX_DETAIL) -> str:
    """``text`` as it may be stored and shown: each unsafe character as its escape, at most ``limit`` characters."""
    if first_unsafe(text) is not None:
        text = "".join(ascii(c)[1:-1] if _unsafe(c) else c for c in text[: limit * 2])
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_reason(reason: object) -> str:
    """A change's reason, stripped; Denied("invalid") unless it is one line of printable text."""
    if not isinstance(reason, str) or not reason.strip():
        raise Denied("invalid", "a change needs a reason (the audit log's why)")
    if len(reason) > MAX_REASON:
        raise Denied("invalid", f"reason: at most {MAX_REASON} characters")
    bad = first_unsafe(reason)
    if bad is not None:
        raise Denied(
            "invalid",
            f"reason: one line of printable text; {ascii(bad)[1:-1]} is a control, surrogate or "
            "bidirectional-override character",
        )
    return reason.strip()


def number(value: object, name: str, high: float) -> float:
    """A positive JSON number at most ``high``; Denied("invalid") for anything else (a bool, 10**400, NaN, a string)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok and isinstance(value, int) and abs(value) > 1 << 63:  # float() of 10**400 raises
        ok = False
    v = float(value) if ok else math.nan  # type: ignore[arg-type]
    if not (math.isfinite(v) and 0 < v <= high):
        raise Denied("invalid", f"{name} must be a positive number, at most {high:.10g}")
    return v


def parse_id(raw: str, name: str, reason: str = "invalid") -> int:
    """An id or count from a path or query: 1 to 18 ASCII digits. Denied(``reason``) otherwise."""
    if raw.isascii() and raw.isdigit() and len(raw) <= MAX_ID_DIGITS:
        return int(raw)
    shown = visible(raw, 40)
    raise Denied(reason, f"no {name} {shown!r}" if reason == "not_found" else f"{name} {shown!r}: a whole number")


def depth(value: object) -> int:
    """How deep a parsed JSON value nests (a scalar: 0), without recursion."""
    deepest, todo = 0, [(value, 0)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, dict):
            v = list(v.values())
        if isinstance(v, list):
            d += 1
            deepest = max(deepest, d)
            if d <= MAX_DEPTH:  # deeper is refused whatever is below
                todo.extend((x, d) for x in v)
    return deepest


def rule_request(body: Mapping[str, Any], now: float) -> tuple[Kind, Selector, Effect, str, float | None]:
    """A rule to create, from a JSON body or a form; Denied("invalid") names what is wrong.

    The reason is only required to be a string here: whether it is a good one is
    the controller's check, after whether this principal may make the rule at all.
    """
    if depth(body) > MAX_DEPTH:
        raise Denied("invalid", f"the body nests deeper than {MAX_DEPTH} levels")
    unknown = set(body) - {"kind", "selector", "effect", "reason", "expires", "hours"}
    if unknown:
        names = ", ".join(sorted(visible(str(k), 40) for k in unknown)[:8])
        raise Denied("invalid", f"unknown field(s) {names}")
    kind_raw = body.get("kind")
    if not isinstance(kind_raw, str) or kind_raw not in {k.value for k in Kind}:
        raise Denied("invalid", f"kind: one of {', '.join(k.value for k in Kind)}")
    kind = Kind(kind_raw)
    selector_raw, effect_raw = body.get("selector", {}), body.get("effect")
    if not isinstance(selector_raw, dict) or not isinstance(effect_raw, dict):
        raise Denied("invalid", "selector and effect must be objects")
    try:
        selector = Selector.from_mapping(selector_raw)
        effect = Effect.from_mapping(effect_raw)
    except ValueError as e:
        raise Denied("invalid", visible(str(e))) from None
    reason = body.get("reason", "")
    if not isinstance(reason, str):
        raise Denied("invalid", "reason must be a string")
    expires, hours = body.get("expires"), body.get("hours")
    if expires is not None and hours is not None:
        raise Denied("invalid", "give expires or hours, not both")
    if hours is not None:
        return kind, selector, effect, reason, now + number(hours, "hours", MAX_HORIZON / 3600) * 3600.0
    if expires is not None:
        # Unix seconds: from 1970 (a time already past is the controller's "expires before it starts")
        return kind, selector, effect, reason, number(expires, "expires (Unix seconds)", now + MAX_HORIZON)
    return kind, selector, effect, reason, None


__all__ = [
    "MAX_HORIZON",
    "MAX_REASON",
    "STATUS",
    "check_reason",
    "depth",
    "first_unsafe",
    "number",
    "parse_id",
    "rule_request",
    "visible",
]
