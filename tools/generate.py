"""Write every generated file of the repository (``make generate``, the one generator).

docs/metrics.md from the catalogue, compose/config/ from the Ansible templates
(tools/compose.py), and the dashboards, rules and rule tests (dashboards/gen).
Each is committed; tests/test_generated.py fails when one differs from what
this module renders, is missing, or is left over in a directory that holds
only generated files.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

from gwms_obs import catalogue
from tools import ROOT

# Directories holding nothing but generated files (glob patterns under the root):
# a file there that the generators no longer produce is stale and is removed.
GENERATED_ONLY = ("dashboards/grafana/*.json", "dashboards/rules/**/*.yml", "compose/config/**/*")

_BUDGET = """\
## Cardinality budget

No label ever names a pilot, a job, a worker node, a file or a user. Labels
come only from bounded sets:

| label | values | bound (typical large factory) |
|---|---|---|
| `entry` | factory entries (`entry_*` directories) | ~500 |
| `client` | frontend clients using the entry | ~5 per entry |
| `site` | `GLIDEIN_Site` of the entry (1 per entry) | no extra series |
| `category` | {categories} | 7 |
| `accuracy` | {accuracies} | 5, usually 1-2 per entry |
| `outcome` | {outcomes} | 4 |
| `state`, `kind` | fixed lists in `outputs/prometheus.py` | ≤ 7 |
| `resource` | `memory`, `cpu` (jobs over their slot, `accounting/overuse.py`) | 2 |
| `source`, `reason` | input kinds and parse-error reasons (fixed words in the readers) | ~7 × ~15 |

Worst case for the largest family, `gwms_pilot_cpu_seconds_total`:
500 entries × 5 clients × 7 categories × 2 accuracies ≈ 35,000 series; in
practice an entry has 2-4 non-zero categories and one accuracy, about 7,500.
The two histograms have 12 series per (entry, client): 30,000 each at the
bound. A factory of 500 entries therefore stays under ~100,000 series.

Enforced at run time: the first {caps} values of `entry`, `client` and
`site` are kept; a new value beyond its cap is accounted under `{overflow}`
(never a new series) and counted in `gwms_obs_label_overflow_total{{label}}`.
Every label value comes from the factory (its directories, its descript.xml,
its completed_jobs logs and schedd_status.xml), never from text a pilot wrote:
what a pilot says about its entry or site is only compared with the factory's
word (`gwms_obs_parse_errors_total{{reason="label_mismatch"}}`).
"""


def metrics_markdown() -> str:
    lines = [
        "# gwms-obs metrics",
        "",
        "Generated from `exporters/gwms_obs/catalogue.py` by `make generate`; do not edit by hand.",
        "",
        "| name | type | unit | labels | help |",
        "|---|---|---|---|---|",
    ]
    for m in catalogue.ALL:
        labels = ", ".join(f"`{x}`" for x in m.labels) or "—"
        lines.append(f"| `{m.name}` | {m.type} | {m.unit or '—'} | {labels} | {m.help} |")
    lines.append("")
    lines.append(
        _BUDGET.format(
            categories=", ".join(f"`{c.value}`" for c in catalogue.Category),
            accuracies=", ".join(f"`{a.value}`" for a in catalogue.Accuracy),
            outcomes=", ".join(f"`{o.value}`" for o in catalogue.Outcome),
            caps=" / ".join(str(n) for n in catalogue.LABEL_CAPS.values()),
            overflow=catalogue.OVERFLOW,
        )
    )
    return "\n".join(lines)


def _sources() -> list[dict[str, str]]:
    # Loaded here, not at import: compose renders the Ansible templates, dashboards.gen needs the SDK.
    from dashboards import gen as dashboards
    from tools import compose

    return [
        {"docs/metrics.md": metrics_markdown()},
        {path: render() for path, render in compose.generators().items()},
        dashboards.render_all(),
    ]


def render_all() -> dict[str, str]:
    """{path relative to the root: text} of every generated file; a path claimed twice is an error."""
    out: dict[str, str] = {}
    for source in _sources():
        for path, text in source.items():
            if path in out:
                raise ValueError(f"{path} is generated twice")
            out[path] = text
    return out


def stale(generated: dict[str, str], root: Path = ROOT) -> Iterator[str]:
    """Files in the generated-only directories that nothing generates any more."""
    for pattern in GENERATED_ONLY:
        for p in sorted(root.glob(pattern)):
            rel = p.relative_to(root).as_posix()
            if p.is_file() and rel not in generated:
                yield rel


def write(files: dict[str, str], root: Path = ROOT) -> None:
    """Write the generated files under ``root`` and remove the stale ones."""
    for rel in list(stale(files, root)):
        (root / rel).unlink()
        print(f"removed {rel}")
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        print(f"wrote {rel}")


def main() -> int:
    write(render_all())
    return 0


if __name__ == "__main__":
    sys.exit(main())
