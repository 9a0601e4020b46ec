"""Bounded work per pilot file: total ads, total decompressed bytes, CPU seconds.

Per-section limits are not enough: a 3.7 MB .err of 150 sections, each of
tiny ads just under the per-section ad limit, held 15 million jobs (a
MemoryError at 6 GB), and 50 gzip sections of 60 MB each cost 31 CPU-seconds.
A :class:`Budget` is charged across every section of a file (or, when the
caller shares one, of a pilot's .out and .err together); the first limit
crossed raises :class:`BudgetExceeded`, which the reader catches, records as
reason ``budget`` and keeps in :attr:`Budget.exceeded` for the caller.

The ad and byte limits are deterministic: the same file always stops at the
same place, so ``export`` and ``report`` agree. The CPU limit is a backstop
for costs nobody foresaw; it is set far above what the other two allow
(see the measurements in tests/test_glidein_err.py), so no file built within
them can reach it. It is thread CPU time, not process time: the exporter's
HTTP and OTLP threads must not spend a pilot's budget.
"""

from __future__ import annotations

import time

REASON = "budget"  # the parse-error reason word

ADS = "ads"
DECODED_BYTES = "decoded_bytes"
SECTIONS = "sections"
CPU = "cpu"

MAX_ADS = 100_000  # a week-long pilot of one-minute jobs has ~10,000
MAX_DECODED_BYTES = 128 << 20  # two maximal (64 MB) sections; a real history log is a few MB
MAX_SECTIONS = 1_000  # framed sections; a real .err has ~10 (one per HTCondor log it returns)
MAX_CPU_SECONDS = 20.0  # backstop: the limits above allow ~2 s of work on one core
_CPU_EVERY = 1024  # ads between CPU checks: thread_time is a syscall


class BudgetExceeded(Exception):
    """Raised inside a reader when a :class:`Budget` limit is crossed."""

    def __init__(self, which: str, detail: str) -> None:
        super().__init__(f"{which} budget exceeded: {detail}")
        self.which = which  # ads | decoded_bytes | sections | cpu
        self.detail = detail


class Budget:
    """What one file (or one pilot's files) may cost; charged as the reader goes.

    ``exceeded`` is None until a limit is crossed, then the name of that limit
    (``ads``, ``decoded_bytes``, ``sections`` or ``cpu``); once set, every
    further charge raises again, so a shared budget also stops the next file.
    """

    __slots__ = (
        "_cpu0",
        "_cpu_tick",
        "ads",
        "decoded_bytes",
        "exceeded",
        "max_ads",
        "max_cpu_seconds",
        "max_decoded_bytes",
        "max_sections",
        "sections",
    )

    def __init__(
        self,
        *,
        max_ads: int = MAX_ADS,
        max_decoded_bytes: int = MAX_DECODED_BYTES,
        max_sections: int = MAX_SECTIONS,
        max_cpu_seconds: float = MAX_CPU_SECONDS,
    ) -> None:
        self.max_ads = max_ads
        self.max_decoded_bytes = max_decoded_bytes
        self.max_sections = max_sections
        self.max_cpu_seconds = max_cpu_seconds
        self.ads = 0
        self.decoded_bytes = 0
        self.sections = 0
        self.exceeded: str | None = None
        self._cpu0 = time.thread_time()
        self._cpu_tick = 0

    def _fail(self, which: str, detail: str) -> BudgetExceeded:
        if self.exceeded is None:
            self.exceeded = which
        return BudgetExceeded(which, detail)

    def _check_spent(self) -> None:
        if self.exceeded is not None:
            raise BudgetExceeded(self.exceeded, "already spent")

    def cpu(self) -> None:
        """Raise when this thread has spent more than ``max_cpu_seconds`` since the budget began."""
        self._check_spent()
        spent = time.thread_time() - self._cpu0
        if spent > self.max_cpu_seconds:
            raise self._fail(CPU, f"{spent:.1f} CPU seconds > {self.max_cpu_seconds:g}")

    def allows(self) -> bool:
        """Whether a read may start at all (else the reader that runs records why it may not)."""
        try:
            self.cpu()
        except BudgetExceeded:
            return False
        return True

    def left(self) -> tuple[int, int, int]:
        """What is still allowed: (sections, ads, decompressed bytes)."""
        return self.max_sections - self.sections, self.max_ads - self.ads, self.max_decoded_bytes - self.decoded_bytes

    def charge_within(self, sections: int, ads: int, decoded_bytes: int) -> None:
        """Charge work done within :meth:`left` elsewhere (the compiled reader, which checked it)."""
        self.sections += sections
        self.ads += ads
        self.decoded_bytes += decoded_bytes

    def ad(self) -> None:
        """Charge one ad (and look at the CPU clock every so often)."""
        self._check_spent()
        self.ads += 1
        if self.ads > self.max_ads:
            raise self._fail(ADS, f"more than {self.max_ads} ads")
        self._cpu_tick += 1
        if self._cpu_tick >= _CPU_EVERY:
            self._cpu_tick = 0
            self.cpu()

    def section(self) -> None:
        """Charge one framed section (and look at the CPU clock)."""
        self._check_spent()
        self.sections += 1
        if self.sections > self.max_sections:
            raise self._fail(SECTIONS, f"more than {self.max_sections} sections")
        self.cpu()

    def decode_limit(self, section_limit: int) -> int:
        """The most one section may decompress to: its own limit or what is left, the smaller."""
        return max(0, min(section_limit, self.max_decoded_bytes - self.decoded_bytes))

    def decoded(self, n: int) -> None:
        """Charge ``n`` decompressed bytes."""
        self.decoded_bytes += n
        if self.decoded_bytes > self.max_decoded_bytes:
            raise self._fail(DECODED_BYTES, f"more than {self.max_decoded_bytes} bytes decompressed")

    def over_decoded(self, section_limit: int) -> BudgetExceeded:
        """The error for a section refused because the file's byte budget, not its own limit, ran out."""
        return self._fail(
            DECODED_BYTES,
            f"more than {self.max_decoded_bytes} bytes decompressed in all (section limit {section_limit})",
        )
