"""GlideinWMS imported at run time from a checkout outside this repository, never copied into it.

The fixture scripts (tools/glideinwms_*.py) and benchmarks/peer_glideinwms.py run
GlideinWMS's own writers and parsers: its tree is put on ``sys.path`` as the
package ``glideinwms`` through a temporary directory holding one symlink to it.

    mkdir -p /tmp/glideinwms && git --git-dir=<glideinwms.git> archive HEAD | tar -x -C /tmp/glideinwms
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ENV = "GLIDEINWMS_SRC"


def add_argument(ap: argparse.ArgumentParser) -> None:
    """``--glideinwms DIR``, ``$GLIDEINWMS_SRC`` by default."""
    ap.add_argument(
        "--glideinwms", metavar="DIR", default=os.environ.get(ENV), help=f"a GlideinWMS source tree (default: ${ENV})"
    )


def checkout(ap: argparse.ArgumentParser, src: str | Path | None, marker: str) -> Path:
    """The tree ``src`` names, if it holds ``marker`` (a file GlideinWMS has); else ``ap.error``."""
    if not src or not (Path(src) / marker).is_file():
        ap.error(f"--glideinwms (or ${ENV}) must name a GlideinWMS source tree (with {marker})")
    return Path(src).expanduser().resolve()


def importable(tree: Path, prefix: str) -> Path:
    """Put ``tree`` on ``sys.path`` as ``glideinwms``: the temporary directory holding its symlink
    (the caller removes it when done, if it cares)."""
    shim = Path(tempfile.mkdtemp(prefix=prefix))
    (shim / "glideinwms").symlink_to(tree.resolve(), target_is_directory=True)
    sys.path.insert(0, str(shim))
    return shim
