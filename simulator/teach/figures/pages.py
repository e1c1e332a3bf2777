"""Screenshots of the web pages (``python -m simulator html``, ``explore`` and ``memory``), taken in headless Chromium.

Each page is written exactly as the command writes it, opened from disk at a step (or a choice) that shows what
it is about, and shot as one 16:9 screen in the style's pixels (1920 x 1080 for slides). The screen is laid out
at ``SLIDE_SCREEN`` CSS pixels, 1280 x 720 shrunk by 12/14: the pages' smallest text, 12 px on a projector,
then reads as 14 px on a slide shown 1280 pixels wide. Skipped, saying why, where Chromium is missing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ...views.plot.style import FigureStyle
from ...views.web.browser import find_chromium, headless, screen
from ...views.web.explorer import write_explorer
from ...views.web.memory_page import write_memory_page
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
    """The step-through page of three small scenarios, one 16:9 screen each (needs chromium and chromedriver)."""
    with tempfile.TemporaryDirectory(prefix="view-pages-") as tmp, headless(*SLIDE_SCREEN) as driver:
        for name, step in PAGES:
            page = write_html(name, Path(tmp) / f"{name}.html", present=True)
            _shoot(driver, page, out / page_file(name), f"#step={step}", style)


SLIDE_SCREEN = (1097, 617)  # CSS pixels: 1280 x 720 x 12/14, so that 12 px text shows as 14 px at 1280 wide


def _shoot(driver, page: Path, file: Path, address: str, style: FigureStyle) -> None:
    width, height = SLIDE_SCREEN
    screen(driver, page, file, address=address, size=(width, height), scale=style.pixels / width)


PRESENTED = (  # scenario, the step to show: in the projector mode, one 1280 x 720 screen
    ("pipeline-1f1b", 150),  # 1F1B's steady state: every stage busy, the timeline with its passes
    ("3d-step", 300),  # eight devices on the 2 x 2 x 2 mesh, messages in flight across it
    ("tp-bug-wrong-order", 12),  # the first divergence: the wrong numbers red beside the value due
)
EXPLORED = (  # the explorer's address: a choice of schedule, p, m, v and costs
    ("explorer_1f1b.png", "#schedule=1f1b&p=4&m=8&v=1&F=1&B=2&W=1"),
    ("explorer_1f1b_beside_zb_h1.png", "#schedule=1f1b&versus=zb-h1&p=4&m=8&v=1&F=1&B=2&W=1"),
    ("explorer_interleaved_zb.png", "#schedule=interleaved-zb&p=4&m=8&v=2&F=1&B=2&W=1"),
)


def present_file(name: str) -> str:
    return f"present_{name.replace('-', '_')}.png"


@figure(*(present_file(name) for name, _ in PRESENTED), needs=_no_browser)
def present_pages(out: Path, style: FigureStyle) -> None:
    """The step-through page in the projector mode (--present), as a 1280 x 720 screen shows it."""
    with tempfile.TemporaryDirectory(prefix="present-pages-") as tmp, headless(*SLIDE_SCREEN) as driver:
        for name, step in PRESENTED:
            page = write_html(name, Path(tmp) / f"{name}.html", present=True)
            _shoot(driver, page, out / present_file(name), f"#step={step}", style)


@figure(*(file for file, _ in EXPLORED), needs=_no_browser)
def explorer_pages(out: Path, style: FigureStyle) -> None:
    """The schedule explorer (python -m simulator explore), as a 1280 x 720 screen shows it."""
    with tempfile.TemporaryDirectory(prefix="explorer-") as tmp, headless(*SLIDE_SCREEN) as driver:
        page = write_explorer(Path(tmp) / "explore.html")
        for file, address in EXPLORED:
            _shoot(driver, page, out / file, address, style)


MEMORY = (
    ("memory_calculator.png", "#model=llama3-70b&tp=8&pp=4&dp=8&cp=1&zero=1&recompute=selective&sp=true&microbatch=1"),
)


@figure(*(file for file, _ in MEMORY), needs=_no_browser)
def memory_pages(out: Path, style: FigureStyle) -> None:
    """The memory calculator (python -m simulator memory): Llama 3 70B on tp 8, pp 4, dp 8 with ZeRO-1."""
    with tempfile.TemporaryDirectory(prefix="memory-") as tmp, headless(*SLIDE_SCREEN) as driver:
        page = write_memory_page(Path(tmp) / "memory.html")
        for file, address in MEMORY:
            _shoot(driver, page, out / file, address, style)
