"""Bad input is skipped, counted by (source, reason), and logged once.

Every reader takes a :class:`ParseErrors` and calls :meth:`ParseErrors.record`
for each piece of input it cannot use; it then carries on with the rest. The
exporter turns the counts into ``gwms_obs_parse_errors_total``.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

log = logging.getLogger("gwms_obs.parse")

_MAX_LOGGED_KEYS = 10_000  # bounds memory when a hostile tree has millions of bad files


class ParseErrors:
    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._logged: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def record(self, source: str, reason: str, path: str, offset: int | None = None, detail: str = "") -> None:
        """Count one skipped piece of input; log the first per (source, reason, file)."""
        with self._lock:
            self.counts[(source, reason)] += 1
            key = (source, reason, path)
            if key in self._logged:
                return
            if len(self._logged) < _MAX_LOGGED_KEYS:
                self._logged.add(key)
        where = f"{path}" if offset is None else f"{path} at byte {offset}"
        # The detail comes from hostile input: cut it and make it printable.
        detail = detail[:200].encode("ascii", "backslashreplace").decode("ascii")
        log.warning("skipped %s input (%s) in %s%s", source, reason, where, f": {detail}" if detail else "")

    def total(self, source: str | None = None) -> int:
        return sum(n for (s, _), n in self.counts.items() if source is None or s == source)
