"""Screenshots of the step-through web pages (``python -m simulator html``), taken in headless Chromium.

Each page is written exactly as the command writes it, opened from disk, and stepped with the arrow
key to a step that shows what the scenario is about. Skipped, saying why, where Chromium is missing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ...views.plot.style import FigureStyle
from ...views.web.browser import find_chromium, headless, screenshot
from ..view import write_html
from . import figure

PAGES = (  # scenario, the step to show
    ("split", 3),  # A = 7 in flight from device 0 to device 1
    ("wrong-input", 3),  # the raw input x = 3 in flight instead, in red, with the checker's explanation
    ("tp-row", 12),  # shards, partial sums and the ring all-reduce's chunks
    ("pipeline-1f1b", 150),  # 1F1B in its steady state: microbatches on every stage
)


def _no_browser() -> str | None:
    found = find_chromium()
    return found if isinstance(found, str) else None


def page_file(name: str) -> str:
    return f"view_{name.replace('-', '_')}.png"


@figure(*(page_file(name) for name, _ in PAGES), needs=_no_browser)
def view_pages(out: Path, style: FigureStyle) -> None:
    """The step-through page of four scenarios, as a browser shows it (needs chromium and chromedriver)."""
    scale = style.pixels / 1200  # the page laid out 1200 px wide, drawn as wide as the style's images
    with tempfile.TemporaryDirectory(prefix="view-pages-") as tmp, headless(1200, 800, scale) as driver:
        for name, step in PAGES:
            page = write_html(name, Path(tmp) / f"{name}.html")
            screenshot(driver, page, out / page_file(name), step=step)
