"""The compiled fast path of the hot readers: the ``gwms_obs_native`` module, when installed.

``gwms-obs-native`` (built from ``native/``, a Rust crate through PyO3) reads
an ordinary .out, .err, completed_jobs or HTCondor-G event-log buffer several
times faster than the Python readers. It is a fast path only: for any input it does not fully
understand — anything the Python reader would record as a parse error, or a
construct it does not model (an XML entity, a ClassAd string escape, ...) — it
returns None and the Python reader, which stays the reference, reads the input.
So every guarantee on hostile input (bounded memory, counted parse errors,
good data kept around bad) is the Python reader's, and tests/test_native.py
holds the two equal on generated and hostile input.

The fast path is off when the module is absent (no wheel for the host), built
for another ABI (a stale build), or when ``GWMS_OBS_NATIVE=0`` is set.
"""

from __future__ import annotations

import os
from types import ModuleType

ABI = 10  # must equal the module's ABI (native/src/lib.rs)
ENV = "GWMS_OBS_NATIVE"


def _load() -> tuple[ModuleType | None, str]:
    if os.environ.get(ENV, "1") == "0":
        return None, f"{ENV}=0"
    try:
        import gwms_obs_native as mod
    except ImportError:
        return None, "gwms-obs-native not installed"
    abi = getattr(mod, "ABI", None)
    if abi != ABI:
        return None, f"gwms-obs-native ABI {abi}, this gwms-obs needs {ABI}"
    return mod, f"native {getattr(mod, '__version__', '?')}"


core, _state = _load()


def describe() -> str:
    """Which readers run: ``native <version>``, or ``python (<why>)``."""
    return _state if core is not None else f"python ({_state})"
