"""Alertmanager routing: amtool accepts the config, and every site in the contacts file routes to its admins."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from dashboards.gen import alerting
from gwms_obs.simulate.factory import DEFAULT_ENTRIES
from tests.support.servers import have
from tools import render

pytestmark = pytest.mark.skipif(not have("amtool"), reason="Debian prometheus-alertmanager (amtool) not installed")
CONTACTS = alerting.load_contacts(alerting.EXAMPLE_CONTACTS)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("am") / "alertmanager.yml"
    # The role's template with the example contacts, as Ansible renders it on the host.
    p.write_text(render.render("alertmanager", "alertmanager.yml.j2", **alerting.alertmanager_vars(CONTACTS)))
    return p


def amtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["amtool", *args], capture_output=True, text=True, timeout=60, check=False)


def route(config: Path, *labels: str) -> str:
    r = amtool("config", "routes", "test", f"--config.file={config}", *labels)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip()


def test_check_config(config: Path) -> None:
    r = amtool("check-config", str(config))
    assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stdout + r.stderr
    assert "1 inhibit rules" in r.stdout


@pytest.mark.parametrize("site", sorted(CONTACTS["sites"]))
def test_each_site_routes_to_its_admins(config: Path, site: str) -> None:
    got = route(config, "alertname=GwmsSiteValidationFailuresRising", "audience=site", f"site={site}", "entry=E")
    assert got == f"site-{site}"
    r = amtool(
        "config",
        "routes",
        "test",
        f"--config.file={config}",
        f"--verify.receivers=site-{site}",
        "alertname=X",
        "audience=site",
        f"site={site}",
    )
    assert r.returncode == 0
    # The receiver mails exactly the site's admins.
    doc = yaml.safe_load(config.read_text())
    rcv = next(x for x in doc["receivers"] if x["name"] == got)
    assert [c["to"] for c in rcv["email_configs"]] == [", ".join(CONTACTS["sites"][site]["admins"])]


@pytest.mark.parametrize(
    "labels",
    [
        ("alertname=GwmsSiteValidationFailuresRising", "audience=site", "site=SiteNobodyListed"),
        ("alertname=GwmsEntryInfoStale", "audience=factory", "site=Nebraska"),  # factory's problem, not the site's
        ("alertname=GwmsExporterDown", "audience=factory"),
        ("alertname=GwmsCollectorDroppingSpans", "audience=factory"),
    ],
)
def test_everything_else_goes_to_factory_ops(config: Path, labels: tuple[str, ...]) -> None:
    assert route(config, *labels) == "factory-ops"


def test_the_shifters_summary_goes_to_the_shifters_once_a_day(config: Path) -> None:
    assert route(config, "alertname=GwmsSitesNotGreen", "audience=shifters") == "shifters"
    doc = yaml.safe_load(config.read_text())
    (r,) = (r for r in doc["route"]["routes"] if r["receiver"] == "shifters")
    assert r["repeat_interval"] == "24h" and r["group_by"] == ["alertname"]
    (rcv,) = (x for x in doc["receivers"] if x["name"] == "shifters")
    assert [c["to"] for c in rcv["email_configs"]] == ["factory-ops@example.org"]  # factory-ops when none are set


def test_downtime_markers_mail_nobody(config: Path) -> None:
    assert route(config, "alertname=GwmsEntryInDowntime", "audience=factory", "site=Nebraska") == "silent"
    doc = yaml.safe_load(config.read_text())
    (inh,) = doc["inhibit_rules"]
    assert inh["equal"] == ["factory", "entry"]  # the alerts carry the factory label (recording rules by factory)


def test_a_wrong_expectation_fails(config: Path) -> None:
    """amtool's verify must be able to fail, or the routing tests above prove nothing."""
    r = amtool(
        "config",
        "routes",
        "test",
        f"--config.file={config}",
        "--verify.receivers=site-Nebraska",
        "alertname=X",
        "audience=site",
        "site=FailSite",
    )
    assert r.returncode != 0


def test_contacts_sites_are_the_entries_glidein_site(tmp_path: Path) -> None:
    """Each entry listed in the contacts file has that site as GLIDEIN_Site in the (simulated) factory."""
    from gwms_obs.simulate.factory import simulate

    simulate(tmp_path, 30, seed=3)
    assert alerting.contact_problems(CONTACTS, tmp_path / "monitor") == []
    wrong = {**CONTACTS, "sites": {"Elsewhere": {"admins": ["a@x"], "entries": [DEFAULT_ENTRIES[0].name]}}}
    assert "GLIDEIN_Site 'Nebraska'" in alerting.contact_problems(wrong, tmp_path / "monitor")[0]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("sites: {}\n", "factory_ops"),
        ("factory_ops: [ops@x]\nsites: {A: {admins: []}}\n", "admins"),
        (
            "factory_ops: [ops@x]\nsites: {A: {admins: [a@x], entries: [e]}, B: {admins: [b@x], entries: [e]}}\n",
            "listed",
        ),
    ],
)
def test_bad_contacts_are_refused(tmp_path: Path, text: str, why: str) -> None:
    p = tmp_path / "c.yml"
    p.write_text(text)
    with pytest.raises(alerting.ContactsError, match=why):
        alerting.load_contacts(p)


def test_smtp_credentials_reach_the_config_only_when_set() -> None:
    plain = yaml.safe_load(render.render("alertmanager", "alertmanager.yml.j2"))
    assert "smtp_auth_username" not in plain["global"]
    auth = yaml.safe_load(
        render.render(
            "alertmanager",
            "alertmanager.yml.j2",
            alertmanager_smtp_auth_username="am@example.org",
            alertmanager_smtp_auth_password="s3cret",
        )
    )
    assert auth["global"]["smtp_auth_username"] == "am@example.org"
    assert auth["global"]["smtp_auth_password"] == "s3cret"


@pytest.mark.skipif(not have("prometheus-alertmanager"), reason="prometheus-alertmanager not installed")
def test_a_downtime_inhibits_its_own_factorys_entry_only(config: Path, tmp_path: Path) -> None:
    """Two factories on one Alertmanager, an entry of the same name at each: a downtime at one
    mutes that factory's warnings about it, not the other's (a real Alertmanager's inhibition)."""
    import json
    import urllib.request

    from tests.support.servers import alertmanager
    from tools.polling import poll

    def labels(factory: str, alertname: str, severity: str) -> dict[str, str]:
        return {"alertname": alertname, "severity": severity, "factory": factory, "entry": "E", "site": "Nebraska"}

    with alertmanager(tmp_path / "am", config.read_text()) as url:
        alerts = [
            {"labels": labels("fa", "GwmsEntryInDowntime", "info")},
            {"labels": labels("fa", "GwmsEntryValidationFailing", "warning")},
            {"labels": labels("fb", "GwmsEntryValidationFailing", "warning")},
        ]
        req = urllib.request.Request(
            f"{url}/api/v2/alerts", json.dumps(alerts).encode(), {"Content-Type": "application/json"}
        )
        urllib.request.urlopen(req, timeout=10).close()

        def states() -> dict[tuple[str, str], str] | None:
            with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=10) as r:
                got = json.load(r)
            out = {(a["labels"]["factory"], a["labels"]["alertname"]): a["status"]["state"] for a in got}
            return out if len(out) == 3 and "unprocessed" not in out.values() else None

        got = poll("the three alerts processed", states, 30)
        assert got[("fa", "GwmsEntryValidationFailing")] == "suppressed"
        assert got[("fb", "GwmsEntryValidationFailing")] == "active"
        assert got[("fa", "GwmsEntryInDowntime")] == "active"
