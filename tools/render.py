"""Render the stack's configuration files from the Ansible roles' own templates.

One template per config file, in ``ansible/roles/<role>/templates/``, with its
variables' defaults in ``ansible/roles/<role>/defaults/main.yml``. Ansible
renders them on factory hosts; this module renders the very same files for
the compose stack and the tests, with the same Jinja2 settings Ansible uses
(trim_blocks, keep_trailing_newline) and the few Ansible filters templates
may use (``to_yaml``, ``to_nice_yaml``, ``to_json``, ``to_nice_json``,
``bool``, ``mandatory``, ``hash``, ``regex_replace``). A template using anything else fails here first.

This module reads the repository (it is a development and test tool), so it
locates the roles from the source tree or from ``GWMS_OBS_ANSIBLE_DIR``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import jinja2
import yaml

from tools import ROOT


def roles_dir() -> Path:
    return Path(os.environ.get("GWMS_OBS_ANSIBLE_DIR", ROOT / "ansible")) / "roles"


def _to_yaml(v: Any, indent: int = 2, **kw: Any) -> str:
    return str(yaml.safe_dump(v, default_flow_style=False, sort_keys=False, indent=indent, **kw))


def _bool(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("yes", "on", "1", "true", "y")
    return bool(v)


def _mandatory(v: Any, msg: str | None = None) -> Any:
    if isinstance(v, jinja2.Undefined) or v is None:
        raise jinja2.UndefinedError(msg or "mandatory variable not defined")
    return v


def _hash(v: Any, hashtype: str = "sha1") -> str:
    # Ansible's hash filter: the hex digest of the UTF-8 text
    h = hashlib.new(hashtype)
    h.update(str(v).encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def _regex_replace(v: Any, pattern: str = "", replacement: str = "", ignorecase: bool = False) -> str:
    # Ansible's regex_replace (re.sub, backreferences as \\1)
    return re.compile(pattern, re.I if ignorecase else 0).sub(replacement, str(v))


def environment(role: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(roles_dir() / role / "templates")),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # config files, not HTML
    )
    env.filters.update(
        to_yaml=_to_yaml,
        to_nice_yaml=lambda v, indent=4, **kw: _to_yaml(v, indent=indent, **kw),
        to_json=json.dumps,
        to_nice_json=lambda v, indent=4, **kw: json.dumps(v, indent=indent, sort_keys=True, **kw),
        bool=_bool,
        mandatory=_mandatory,
        hash=_hash,
        regex_replace=_regex_replace,
    )
    return env


def role_defaults(role: str) -> dict[str, Any]:
    path = roles_dir() / role / "defaults" / "main.yml"
    if not path.exists():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping")
    return data


_ONE_EXPRESSION = re.compile(r"\s*\{\{(.*)\}\}\s*", re.S)


def resolve(values: dict[str, Any], rounds: int = 5) -> dict[str, Any]:
    """Expand ``{{ var }}`` references between defaults, as Ansible does lazily."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)

    def expand(v: Any, ctx: dict[str, Any]) -> Any:
        if isinstance(v, str) and "{{" in v:
            one = _ONE_EXPRESSION.fullmatch(v)
            if one and v.count("{{") == 1:
                # As Ansible: a value that is one expression yielding a list or a mapping stays one
                # (prometheus_scrape_configs' default), not its text.
                native = env.compile_expression(one.group(1), undefined_to_none=False)(**ctx)
                if isinstance(native, list | dict):
                    return native
            return env.from_string(v).render(**ctx)
        if isinstance(v, list):
            return [expand(x, ctx) for x in v]
        if isinstance(v, dict):
            return {k: expand(x, ctx) for k, x in v.items()}
        return v

    out = dict(values)
    unresolved: set[str] = set()
    for _ in range(rounds):
        new: dict[str, Any] = {}
        unresolved = set()
        for k, v in out.items():
            try:
                new[k] = expand(v, out)
            except jinja2.UndefinedError:
                # e.g. "{{ playbook_dir }}/artifacts": only Ansible knows it. Lazy, as
                # in Ansible: an error only if the template uses this variable.
                new[k] = v
                unresolved.add(k)
        if new == out:
            break
        out = new
    return {k: v for k, v in out.items() if k not in unresolved}


def render(role: str, template: str, **overrides: Any) -> str:
    """Render ``ansible/roles/<role>/templates/<template>`` with the role's defaults + overrides."""
    values = resolve({**role_defaults(role), **overrides})
    return environment(role).get_template(template).render(**values)


def write(role: str, template: str, dest: Path, **overrides: Any) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(render(role, template, **overrides))
    return dest
