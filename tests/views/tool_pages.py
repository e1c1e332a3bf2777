"""A self-contained tool page (the explorer, the memory calculator) opened in headless Chromium as a projector
shows it: 1280 x 720 CSS pixels at scale 1, once the page says it has drawn."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from simulator.views.web.browser import find_chromium, headless


@contextlib.contextmanager
def opened(path: Path, root: str) -> Iterator[object]:
    """The page at ``path`` in a driver, once its ``root`` element (a CSS selector) says ``data-ready``; skips the
    test, saying why, where no headless browser is installed."""
    found = find_chromium()
    if isinstance(found, str):
        pytest.skip(f"no headless browser: {found}")
    with headless(1280, 720) as driver:
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 720, "deviceScaleFactor": 1, "mobile": False},
        )
        driver.get(path.resolve().as_uri())
        for _ in range(100):
            if driver.execute_script(f"const e = document.querySelector('{root}'); return !!(e && e.dataset.ready)"):
                break
            time.sleep(0.05)
        yield driver
