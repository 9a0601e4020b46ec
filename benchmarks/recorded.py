"""Writing a benchmark's figures to benchmarks/results/ (shared by the benchmark scripts)."""

from __future__ import annotations

from pathlib import Path


def record(out: Path, text: str) -> None:
    """Write ``text`` to ``out``, keeping a hand-written "## Analysis" section already there.

    The figures are the script's; the analysis (where the time goes, what was
    tried) is a person's, and survives re-recording.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    old = out.read_text() if out.exists() else ""
    i = old.find("\n## Analysis")
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text + old[i:] if i >= 0 else text)
    tmp.replace(out)
    print(f"recorded in {out}")
