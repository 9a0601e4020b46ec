"""The package's layers, computed from its imports (type-checking imports included).

Data flows one way: sources → accounting → ingest → outputs, with the
controller beside them and the command line on top (docs/architecture.md,
"Layers"). A module may import its own layer and the layers ``ALLOWED``
lists below it; no import circle, between modules, anywhere.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "exporters"
PKG = "gwms_obs"

# The bottom: what every layer may read (errors, values, names, the catalogue).
BASE = frozenset(
    {
        "gwms_obs",
        "gwms_obs.settings",
        "gwms_obs.parse_errors",
        "gwms_obs.native",
        "gwms_obs.model",
        "gwms_obs.catalogue",
        "gwms_obs.tracing.conventions",
        "gwms_obs.tracing.redact",
    }
)
# Layer -> the layers it may import (itself and "base" always).
ALLOWED: dict[str, frozenset[str]] = {
    "base": frozenset(),
    "sources": frozenset(),
    "accounting": frozenset(),
    "controller": frozenset(),  # its own server, policy and client: nothing of the exporter
    "ingest": frozenset({"sources", "accounting"}),
    "tracing": frozenset({"accounting", "controller"}),  # the factory's tracer asks the controller
    "outputs": frozenset({"sources", "accounting", "ingest", "tracing"}),
    "analysis": frozenset({"sources", "accounting", "ingest", "tracing", "outputs"}),
    "simulate": frozenset({"sources", "tracing"}),
    "config": frozenset({"accounting", "ingest"}),
    # the exporter daemon's composition root: the scan loop wired to its outputs
    "daemon": frozenset({"sources", "accounting", "ingest", "tracing", "outputs", "config"}),
    "cli": frozenset(
        {
            "sources",
            "accounting",
            "controller",
            "ingest",
            "tracing",
            "outputs",
            "analysis",
            "simulate",
            "config",
            "daemon",
        }
    ),
}


def layer(mod: str) -> str:
    if mod in BASE:
        return "base"
    parts = mod.split(".")
    top = parts[1]
    if top in ("follow",):
        return "sources"  # the shared read loop over growing files
    if top == "pipeline":
        return "ingest"
    return top


def modules() -> dict[str, Path]:
    out = {}
    for p in (ROOT / PKG).rglob("*.py"):
        name = ".".join(p.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def imports(mod: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """Each gwms_obs module ``mod`` imports, with its line; ``from pkg import sub`` is ``pkg.sub``."""
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    for n in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(n, ast.Import):
            for a in n.names:
                if a.name in known:
                    yield a.name, n.lineno
        elif isinstance(n, ast.ImportFrom):
            if n.level:
                base = pkg.split(".")[: len(pkg.split(".")) - (n.level - 1)]
                target = ".".join(base + ([n.module] if n.module else []))
            else:
                target = n.module or ""
            if not target.startswith(PKG):
                continue
            for a in n.names:
                sub = f"{target}.{a.name}"
                yield (sub if sub in known else target), n.lineno


def graph() -> dict[str, dict[str, int]]:
    known = modules()
    return {m: {t: ln for t, ln in imports(m, p, known) if t != m and t in known} for m, p in known.items()}


def test_every_module_belongs_to_a_known_layer() -> None:
    unknown = sorted({layer(m) for m in modules()} - set(ALLOWED))
    assert not unknown, f"layers with no rule in ALLOWED: {unknown}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    bad = []
    for m, targets in graph().items():
        own = layer(m)
        ok = ALLOWED[own] | {own, "base"}
        for t, line in sorted(targets.items()):
            if layer(t) not in ok:
                bad.append(f"{m} ({own}) imports {t} ({layer(t)}), line {line}")
    assert not bad, "\n".join(bad)


def test_no_import_circle() -> None:
    g = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan: a strongly connected component of 2+ modules is a circle
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(g):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_graph_sees_a_circle_and_a_climb() -> None:
    """The checks above read real edges: the ingest stack does use the accounting, and the
    controller's metrics once imported its service (a circle, until metrics named a Protocol)."""
    g = graph()
    assert "gwms_obs.accounting.ledger" in g["gwms_obs.pipeline"]
    assert "gwms_obs.ingest.config" in g["gwms_obs.config"]
    assert layer("gwms_obs.ingest.books") == "ingest" and "controller" not in ALLOWED["ingest"]


def test_the_controller_loads_none_of_the_exporter() -> None:
    """Importing the controller's server, pages, client and command pulls in nothing of the ingest stack."""
    code = (
        "import sys\n"
        "import gwms_obs.controller.api, gwms_obs.controller.web, gwms_obs.controller.service\n"
        "import gwms_obs.controller.cli, gwms_obs.controller.client\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('gwms_obs.ingest', 'gwms_obs.pipeline',"
        " 'gwms_obs.sources', 'gwms_obs.accounting', 'gwms_obs.outputs', 'gwms_obs.config')))\n"
        "print(' '.join(bad))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert r.stdout.strip() == "", f"the controller imports: {r.stdout.strip()}"


# Run by alembic as a script, outside the package: the one module that names the package absolutely.
SCRIPTS = frozenset({"gwms_obs.controller.migrations.env"})


def test_one_import_style_inside_the_package() -> None:
    """Modules import their siblings relatively (``from ..catalogue import``), in every package alike."""
    absolute = []
    for m, path in modules().items():
        if m in SCRIPTS:
            continue
        for n in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(n, ast.ImportFrom) and not n.level:
                names = [n.module or ""]
            elif isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            else:
                continue
            if any(x.split(".")[0] == PKG for x in names):
                absolute.append(f"{path.relative_to(ROOT)}:{n.lineno}")
    assert not absolute, f"absolute imports of gwms_obs inside it: {absolute}"
