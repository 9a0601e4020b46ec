"""A minimal reader of HTCondor history-file ClassAds (``StartdHistoryLog``).

A history file is a run of ads, each a block of ``Attr = value`` lines,
separated by banner lines (``*** Offset = 0 ClusterId = 40 ...``) or blank
lines. Only literal values are understood (integers, reals, quoted strings,
``true``/``false``/``undefined``); any other expression is returned as an
:class:`Expr`, its raw text, so callers can tell it from a string literal.

Ads are looked up lazily: a pilot's history holds ~100 attributes per job and
the readers want a dozen, so :meth:`Ad.get` searches the ad's bytes for one
``\\nName = `` instead of parsing every line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator

MAX_VALUE = 64 << 10  # longer values are not literals we care about
MAX_ADS = 100_000


class Expr(str):
    """An unevaluated ClassAd expression, kept as its source text."""

    __slots__ = ()


Value = int | float | bool | str | None

# ASCII only: a str pattern's \d matches any Unicode digit ("١"), which int() reads.
_INT = re.compile(r"[+-]?\d{1,19}", re.ASCII)
_REAL = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,4})?", re.ASCII)
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"', re.S)
_ESCAPE = re.compile(r"\\(.)", re.S)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "\\": "\\", '"': '"', "'": "'"}
# A separator: a banner line or a blank (whitespace-only) line. The lookahead
# on the first byte lets most lines be rejected at once (2x faster scan).
_SEP = re.compile(rb"\n(?=[*\n \t\r])(?:\*\*\*[^\n]*+|[ \t\r]*+)(?=\n)")


def _unescape(m: re.Match[str]) -> str:
    # Unknown escapes keep their backslash, as old-ClassAd paths ("C:\dir") need.
    return _ESCAPES.get(m.group(1), m.group(0))


def parse_value(text: str) -> Value:
    """A literal's Python value; anything that is not a literal → :class:`Expr`."""
    s = text.strip()
    if not s:
        return Expr(s)
    c = s[0]
    if c == '"':
        m = _STRING.fullmatch(s)
        if m is None:  # e.g. "a" + "b"
            return Expr(s)
        body = m.group(1)
        return _ESCAPE.sub(_unescape, body) if "\\" in body else body
    if c.isdigit() or c in "+-.":
        if _INT.fullmatch(s):
            return int(s)
        if len(s) <= 64 and _REAL.fullmatch(s):
            v = float(s)
            return v if math.isfinite(v) else Expr(s)
        return Expr(s)
    low = s.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    if low == "undefined":
        return None
    return Expr(s)


class Ad:
    """One ad as raw bytes; attribute values are parsed on demand."""

    __slots__ = ("_buf",)

    def __init__(self, raw: bytes) -> None:
        # A leading newline lets every attribute be found as b"\nName = ".
        self._buf = raw if raw.startswith(b"\n") else b"\n" + raw

    def raw(self, name: str) -> str | None:
        """The first ``name = ...`` value text, or None when absent."""
        key = b"\n" + name.encode("ascii") + b" = "
        i = self._buf.find(key)
        if i < 0:
            return None
        i += len(key)
        j = self._buf.find(b"\n", i, i + MAX_VALUE + 1)
        if j < 0:
            j = len(self._buf)
            if j - i > MAX_VALUE:
                return ""  # an over-long value is no literal
        return self._buf[i:j].decode("utf-8", "replace")

    def get(self, name: str) -> Value:
        """The value of ``name`` (None when absent or ``undefined``)."""
        text = self.raw(name)
        return None if text is None else parse_value(text)

    def pick_raw(self, names: re.Pattern[bytes]) -> dict[bytes, bytes]:
        """The attributes matched by a :func:`names_pattern`, in one pass (first wins), values
        left unparsed: ``{name: raw value text}``.

        One C-level ``findall``; callers parse only the values they use.
        """
        return dict(reversed(names.findall(self._buf)))  # reversed: the first one wins

    def attrs(self) -> dict[str, Value]:
        """Every attribute of the ad (slow path, for tools and tests)."""
        out: dict[str, Value] = {}
        for line in self._buf.decode("utf-8", "replace").splitlines():
            name, sep, value = line.partition(" = ")
            if sep and name and " " not in name and name not in out:
                out[name] = parse_value(value[:MAX_VALUE])
        return out


def names_pattern(names: tuple[str, ...]) -> re.Pattern[bytes]:
    """A pattern for :meth:`Ad.pick`; over-long values do not match (absent)."""
    alt = b"|".join(re.escape(n.encode("ascii")) for n in names)
    # Possessive: an over-long value fails at once instead of backtracking MAX_VALUE times.
    return re.compile(rb"\n(" + alt + rb") = ([^\n]{0,%d}+)(?=\n|\Z)" % MAX_VALUE)


def iter_ads(data: bytes, max_ads: int = MAX_ADS) -> Iterator[Ad]:
    """Yield the non-empty ads of a history file, at most ``max_ads``.

    Separators are found by one regex pass; each ad costs nothing until read.
    """
    if b"\r" in data:  # memchr; the two-byte search of replace() is much slower
        data = data.replace(b"\r\n", b"\n")
    buf = b"".join((b"\n", data, b"\n"))  # one copy; a + b + c makes two (a 64 MB section's peak)
    pos = 0
    n = 0
    for m in _SEP.finditer(buf):
        chunk = buf[pos : m.start()]
        pos = m.end()
        if chunk and not chunk.isspace():  # as chunk.strip(), without the copy
            if n >= max_ads:
                return
            n += 1
            yield Ad(chunk)
    chunk = buf[pos:]
    if chunk and not chunk.isspace() and n < max_ads:
        yield Ad(chunk)
