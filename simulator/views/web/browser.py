"""Headless Chromium, driven by Selenium: screenshots of view pages, and the browser tests' driver.

Chromium and its driver come from the system (Debian: ``apt-get install chromium chromium-driver``);
Selenium from PyPI (the dev extra). Both binaries are given to Selenium by path, so Selenium Manager
never goes to the network to look for a browser. The flags keep a headless browser quiet on a
machine without network access (no sync, no component updates, no QUIC probes) and start it with a
fresh profile each time.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DRIVERS = ("chromedriver", "chromium-driver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


@dataclass(frozen=True)
class Chromium:
    """Where the browser and its driver are."""

    browser: str
    driver: str


def find_chromium() -> Chromium | str:
    """The installed Chromium and chromedriver, or the reason they cannot be used (a sentence)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    browser = next((p for p in map(shutil.which, BROWSERS) if p), None)
    driver = next((p for p in map(shutil.which, DRIVERS) if p), None)
    if browser is None or driver is None:
        missing = " and ".join(n for n, p in (("chromium", browser), ("chromedriver", driver)) if p is None)
        return f"{missing} not found on PATH (Debian: apt-get install chromium chromium-driver)"
    return Chromium(browser, driver)


@contextmanager
def headless(width: int = 1280, height: int = 900, scale: float = 1.0) -> Iterator[Any]:
    """A headless Chromium WebDriver with its console and network logs on; quits on exit.

    scale: device pixels per CSS pixel (screenshots ``scale`` times as many pixels wide, text as large)."""
    found = find_chromium()
    if isinstance(found, str):
        raise RuntimeError(f"cannot start a headless browser: {found}")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="simulator-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = found.browser
        sized = (f"--window-size={width},{height}", f"--force-device-scale-factor={scale:g}")
        for flag in (*FLAGS, f"--user-data-dir={profile}", *sized):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        driver = webdriver.Chrome(service=Service(found.driver), options=options)
        try:
            yield driver
        finally:
            driver.quit()


def screen(
    driver: Any, page: Path, out: Path, *, address: str = "", size: tuple[int, int] = (1280, 720), scale: float = 1.0
) -> Path:
    """Open ``page`` (with ``address``, e.g. ``#step=40``) in a viewport of ``size`` CSS pixels, as a browser in
    full screen shows it, and save that screen as a PNG ``scale`` times as many pixels wide."""
    width, height = size
    metrics = {"width": width, "height": height, "deviceScaleFactor": scale, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        driver.get(Path(page).resolve().as_uri() + address)
        driver.execute_async_script(  # two frames: the page has drawn what it measured
            "const done = arguments[0]; requestAnimationFrame(() => requestAnimationFrame(() => done()));"
        )
        driver.save_screenshot(str(out))
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return out


def screenshot(driver: Any, page: Path, out: Path, *, step: int = 0) -> Path:
    """Open ``page`` from disk, go to ``step`` with the arrow key, and save the whole view as a PNG."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    driver.get(Path(page).resolve().as_uri())
    view = driver.find_element(By.CSS_SELECTOR, ".psv")
    body = driver.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.ARROW_RIGHT * (step - int(view.get_attribute("data-step"))))  # one command, many keys
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(driver.get_window_size()["width"], height + 140)  # the window chrome takes some
    view.screenshot(str(out))
    return out
