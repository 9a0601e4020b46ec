"""A VO frontend's host runs the same exporter role (issue 35 item 2): its exporter.toml, rendered
from the role's template with the frontend inventory group's settings, passes check-config and
serves the GlideinWMS-written fixtures; its unit reads the frontend's monitor dir and no factory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from gwms_obs import catalogue
from gwms_obs.config import load
from gwms_obs.outputs.prometheus import FactoryCollector
from gwms_obs.pipeline import Ingest
from tools import ROOT
from tools.render import render

FIXTURES = ROOT / "tests" / "fixtures" / "glideinwms_frontend"
GROUP_VARS = ROOT / "ansible" / "inventories" / "multi-host" / "group_vars" / "frontend.yml"


def frontend_vars(monitor: Path, state: Path) -> dict[str, object]:
    v = yaml.safe_load(GROUP_VARS.read_text())
    v.pop("gwms_exporter_listen")  # the host's address: a fact, not known here
    return {**v, "gwms_exporter_frontend_monitor_dir": str(monitor), "gwms_exporter_state_dir": str(state)}


def test_the_frontend_hosts_config_passes_check_config_and_reads_the_frontend(tmp_path: Path) -> None:
    text = render("gwms_exporter", "exporter.toml.j2", **frontend_vars(FIXTURES, tmp_path))
    cfg = tmp_path / "exporter.toml"
    cfg.write_text(text)
    r = subprocess.run(
        [sys.executable, "-m", "gwms_obs.cli", "check-config", str(cfg)], capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stdout + r.stderr
    conf = load(str(cfg))
    assert conf.ingest.factory_dir == "" and conf.ingest.frontend_clients == {"main": "vofrontend01_frontend"}
    ing = Ingest(conf.ingest)
    ing.scan()
    clients = {
        s.labels["client"]
        for f in FactoryCollector(ing).collect()
        if f.name == catalogue.FRONTEND_JOBS.name
        for s in f.samples
    }
    assert clients == {"vofrontend01_frontend", "vofe_example.gpu"}
    # A frontend dir that is not there is a problem check-config names.
    cfg.write_text(text.replace(str(FIXTURES), str(tmp_path / "absent")))
    r = subprocess.run(
        [sys.executable, "-m", "gwms_obs.cli", "check-config", str(cfg)], capture_output=True, text=True, check=False
    )
    assert r.returncode != 0 and "frontend_monitor_dir" in r.stdout + r.stderr


def test_the_frontend_hosts_unit_reads_only_the_frontends_monitor_dir(tmp_path: Path) -> None:
    unit = render("gwms_exporter", "gwms-obs-exporter.service.j2", **frontend_vars(FIXTURES, tmp_path))
    (line,) = [x for x in unit.splitlines() if x.startswith("ReadOnlyPaths=")]
    assert line == f"ReadOnlyPaths=-{FIXTURES}"
    assert "SupplementaryGroups=frontend" in unit
    # A factory host's unit is unchanged: its log tree, and the monitor dir when set.
    factory = render("gwms_exporter", "gwms-obs-exporter.service.j2", gwms_exporter_monitor_dir="/m")
    assert "ReadOnlyPaths=-/var/log/gwms-factory -/m\n" in factory


def test_the_multi_host_inventory_scrapes_the_frontend_host() -> None:
    hosts = yaml.safe_load((ROOT / "ansible/inventories/multi-host/hosts.yml").read_text())
    assert hosts["all"]["children"]["frontend"]["hosts"]
    mon = (ROOT / "ansible/inventories/multi-host/group_vars/monitoring.yml").read_text()
    assert "groups['frontend']" in mon.split("prometheus_exporter_targets:")[1].split("\n")[0]
