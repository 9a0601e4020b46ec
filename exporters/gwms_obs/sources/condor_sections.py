"""The gzip | uuencode framing glideins use to return files in their stderr.

``condor_startup.sh`` (``cond_print_log``) writes each HTCondor log as::

    StartdHistoryLog
    ======== gzip | uuencode =============
    begin-base64 644 -
    H4sIAAAAAAAAA...
    ====

gwms-trace.sh returns its span spool the same way (section ``GWMSTraceSpool``).
Both directions live here: the readers decode, the simulator and tests encode.
"""

from __future__ import annotations

import binascii
import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

FRAME = b"======== gzip | uuencode ============="
_BEGIN = b"begin-base64 "
_END = b"\n===="
MAX_NAME = 200


class SectionError(ValueError):
    """A section that cannot be decoded; ``reason`` is a short metric-safe word."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason


@dataclass(slots=True)
class RawSection:
    name: str
    offset: int  # byte offset of the name line in the file
    payload: bytes | None  # base64 text; None when the framing is broken
    problem: str | None = None  # why payload is None


def iter_sections(data: bytes) -> Iterator[RawSection]:
    """Yield every framed section in ``data``, in order, in one linear pass.

    A section with broken framing (no ``begin-base64`` line, no ``====``
    terminator) is yielded with ``payload=None`` and scanning resumes after
    its frame line, so one bad section never hides the ones after it.
    """
    pos = 0
    while True:
        f = data.find(FRAME, pos)
        if f < 0:
            return
        line_start = data.rfind(b"\n", 0, max(f - 1, 0)) + 1 if f > 0 else 0
        name_bytes = data[line_start : max(f - 1, line_start)]
        name = name_bytes[-MAX_NAME:].decode("utf-8", "replace").strip()
        after = f + len(FRAME)
        # Optional blank line(s), then the begin-base64 header.
        hdr = after
        while data[hdr : hdr + 1] in (b"\n", b"\r"):
            hdr += 1
        if not data.startswith(_BEGIN, hdr):
            yield RawSection(name, line_start, None, "no_begin_line")
            pos = after
            continue
        body_start = data.find(b"\n", hdr)
        if body_start < 0:
            yield RawSection(name, line_start, None, "truncated")
            return
        end = data.find(_END, body_start)
        # The terminator must be "====" on a line of its own, not a base64 line
        # that happens to start with it.
        while end >= 0 and data[end + len(_END) : end + len(_END) + 1] not in (b"\n", b"\r", b""):
            end = data.find(_END, end + 1)
        if end < 0:
            yield RawSection(name, line_start, None, "truncated")
            return
        next_frame = data.find(FRAME, body_start, end)
        if next_frame >= 0:  # a later section began before this one ended
            yield RawSection(name, line_start, None, "truncated")
            pos = after
            continue
        yield RawSection(name, line_start, data[body_start + 1 : end])
        pos = end + len(_END)


def decode(payload: bytes, limit: int) -> bytes:
    """base64 → gunzip, refusing more than ``limit`` bytes of output (gzip bombs)."""
    try:
        raw = binascii.a2b_base64(payload)
    except (binascii.Error, ValueError) as e:
        raise SectionError("bad_base64", str(e)) from None
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(raw, limit + 1)
    except zlib.error as e:
        raise SectionError("bad_gzip", str(e)) from None
    if len(out) > limit or d.unconsumed_tail:
        raise SectionError("too_large", f"more than {limit} bytes decompressed")
    if not d.eof:
        raise SectionError("bad_gzip", "truncated gzip stream")
    return out


def encode(name: str, content: bytes, level: int = 6) -> bytes:
    """The framed block, byte for byte as a glidein writes it (76-column base64).

    Level 6 is what ``gzip --stdout`` in condor_startup.sh uses.
    """
    b64 = binascii.b2a_base64(gzip.compress(content, compresslevel=level, mtime=0), newline=False)
    lines = b"\n".join(b64[i : i + 76] for i in range(0, len(b64), 76))
    return name.encode() + b"\n" + FRAME + b"\n" + _BEGIN + b"644 -\n" + lines + b"\n====\n"
