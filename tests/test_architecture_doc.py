"""docs/architecture.md names real files and real functions: its trail from a log line to a
panel, its layers table and its source table are checked against the tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PKG = ROOT / "exporters" / "gwms_obs"
# `path` (`symbol`, ...): a file and what it defines; `symbol` may be Class.method
_NAMED = re.compile(r"`([\w./-]+\.py)`\s*\(`([\w.]+)`")
_PATH = re.compile(r"`([\w./-]+/|[\w./-]+\.(?:py|json|md|sh|yml|yaml))`")


def _resolve(p: str) -> Path | None:
    """A path as the doc writes it: from the repository's root, or inside the package."""
    for base in (ROOT, PKG, PKG / "ingest"):
        if (base / p).exists():
            return base / p
    return None


def _defines(path: Path, symbol: str) -> bool:
    tree = ast.parse(path.read_text(), str(path))
    head, _, rest = symbol.partition(".")
    for n in tree.body:
        names: list[str] = []
        if isinstance(n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names = [n.name]
        elif isinstance(n, ast.Assign):
            names = [t.id for t in n.targets if isinstance(t, ast.Name)]
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            names = [n.target.id]
        if head not in names:
            continue
        if not rest:
            return True
        if isinstance(n, ast.ClassDef):
            return any(isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name == rest for m in n.body)
    return False


def test_every_path_the_doc_names_exists() -> None:
    text = DOC.read_text()
    paths = set(_PATH.findall(text))
    assert len(paths) > 30, "the check found too few paths to mean anything"
    missing = sorted(p for p in paths if "<" not in p and _resolve(p) is None)
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_function_the_trail_names_is_defined_there() -> None:
    text = DOC.read_text()
    pairs = _NAMED.findall(text)
    assert len(pairs) >= 12, pairs
    wrong = []
    for p, symbol in pairs:
        path = _resolve(p)
        if path is None or not _defines(path, symbol):
            wrong.append(f"{p} ({symbol})")
    assert not wrong, f"docs/architecture.md names what these files do not define: {wrong}"


def test_the_trail_reaches_the_panel_through_each_layer() -> None:
    """The trail starts at the reader and ends at the generated board, in order."""
    trail = DOC.read_text().split("## Follow one line to a panel", 1)[1].split("\n## ", 1)[0]
    order = [
        "pipeline.py",
        "ingest/completed_jobs.py",
        "sources/completed_jobs.py",
        "accounting/pilot.py",
        "ingest/books.py",
        "accounting/ledger.py",
        "outputs/prometheus.py",
        "catalogue.py",
        "dashboards/gen/boards/accounting.py",
        "dashboards/grafana/gwms-accounting.json",
    ]
    at = [trail.find(x) for x in order]
    assert -1 not in at and at == sorted(at), dict(zip(order, at, strict=True))


def test_the_check_catches_a_wrong_name() -> None:
    assert not _defines(PKG / "outputs" / "prometheus.py", "FactoryCollector.no_such_method")
    assert _defines(PKG / "outputs" / "prometheus.py", "FactoryCollector.collect")
    assert _resolve("dashboards/gen/dashboards.py") is not None and _resolve("dashboards/gen/nope.py") is None
