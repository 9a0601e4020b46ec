"""Alert routing input: the site-contacts file, checked, as the alertmanager role's variables.

The role's template (ansible/roles/alertmanager/templates/alertmanager.yml.j2)
turns these variables into the Alertmanager config; compose/config/alertmanager.yml
is its one rendered copy in the repository (tools/compose.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

EXAMPLE_CONTACTS = Path(__file__).resolve().parents[1] / "alerting/site-contacts.example.yml"


class ContactsError(ValueError):
    pass


def load_contacts(path: Path) -> dict[str, Any]:
    """The contacts file, checked: ``factory_ops`` emails, ``sites: {site: {admins, entries}}``, and the
    VO frontend's operators, ``frontend_ops`` (optional)."""
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or not isinstance(doc.get("sites"), dict):
        raise ContactsError(f"{path}: expected a mapping with `sites:`")
    ops = doc.get("factory_ops")
    if not isinstance(ops, list) or not ops or not all(isinstance(x, str) and "@" in x for x in ops):
        raise ContactsError(f"{path}: factory_ops must be a non-empty list of emails")
    fe = doc.get("frontend_ops", [])
    if not isinstance(fe, list) or not all(isinstance(x, str) and "@" in x for x in fe):
        raise ContactsError(f"{path}: frontend_ops must be a list of emails")
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


def alertmanager_vars(contacts: dict[str, Any]) -> dict[str, Any]:
    """The alertmanager role's variables for a (checked) contacts file."""
    return {
        "alertmanager_site_contacts": {site: list(spec["admins"]) for site, spec in contacts["sites"].items()},
        "alertmanager_factory_ops_emails": list(contacts["factory_ops"]),
        "alertmanager_frontend_ops_emails": list(contacts.get("frontend_ops", [])),
    }


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
