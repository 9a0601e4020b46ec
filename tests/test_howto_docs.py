"""The how-tos name what a change really takes, held to the tree: adding a source and a metric with
a panel and an alert (docs/architecture.md), adding a component with its offline image
(docs/deploy.md). Each was followed on a toy before it was written; these tests find, in the code,
the lists a new source or component must join, and fail when a how-to does not name one."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from gwms_obs.accounting import ledger
from gwms_obs.ingest import STAGES
from gwms_obs.simulate import WRITERS

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "exporters" / "gwms_obs"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
DEPLOY = ROOT / "docs" / "deploy.md"
_PATH = re.compile(r"`([\w./-]+/|[\w./<>-]+\.(?:py|json|md|sh|yml|yaml|Dockerfile))`")
# The files each role of deploy.yml has (the component how-to's first step).
ROLE_FILES = (
    "defaults/main.yml",
    "meta/argument_specs.yml",
    "meta/main.yml",
    "tasks/preflight.yml",
    "tasks/main.yml",
    "compose.yml",
)
# Names of files a component writes on its host, not paths of this tree.
RENDERED = {"prometheus.yml"}


def _section(doc: Path, title: str) -> str:
    text = doc.read_text()
    assert title in text, f"{doc.name} has no {title!r}"
    body = text.split(title, 1)[1]
    return re.split(r"\n##+ ", body, maxsplit=1)[0]


def _named(section: str, path: Path) -> bool:
    """Whether the section names ``path`` (from the root, or inside the package)."""
    names = {path.relative_to(ROOT).as_posix()}
    if PKG in path.parents:
        names.add(path.relative_to(PKG).as_posix())
    return any(f"`{n}`" in section for n in names)


def _code_files() -> list[Path]:
    return sorted([*PKG.rglob("*.py"), *(ROOT / "tests").glob("*.py")])


def _source_registries() -> set[Path]:
    """The files a new source must be added to: those naming every stage class, importing every
    simulator writer, listing every stage's steps, or pinning the simulated tree byte for byte."""
    classes = [c.__name__ for c in STAGES]
    writers = [m.__name__.rsplit(".", 1)[1] for m in WRITERS.values()]
    steps = [f'"{c.sources[0].value} read"' for c in STAGES]
    found: set[Path] = set()
    for p in _code_files():
        if p.parent.name == "ingest" and p.stem in {c.__module__.rsplit(".", 1)[1] for c in STAGES}:
            continue  # a stage's own module
        text = p.read_text()
        if all(re.search(rf"\b{c}\b", text) for c in classes):
            found.add(p)
        if all(re.search(rf"^\s+{w},$", text, re.MULTILINE) for w in writers):
            found.add(p)  # the import list of every writer (simulate.WRITERS)
        if all(s in text for s in steps):
            found.add(p)
        if p.parent == ROOT / "tests" and "_PINNED" in text and "simulate(" in text:
            found.add(p)
    # the simulator itself: what calls the writers (WRITERS is only their registry)
    found |= {p for p in (PKG / "simulate").glob("*.py") if "from .write import" in p.read_text()}
    return found


def test_the_source_howto_names_every_list_a_source_joins() -> None:
    section = _section(ARCHITECTURE, "### How to add a source")
    registries = _source_registries()
    assert {PKG / "pipeline.py", PKG / "ingest" / "__init__.py", PKG / "simulate" / "__init__.py"} <= registries
    missing = sorted(p.relative_to(ROOT).as_posix() for p in registries if not _named(section, p))
    assert not missing, f"'How to add a source' does not name {missing}, which list every source"
    for contract in ("tests/test_sources_contract.py", "exporters/gwms_obs/catalogue.py"):
        assert f"`{contract}`" in section


def test_the_metric_howto_names_the_served_tables_and_what_is_generated() -> None:
    section = _section(ARCHITECTURE, "### How to add a metric with a panel and an alert")
    tables = [n for n, v in vars(ledger).items() if isinstance(v, tuple) and v and isinstance(v[0], ledger.Served)]
    assert {"COUNTERS", "HISTOGRAMS", "GAUGES"} <= set(tables)
    for name in ("COUNTERS", "HISTOGRAMS", "GAUGES", "Served", "Ledger.version"):
        assert f"`{name}`" in section, name
    sys.path.insert(0, str(ROOT))
    try:
        from dashboards import gen
    finally:
        sys.path.remove(str(ROOT))
    # every directory the dashboards' generator writes, and the promtool tests' generators
    for d in sorted({k.rsplit("/", 1)[0] for k in gen.render_all()} - {"dashboards"}):
        assert d in section, f"'How to add a metric' does not say {d} is generated"
    for p in ("dashboards/gen/rules.py", "dashboards/gen/config.py", "dashboards/gen/rule_tests.py"):
        assert f"`{p}`" in section and (ROOT / p).is_file(), p
    assert "docs/runbooks.md" in section and "tests/test_rules.py" in section


def test_every_path_the_component_howto_names_exists() -> None:
    section = _section(DEPLOY, "## How to add a component")
    deploy = yaml.safe_load((ROOT / "ansible" / "deploy.yml").read_text())
    roles = {r for play in deploy if "roles" in play for r in play["roles"]}
    missing = []
    for p in set(_PATH.findall(section)):
        if "<" in p or p in RENDERED:
            continue
        if p in ROLE_FILES:  # inside each role
            missing += [
                f"ansible/roles/{r}/{p}" for r in sorted(roles) if not (ROOT / "ansible/roles" / r / p).exists()
            ]
        elif not (ROOT / p).exists():
            missing.append(p)
    assert not missing, f"docs/deploy.md's 'How to add a component' names what is not there: {missing}"
    assert set(ROLE_FILES) <= set(_PATH.findall(section))


def test_every_offline_image_has_the_dockerfile_and_spec_the_howto_says() -> None:
    sys.path.insert(0, str(ROOT))
    try:
        from tools import images
    finally:
        sys.path.remove(str(ROOT))
    section = _section(DEPLOY, "## How to add a component")
    assert "`compose/offline/<service>.Dockerfile`" in section and "`tools/images.py`" in section
    specs = {s.service for s in images.SPECS}
    dockerfiles = {p.name.removesuffix(".Dockerfile") for p in (ROOT / "compose" / "offline").glob("*.Dockerfile")}
    assert specs == dockerfiles, specs ^ dockerfiles
    for s in images.SPECS:
        assert re.search(r"^FROM \$\{BASE\}$", s.dockerfile.read_text(), re.MULTILINE), s.dockerfile
