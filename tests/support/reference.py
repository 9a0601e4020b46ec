"""The GlideinWMS reference samples: real factory files kept beside the repository, not in it.

They sit in ``../shared/reference/glideinwms`` of a development checkout; a
plain clone has none, so a test that needs one skips, naming what is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference" / "glideinwms"
SKIP_REASON = "GlideinWMS reference samples absent"


def reference_file(name: str) -> Path:
    """``REFERENCE / name``, or a skip saying it is absent."""
    path = REFERENCE / name
    if not path.is_file():
        pytest.skip(f"{SKIP_REASON}: {path} (they sit beside the repository, in ../shared/reference)")
    return path
