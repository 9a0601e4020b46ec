"""A pilot's page in headless Chromium: the real `gwms-obs controller serve`, a real Jaeger holding the
exporter's traces of a simulated factory (through the real collector), Debian's chromium.

The site admin of FailSite follows a link to one of their pilots, is sent to
the login and back, and reads its timeline, its accounting and its failing
test; the page of a Nebraska pilot says there is no such pilot. Screenshots
are kept under build/test-artifacts/pilot-pages/. Needs `make otelcol jaeger`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gwms_obs.outputs import pilot_traces as P
from gwms_obs.tracing import conventions as C
from tests.support.controller import controller_server
from tests.support.pilot_pages import populated
from tools import browser

pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not browser.have_chromium(), reason="Debian chromium/chromium-driver missing"),
]
WAIT = 15.0
FAIL_ENTRY = "OSG_US_FAIL_VALIDATION_ce1"  # site FailSite in the simulator
OTHER_ENTRY = "CMSHTPC_T2_US_Nebraska_red"  # site Nebraska


def test_a_site_admin_reads_their_pilot_in_a_browser_and_not_another_sites(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.wait import WebDriverWait

    artifacts = browser.artifacts_dir("pilot-pages")
    for old in artifacts.glob("pilot-*.png"):
        old.unlink()

    with populated(tmp_path / "jaeger") as jg:

        def failed(t: dict[str, Any]) -> bool:
            return any(
                s["operationName"] == P.SPAN_VALIDATION
                and any(x["key"] == "otel.status_code" and x["value"] == "ERROR" for x in s["tags"])
                for s in t["spans"]
            )

        mine = next(t for t in jg.of_entry(FAIL_ENTRY) if failed(t))
        other = jg.of_entry(OTHER_ENTRY)[0]
        validation = next(s for s in mine["spans"] if s["operationName"] == P.SPAN_VALIDATION)
        test = next(x["value"] for x in validation["tags"] if x["key"] == P.FAILED_TEST)
        root = next(s for s in mine["spans"] if s["operationName"] == C.SPAN_PILOT)
        cpu = {x["key"][len(P.CPU_SECONDS) :]: x["value"] for x in root["tags"] if x["key"].startswith(P.CPU_SECONDS)}

        with (
            controller_server(tmp_path / "controller", site="FailSite", jaeger_query_url=jg.jaeger) as c,
            browser.chromium_driver(artifacts) as driver,
        ):
            wait = WebDriverWait(driver, WAIT)
            page = f"{c.url}/pilots/{mine['traceID']}"
            driver.get(page)  # as from a dashboard's link: not logged in yet
            wait.until(ec.url_to_be(f"{c.url}/login?next=/pilots/{mine['traceID']}"))
            token = wait.until(ec.element_to_be_clickable((By.ID, "token")))
            token.send_keys(c.tokens["site_admin"])
            form = driver.find_element(By.CSS_SELECTOR, "form.login")
            form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
            wait.until(ec.url_to_be(page))
            timeline = wait.until(ec.visibility_of_element_located((By.ID, "timeline")))
            browser.screenshot(driver, artifacts, "pilot-01-failsite-pilot")

            names = [e.text for e in timeline.find_elements(By.CSS_SELECTOR, "tbody th.name")]
            first = [n.split("\n")[0] for n in names]  # tree order: the queue, then the worker node
            assert first[:2] == [C.SPAN_PILOT, P.SPAN_QUEUED]
            assert first[first.index(P.SPAN_RUNNING) + 1] == P.SPAN_VALIDATION
            bars = timeline.find_elements(By.CSS_SELECTOR, "svg.bar")
            assert len(bars) == len(mine["spans"])
            assert all(b.size["width"] > 50 and b.size["height"] > 5 for b in bars)  # drawn: the stylesheet loaded
            failed_rows = [r.text for r in timeline.find_elements(By.CSS_SELECTOR, "tr.failed")]
            assert any(r.startswith(f"{P.SPAN_VALIDATION}\nvalidation failed: {test}") for r in failed_rows), (
                failed_rows
            )
            assert driver.find_element(By.ID, "failed-test").text == test
            assert driver.find_element(By.ID, "site").text == "FailSite"
            account = driver.find_element(By.ID, "account").text
            for cat, secs in cpu.items():
                assert f"{cat} {float(secs):.0f}" in account
            # the stylesheet applied (served by the controller, no inline style: the CSP forbids it)
            fill = driver.find_element(By.CSS_SELECTOR, "rect.fill.error").value_of_css_property("fill")
            assert fill.replace(" ", "") == "rgb(198,40,40)"
            # no CSP violation nor failed resource (the controller serves no favicon: the browser's own ask)
            severe = [
                e
                for e in driver.get_log("browser")  # type: ignore[no-untyped-call]
                if e["level"] == "SEVERE"
            ]
            assert not [e for e in severe if "favicon.ico" not in e["message"]], severe

            # the entry's list links back to this page
            driver.get(f"{c.url}/pilots?entry={FAIL_ENTRY}&since=30d")
            listing = wait.until(ec.visibility_of_element_located((By.ID, "pilots")))
            links = {a.get_attribute("href") for a in listing.find_elements(By.CSS_SELECTOR, "tbody a")}
            assert page in links and len(links) == len(jg.of_entry(FAIL_ENTRY))
            browser.screenshot(driver, artifacts, "pilot-02-failsite-list")

            # another site's pilot: not found, as an unknown id
            driver.get(f"{c.url}/pilots/{other['traceID']}")
            heading = wait.until(ec.visibility_of_element_located((By.TAG_NAME, "h1")))
            assert heading.text == "No such pilot"
            assert other["traceID"] not in driver.page_source and OTHER_ENTRY not in driver.page_source
            browser.screenshot(driver, artifacts, "pilot-03-other-site")
