"""The factory's client of the controller's ``GET /v1/decide`` (the pilot's is gwms-trace.sh's gwms_trace_control).

``ControllerClient(url, token).decide(attrs)`` returns the controller's
``policy.Decision`` for a pilot's attributes, or None, in which case the caller
uses its own default. It never raises and never waits longer than ``timeout``
per socket operation (stdlib urllib). A factory cycle submits many clusters of
few entry/frontend pairs, so each answer is cached per attributes for ``ttl``
seconds. A failure is cached too: a refused or malformed answer for its
attributes for ``failure_ttl``, and an unreachable, timed-out or failing (5xx)
controller for everyone for ``failure_ttl`` (no request is made meanwhile), so
a dead controller costs one timeout per ``failure_ttl``, not one per cluster.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from .policy import DEFAULT, SELECTOR_FIELDS, Attributes, Decision, Effect, Kind

log = logging.getLogger(__name__)

MAX_ANSWER = 64 << 10  # bytes read of an answer at most (a real one is ~150)
_KINDS = frozenset({DEFAULT, Kind.VO.value, Kind.SITE.value, Kind.OPERATOR.value})
_KEYS = ("verbosity", "sample", "record_commands", "sample_threshold", "rule", "kind", "capped_by")

# what a lookup came to: the root attribute gwms.controller.result's values
ANSWERED, TIMEOUT, ERROR = "answered", "timeout", "error"


def parse_decision(doc: object) -> Decision | None:
    """A decide answer as a Decision, or None unless it has exactly the contract's keys and types."""
    if not isinstance(doc, dict) or set(doc) != set(_KEYS):
        return None
    rule, kind, capped = doc["rule"], doc["kind"], doc["capped_by"]
    if rule is not None and (isinstance(rule, bool) or not isinstance(rule, int)):
        return None
    if kind not in _KINDS or not isinstance(capped, list):
        return None
    if any(isinstance(c, bool) or not isinstance(c, int) for c in capped):
        return None
    sample = doc["sample"]
    if isinstance(sample, bool) or not isinstance(sample, int | float) or not math.isfinite(sample):
        return None
    try:
        effect = Effect.from_mapping({k: doc[k] for k in ("verbosity", "sample", "record_commands")})
    except (ValueError, TypeError):
        return None
    return Decision(effect, rule, kind, tuple(capped))


class ControllerClient:
    """Asks the controller for decisions; caches them; never raises."""

    def __init__(
        self,
        url: str,
        token: str | Callable[[], str] = "",
        timeout: float = 2.0,
        ttl: float = 60.0,
        *,
        failure_ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/") + "/v1/decide"
        self._token = token
        self.timeout = timeout
        self.ttl = ttl
        self.failure_ttl = failure_ttl
        self.clock = clock
        self.requests = 0  # made, for tests and logs
        self._cache: dict[Attributes, tuple[float, Decision | None, str]] = {}
        self._down_until = -math.inf
        self._lock = threading.Lock()  # one request at a time: concurrent callers wait for its answer

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ControllerClient | None:
        """GWMS_OBS_CONTROLLER_URL (and GWMS_OBS_CONTROLLER_TOKEN_FILE, re-read at each request), or None."""
        url = env.get("GWMS_OBS_CONTROLLER_URL", "").strip()
        if not url:
            return None
        token_file = env.get("GWMS_OBS_CONTROLLER_TOKEN_FILE", "").strip()
        return cls(url, (lambda: _read_token(token_file)) if token_file else "")

    def decide(self, attrs: Attributes) -> Decision | None:
        """The controller's decision for ``attrs``; None: use your default."""
        return self.lookup(attrs)[0]

    def lookup(self, attrs: Attributes) -> tuple[Decision | None, str]:
        """The decision and how it was come by (ANSWERED, TIMEOUT or ERROR), from the cache when fresh."""
        try:
            with self._lock:
                now = self.clock()
                hit = self._cache.get(attrs)
                if hit is not None and now < hit[0]:
                    return hit[1], hit[2]
                if now < self._down_until:
                    return None, ERROR
                decision, result, everyone = self._ask(attrs)
                now = self.clock()
                if decision is not None:
                    self._cache[attrs] = (now + self.ttl, decision, result)
                elif everyone:
                    self._down_until = now + self.failure_ttl
                else:
                    self._cache[attrs] = (now + self.failure_ttl, None, result)
                if len(self._cache) > 10_000:  # attributes are bounded in practice; memory is, regardless
                    self._cache = {k: v for k, v in self._cache.items() if now < v[0]}
                return decision, result
        except Exception:  # a tracing aid must never fail a submit
            log.exception("controller lookup failed")
            return None, ERROR

    def _ask(self, attrs: Attributes) -> tuple[Decision | None, str, bool]:
        """One request: (decision, result, whether the failure is the controller's rather than these attributes')."""
        query = urlencode({f: getattr(attrs, f) for f in SELECTOR_FIELDS})
        req = urllib.request.Request(f"{self.url}?{query}", headers={"Accept": "application/json"})
        token = self._token() if callable(self._token) else self._token
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        self.requests += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                status = resp.status
                body = resp.read(MAX_ANSWER + 1)
        except urllib.error.HTTPError as e:
            log.warning("controller %s: HTTP %s", self.url, e.code)
            return None, ERROR, e.code >= 500
        except (TimeoutError, urllib.error.URLError, OSError) as e:
            timed_out = isinstance(e, TimeoutError) or isinstance(getattr(e, "reason", None), TimeoutError)
            log.warning("controller %s: %s", self.url, e)
            return None, TIMEOUT if timed_out else ERROR, True
        if status != 200 or len(body) > MAX_ANSWER:
            log.warning("controller %s: status %s, %d bytes", self.url, status, len(body))
            return None, ERROR, False
        try:
            doc: Any = json.loads(body)
        except ValueError:
            doc = None
        decision = parse_decision(doc)
        if decision is None:
            log.warning("controller %s: an answer not in the decide contract", self.url)
            return None, ERROR, False
        return decision, ANSWERED, False


def _read_token(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as e:
        log.warning("controller token file %s: %s", path, e)
        return ""
