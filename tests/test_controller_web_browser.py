"""The controller's web page in headless Chromium, against the real `gwms-obs controller serve`.

A site admin logs in, sets a 2-hour override for their site and finds it in
the rules and the audit log; a VO manager, who is shown no site form, posts
one anyway (the hidden field changed, as a hand-made request would) and the
page shows the refusal. A screenshot per step is kept under
build/test-artifacts/controller/ (tools/browser.py).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tests.support.controller import RunningController, controller_server
from tools import browser

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import httpx

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not browser.have_chromium(), reason="Debian chromium/chromium-driver missing"),
]
WAIT = 15.0


def test_site_admin_override_and_vo_refusal_in_a_browser(tmp_path: Path) -> None:
    from selenium.webdriver import Chrome as WebDriver
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webelement import WebElement
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.wait import WebDriverWait

    artifacts = browser.artifacts_dir("controller")
    for old in artifacts.glob("browser-*.png"):
        old.unlink()
    shots: list[Path] = []

    def shot(driver: WebDriver, name: str) -> None:
        shots.append(browser.screenshot(driver, artifacts, f"browser-{len(shots) + 1:02d}-{name}"))

    def wait_for(driver: WebDriver, by: str, what: str) -> str:
        text: str = WebDriverWait(driver, WAIT).until(ec.visibility_of_element_located((by, what))).text
        return text

    def submit(driver: WebDriver, form: WebElement) -> None:
        """Click the form's button and wait for the next page (the old one's form goes stale)."""
        form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        WebDriverWait(driver, WAIT).until(ec.staleness_of(form))

    def log_in(driver: WebDriver, c: RunningController, role: str) -> None:
        driver.get(f"{c.url}/login")
        token = WebDriverWait(driver, WAIT).until(ec.element_to_be_clickable((By.ID, "token")))
        token.send_keys(c.tokens[role])
        submit(driver, driver.find_element(By.CSS_SELECTOR, "form.login"))
        assert f"Logged in as {c.names[role]} ({role})." in wait_for(driver, By.CSS_SELECTOR, "p.flash")

    with controller_server(tmp_path / "controller") as c, browser.chromium_driver(artifacts) as driver:
        # --- the site admin sets a 2-hour override -------------------------------------------------
        driver.get(f"{c.url}/")  # not logged in: sent to the login page
        WebDriverWait(driver, WAIT).until(ec.url_to_be(f"{c.url}/login"))
        wait_for(driver, By.ID, "token")
        shot(driver, "login")
        log_in(driver, c, "site_admin")
        assert (
            f"You are {c.names['site_admin']}, site_admin (sites {c.site})"
            in driver.find_element(By.CSS_SELECTOR, "p.lead").text
        )
        form = driver.find_element(By.ID, "site-form")
        assert Select(form.find_element(By.ID, "site-site")).first_selected_option.text == c.site
        Select(form.find_element(By.ID, "site-level")).select_by_visible_text("commands")
        form.find_element(By.ID, "site-commands").click()
        assert form.find_element(By.ID, "site-hours").get_attribute("value") == "2"
        assert form.find_element(By.ID, "site-sample").get_attribute("value") == "1"
        form.find_element(By.ID, "site-reason").send_keys("debugging pilot failures, GGUS-4242")
        shot(driver, "site-admin-form-filled")
        submit(driver, form)

        flash = wait_for(driver, By.CSS_SELECTOR, "p.flash")
        assert flash.startswith(f"Rule 1 created: site [site={c.site}] at commands until ")
        row = driver.find_element(By.ID, "rule-1").text
        assert "commands, sample 1, command lines yes" in row and "debugging pilot failures, GGUS-4242" in row
        assert "in 1 h 59 min" in row or "in 2 h" in row  # the real clock: a few seconds have passed
        effective = driver.find_element(By.CSS_SELECTOR, "table.effective").text
        assert "CMS_T2_US_Test_ce1 frontend-cms gfactory-1 commands 1 yes rule 1 (site)" in effective
        audit = driver.find_element(By.CSS_SELECTOR, "table.audit").text
        assert "debugging pilot failures, GGUS-4242" in audit and f"→ site [site={c.site}]: commands" in audit
        shot(driver, "site-admin-override-listed")

        driver.find_element(By.LINK_TEXT, "The full audit log").click()
        WebDriverWait(driver, WAIT).until(ec.title_contains("Audit log"))
        audit = driver.find_element(By.CSS_SELECTOR, "table.audit tbody").text
        assert c.names["site_admin"] in audit and "create" in audit and "ok" in audit
        shot(driver, "site-admin-audit-log")

        submit(driver, driver.find_element(By.CSS_SELECTOR, "header form"))  # Log out
        assert wait_for(driver, By.CSS_SELECTOR, "p.flash") == "Logged out."

        # --- the VO manager is refused the site form ---------------------------------------------
        log_in(driver, c, "vo_manager")
        assert not driver.find_elements(By.ID, "site-form")  # not shown to a VO manager
        vo = driver.find_element(By.ID, "vo-form")
        shot(driver, "vo-manager-page")
        # post the site form anyway: the VO form with its hidden kind changed, as a hand-made request would
        driver.execute_script("arguments[0].value = 'site'", vo.find_element(By.NAME, "kind"))
        vo.find_element(By.ID, "vo-site").send_keys(c.site)
        Select(vo.find_element(By.ID, "vo-level")).select_by_visible_text("commands")
        vo.find_element(By.ID, "vo-reason").send_keys("we want more detail there")
        submit(driver, vo)

        alert = wait_for(driver, By.ID, "error")
        assert "Refused (create): wrong_kind. a vo_manager may not make site rules" in alert
        assert driver.title.startswith("Refused:")
        shot(driver, "vo-manager-refused")

        # the refusal is in the audit log, and nothing changed
        got = httpx.get(f"{c.url}/v1/audit", headers=c.bearer("reader")).json()["audit"]
        assert (got[0]["actor"], got[0]["action"], got[0]["outcome"]) == (c.names["vo_manager"], "denied", "wrong_kind")
        rules = httpx.get(f"{c.url}/v1/rules", headers=c.bearer("reader")).json()["rules"]
        assert [r["id"] for r in rules] == [1]

    assert all(p.stat().st_size > 5000 for p in shots), shots
