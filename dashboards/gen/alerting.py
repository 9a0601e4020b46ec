"""The Alertmanager configuration from the site-contacts file and the Ansible template."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tools import ROOT
from tools import render as _render

EXAMPLE_CONTACTS = ROOT / "dashboards/alerting/site-contacts.example.yml"


def render(role: str, template: str, **overrides: Any) -> str:
    """A role's template with its defaults; ``playbook_dir`` as Ansible would set it (defaults use it)."""
    return _render.render(role, template, **{"playbook_dir": str(ROOT / "ansible"), **overrides})


class ContactsError(ValueError):
    pass


def load_contacts(path: Path) -> dict[str, Any]:
    """The contacts file, checked: ``factory_ops`` emails, ``sites: {site: {admins, entries}}``."""
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("sites"), dict):
        raise ContactsError(f"{path}: expected a mapping with `sites:`")
    ops = doc.get("factory_ops")
    if not isinstance(ops, list) or not ops or not all(isinstance(x, str) and "@" in x for x in ops):
        raise ContactsError(f"{path}: factory_ops must be a non-empty list of emails")
    seen: dict[str, str] = {}
    for site, spec in doc["sites"].items():
        admins = spec.get("admins") if isinstance(spec, dict) else None
        if not isinstance(admins, list) or not admins or not all(isinstance(x, str) and "@" in x for x in admins):
            raise ContactsError(f"{path}: site {site!r} needs `admins:`, a non-empty list of emails")
        for e in spec.get("entries") or []:
            if e in seen:
                raise ContactsError(f"{path}: entry {e!r} listed under {seen[e]!r} and {site!r}")
            seen[e] = site
    return doc


def alertmanager_config(contacts: dict[str, Any], **overrides: Any) -> str:
    sites = {site: list(spec["admins"]) for site, spec in contacts["sites"].items()}
    return render(
        "alertmanager",
        "alertmanager.yml.j2",
        alertmanager_site_contacts=sites,
        alertmanager_factory_ops_emails=list(contacts["factory_ops"]),
        **overrides,
    )


def example_config() -> str:
    return alertmanager_config(load_contacts(EXAMPLE_CONTACTS))


def contact_problems(contacts: dict[str, Any], monitor_dir: Path) -> list[str]:
    """Entries the contacts file lists under a site other than their GLIDEIN_Site (from descript.xml)."""
    from gwms_obs.parse_errors import ParseErrors
    from gwms_obs.sources.descript import read_descript

    site_of: dict[str, str | None] = {}
    for p in sorted(monitor_dir.glob("entry_*/descript.xml")):
        for d in read_descript(str(p), ParseErrors()):
            site_of[d.entry] = d.site
    problems = []
    for site, spec in contacts["sites"].items():
        for entry in spec.get("entries") or []:
            if entry not in site_of:
                problems.append(f"entry {entry!r} (site {site!r}) is not in {monitor_dir}")
            elif site_of[entry] != site:
                problems.append(f"entry {entry!r} has GLIDEIN_Site {site_of[entry]!r}, listed under {site!r}")
    return problems
