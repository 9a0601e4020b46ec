"""Headless Chromium through Selenium for the controller's web page tests.

Debian's ``chromium`` and ``chromium-driver`` (tools/prereqs.sh), always by
explicit path: given the driver's path Selenium skips Selenium Manager, which
would otherwise download a browser and driver; SE_OFFLINE forbids that anyway.
Each driver gets a fresh empty profile, and the flags keep the browser off the
network except for the pages the test opens (no sync, component updates, QUIC).

Screenshots are kept as test artifacts under ``build/test-artifacts/controller/``.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from tools import ROOT

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = ROOT / "build" / "test-artifacts" / "controller"
WINDOW = (1280, 900)
FLAGS = (
    "--headless=new",
    "--no-sandbox",  # root in a container: the sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",  # /dev/shm is 64 MB in containers: Chromium crashes on large pages
    f"--window-size={WINDOW[0]},{WINDOW[1]}",
)


class BrowserUnavailable(RuntimeError):
    """Debian's chromium or chromium-driver is not installed."""


def have_chromium() -> bool:
    return CHROMIUM.is_file() and CHROMEDRIVER.is_file()


def artifacts_dir(name: str = "controller") -> Path:
    """``build/test-artifacts/<name>/``, created: the conventional place for a test's screenshots."""
    d = ARTIFACTS.parent / name
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextlib.contextmanager
def chromium_driver(artifacts: Path = ARTIFACTS, *, page_load_timeout: float = 30.0) -> Iterator[webdriver.Chrome]:
    """A headless Chromium WebDriver with a fresh profile; quit on exit, whatever happened.

    ``artifacts`` receives chromedriver's log (``chromedriver.log``).
    """
    if not have_chromium():
        raise BrowserUnavailable(f"{CHROMIUM} or {CHROMEDRIVER} missing (Debian chromium, chromium-driver)")
    artifacts.mkdir(parents=True, exist_ok=True)
    saved = os.environ.get("SE_OFFLINE")
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager, were it ever reached, must not download
    try:
        with tempfile.TemporaryDirectory(prefix="gwms-chromium-") as profile:
            options = webdriver.ChromeOptions()
            options.binary_location = str(CHROMIUM)
            for flag in (*FLAGS, f"--user-data-dir={profile}"):
                options.add_argument(flag)
            service = Service(executable_path=str(CHROMEDRIVER), log_output=str(artifacts / "chromedriver.log"))
            # on a failed session start, webdriver.Chrome stops the chromedriver it started
            driver = webdriver.Chrome(options=options, service=service)
            try:
                driver.set_page_load_timeout(page_load_timeout)
                yield driver
            finally:
                driver.quit()  # also stops chromedriver, so the profile dir can go
    finally:
        if saved is None:
            os.environ.pop("SE_OFFLINE", None)
        else:
            os.environ["SE_OFFLINE"] = saved


def screenshot(driver: webdriver.Chrome, artifacts: Path, name: str) -> Path:
    """Save the current window as ``<artifacts>/<name>.png`` (name made file-safe); its path."""
    artifacts.mkdir(parents=True, exist_ok=True)
    path = artifacts / (re.sub(r"[^A-Za-z0-9._-]+", "_", name) + ".png")
    if not driver.save_screenshot(str(path)):
        raise RuntimeError(f"screenshot {path} not written")
    return path
