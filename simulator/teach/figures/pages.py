"""Screenshots of the web pages (``python -m simulator html`` and ``explore``), taken in headless Chromium.

Each page is written exactly as the command writes it, opened from disk, and stepped with the arrow
key to a step that shows what the scenario is about; the projector mode and the schedule explorer are
shot as a 1280 x 720 screen shows them, drawn 1.5 times as many pixels wide (1920 x 1080) for slides.
Skipped, saying why, where Chromium is missing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ...views.plot.style import FigureStyle
from ...views.web.browser import find_chromium, headless, screen, screenshot
from ...views.web.explorer import write_explorer
from ..view import write_html
from . import figure

PAGES = (  # scenario, the step to show
    ("split", 3),  # A = 7 in flight from device 0 to device 1
    ("wrong-input", 3),  # the raw input x = 3 in flight instead, in red, with the checker's explanation
    ("tp-row", 12),  # shards, partial sums and the ring all-reduce's chunks
)  # pipeline-1f1b, taller than a screen here, is shot in the projector mode below


def _no_browser() -> str | None:
    found = find_chromium()
    return found if isinstance(found, str) else None


def page_file(name: str) -> str:
    return f"view_{name.replace('-', '_')}.png"


@figure(*(page_file(name) for name, _ in PAGES), needs=_no_browser)
def view_pages(out: Path, style: FigureStyle) -> None:
    """The step-through page of three scenarios, as a browser shows it (needs chromium and chromedriver)."""
    scale = style.pixels / 1200  # the page laid out 1200 px wide, drawn as wide as the style's images
    with tempfile.TemporaryDirectory(prefix="view-pages-") as tmp, headless(1200, 800, scale) as driver:
        for name, step in PAGES:
            page = write_html(name, Path(tmp) / f"{name}.html")
            screenshot(driver, page, out / page_file(name), step=step)


PRESENTED = (  # scenario, the step to show: in the projector mode, one 1280 x 720 screen
    ("pipeline-1f1b", 150),  # 1F1B's steady state: every stage busy, the timeline with its passes
    ("3d-step", 300),  # eight devices on the 2 x 2 x 2 mesh, messages in flight across it
    ("tp-bug-wrong-order", 12),  # the first divergence: the wrong numbers red beside the value due
)
EXPLORED = (  # the explorer's address: a choice of schedule, p, m, v and costs
    ("explorer_1f1b.png", "#schedule=1f1b&p=4&m=8&v=1&F=1&B=2&W=1"),
    ("explorer_interleaved_zb.png", "#schedule=interleaved-zb&p=4&m=8&v=2&F=1&B=2&W=1"),
)


def present_file(name: str) -> str:
    return f"present_{name.replace('-', '_')}.png"


@figure(*(present_file(name) for name, _ in PRESENTED), needs=_no_browser)
def present_pages(out: Path, style: FigureStyle) -> None:
    """The step-through page in the projector mode (--present), as a 1280 x 720 screen shows it."""
    scale = style.pixels / 1280
    with tempfile.TemporaryDirectory(prefix="present-pages-") as tmp, headless(1280, 720) as driver:
        for name, step in PRESENTED:
            page = write_html(name, Path(tmp) / f"{name}.html", present=True)
            screen(driver, page, out / present_file(name), address=f"#step={step}", scale=scale)


@figure(*(file for file, _ in EXPLORED), needs=_no_browser)
def explorer_pages(out: Path, style: FigureStyle) -> None:
    """The schedule explorer (python -m simulator explore), as a 1280 x 720 screen shows it."""
    scale = style.pixels / 1280
    with tempfile.TemporaryDirectory(prefix="explorer-") as tmp, headless(1280, 720) as driver:
        page = write_explorer(Path(tmp) / "explore.html")
        for file, address in EXPLORED:
            screen(driver, page, out / file, address=address, scale=scale)
