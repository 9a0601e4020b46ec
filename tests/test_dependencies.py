"""The wheel declares exactly what it imports (pyproject.toml against the package's imports).

- An import every run makes (at module level, not behind ``except ImportError``
  or ``TYPE_CHECKING``) needs a runtime dependency; the controller's modules may
  use the ``controller`` extra as well.
- Any other import needs a dependency or an extra.
- Every runtime dependency is imported by the package: nothing is declared that
  a user installs for nothing.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import tomllib
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "exporters" / "gwms_obs"
EXTRAS_OF_PACKAGE = {"controller": ("controller", "postgres")}  # subpackage -> extras its every run may need


def _name(req: str) -> str:
    m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req)
    assert m, req
    return re.sub(r"[-_.]+", "-", m.group(0)).lower()


def declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_name(r) for r in project["dependencies"]}
    extras = {k: {_name(r) for r in v} for k, v in project["optional-dependencies"].items()}
    return core, extras


@cache
def _module_files() -> dict[str, str]:
    """Dotted module path -> the installed distribution that ships it."""
    out: dict[str, str] = {}
    for d in md.distributions():
        name = _name(d.metadata["Name"])
        for f in d.files or ():
            p = str(f)
            if p.endswith(".py") and not p.startswith(".."):  # not a script installed beside the venv
                mod = p[:-3].replace("/", ".").removesuffix(".__init__")
                out.setdefault(mod, name)
    return out


def distribution(module: str) -> str | None:
    """The distribution of an imported dotted name: its deepest module a distribution ships."""
    files = _module_files()
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        d = files.get(".".join(parts[:i]))
        if d is not None:
            return d
    return None


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside a function, an ``except ImportError`` try, or ``if TYPE_CHECKING``: not every run's import."""
    p = parents.get(node)
    while p is not None:
        if isinstance(p, ast.FunctionDef | ast.AsyncFunctionDef):
            return True
        if isinstance(p, ast.Try) and any(
            isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError") for h in p.handlers
        ):
            return True
        if isinstance(p, ast.If) and "TYPE_CHECKING" in ast.unparse(p.test):
            return True
        p = parents.get(p)
    return False


def third_party_imports() -> list[tuple[Path, int, str, bool]]:
    """(file, line, dotted name, every run) for each import of another distribution."""
    out = []
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                names = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom) and not n.level and n.module:
                names = [f"{n.module}.{a.name}" for a in n.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in ("gwms_obs", "__future__"):
                    continue
                out.append((path, n.lineno, name, not _guarded(n, parents)))
    return out


def test_every_import_is_declared_and_every_run_import_is_a_dependency() -> None:
    core, extras = declared()
    any_extra = set().union(*extras.values())
    bad = []
    for path, line, name, every_run in third_party_imports():
        dist = distribution(name)
        where = f"{path.relative_to(ROOT)}:{line} imports {name}"
        if dist is None and not every_run and _name(name.split(".")[0]) in any_extra:
            continue  # an extra's module, not installed here (pyarrow for parquet)
        if dist is None:
            bad.append(f"{where}: no installed distribution ships it (install the dev extra?)")
            continue
        sub = path.relative_to(PKG).parts[0]
        allowed = core.union(*(extras[e] for e in EXTRAS_OF_PACKAGE.get(sub, ())))
        if every_run and dist not in allowed:
            bad.append(f"{where} on every run: {dist} must be a dependency (or the import guarded)")
        elif dist not in allowed | any_extra:
            bad.append(f"{where}: {dist} is declared nowhere (add an extra)")
    assert not bad, "\n".join(bad)


def test_every_dependency_is_imported_outside_an_extras_modules() -> None:
    core, _ = declared()
    used = {
        distribution(name)
        for path, _, name, _ in third_party_imports()
        if path.relative_to(PKG).parts[0] not in EXTRAS_OF_PACKAGE
    }
    unused = sorted(core - used)
    assert not unused, f"runtime dependencies nothing outside the controller imports (move them to an extra): {unused}"


def test_the_checks_see_real_imports() -> None:
    """The scan maps a namespace package's modules to the distribution that ships each."""
    assert distribution("opentelemetry.sdk.trace") == "opentelemetry-sdk"
    assert distribution("opentelemetry.trace") == "opentelemetry-api"
    assert distribution("prometheus_client.core") == "prometheus-client"
    names = {n for _, _, n, _ in third_party_imports()}
    assert any(n.startswith("defusedxml") for n in names)
