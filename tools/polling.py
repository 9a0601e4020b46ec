"""Bounded waiting for local servers: the one poll loop of the tests, benchmarks and harnesses.

Never a bare sleep to let a race settle: ``poll`` retries a check until it
holds or a deadline passes, and says what it was waiting for.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def http_get(url: str, timeout: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # loopback URLs of our own servers
        body: bytes = r.read()
        return body


def poll(what: str, fn: Callable[[], T | None], timeout: float = 30.0, step: float = 0.1) -> T:
    """Call ``fn`` until it returns something truthy; TimeoutError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except (OSError, ValueError, KeyError, IndexError) as e:
            last = e
        time.sleep(step)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}" + (f" (last error: {last})" if last else ""))
