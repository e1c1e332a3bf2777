"""Every projector page a lecture shows, in Chromium at 1280 x 720: each scenario with four devices or more, and the
lab plan's pages, at the start, the middle, the first divergence and the end. On every such screen no text is under
12 px (the first divergence's under 14 px), no matrix cell is cut at its card's edge, every message in flight is
listed or counted, and the timeline labels its blocks (or shows a labelled window around now)."""

import pytest

from simulator.teach.examples import all_scenarios
from simulator.teach.view import build_document, write_html
from simulator.views.web.browser import find_chromium, headless
from simulator.views.web.replay import state_at
from tests.views.test_view_browser import assert_quiet, open_page

pytestmark = pytest.mark.browser
WIDTH, HEIGHT = 1280, 720
LAB = ("wrong-input", "tp-row", "tp-bug-wrong-order")  # docs/lab.md projects these


def projected():
    """The scenarios a lecture projects: four devices or more (those that finish), and the lab's."""
    names = []
    for name in all_scenarios():
        try:
            doc = build_document(name)
        except ValueError:  # a deadlock or contract scenario: no finished run to show
            continue
        if doc["devices"] >= 4 or name in LAB:
            names.append(name)
    return names


NAMES = projected()

# Everything the test measures on one screen, in one call.
MEASURE = """
const root = document.querySelector(".psv");
const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const texts = [];
const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  if (!n.textContent.trim()) continue;
  const el = n.parentElement;
  const r = el.getBoundingClientRect();
  if (!r.width || !r.height || el.closest("[hidden], option, select, title")) continue;
  const strong = !!el.closest(".psv-bad, .psv-explain, .psv-cell-bad");
  texts.push([parseFloat(getComputedStyle(el).fontSize), strong, el.className || el.tagName, n.textContent.slice(0, 30)]);
}
const cut = [];
for (const body of root.querySelectorAll(".psv-card-body")) {
  const b = body.getBoundingClientRect();
  for (const td of body.querySelectorAll(".psv-matrix td")) {
    const r = td.getBoundingClientRect();
    if (r.left < b.left - 0.5 || r.right > b.right + 0.5 || r.top < b.top - 0.5 || r.bottom > b.bottom + 0.5) cut.push(td.textContent);
  }
}
const more = root.querySelector(".psv-more");
const tl = root.querySelector(".psv-timeline");
return {
  step: Number(root.dataset.step),
  view: [innerWidth, innerHeight, document.documentElement.scrollWidth, document.documentElement.scrollHeight],
  texts, cut,
  listed: root.querySelectorAll(".psv-flying li[data-message]").length,
  more: more ? Number(more.dataset.more) : 0,
  flyingBox: box(root.querySelector(".psv-flying")),
  flyingItems: [...root.querySelectorAll(".psv-flying li")].map(box),
  labels: Number(tl.dataset.labels), window: tl.dataset.window, legend: root.querySelector(".psv-legend").dataset.kinds,
  fullscreen: !root.querySelector(".psv-fullscreen").hidden,
};
"""


@pytest.fixture(scope="module")
def browser():
    found = find_chromium()
    if isinstance(found, str):
        pytest.skip(f"no headless browser: {found}")
    with headless(WIDTH, HEIGHT) as driver:
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )
        yield driver


def moments(doc):
    """The steps a lecture stops at: the start, the middle, the first divergence (if any), the end."""
    steps = len(doc["events"]) - doc["base"]
    check = doc.get("check") or {}
    divergence = check["event"] - doc["base"] + 1 if check.get("event") is not None else None
    return {"start": 0, "middle": steps // 2, "divergence": divergence, "end": steps}


def goto(driver, step):
    driver.execute_script(f"location.hash = '#step={step}'")
    for _ in range(50):
        if driver.execute_script("return Number(document.querySelector('.psv').dataset.step)") == step:
            break
    driver.execute_async_script("const done = arguments[0]; requestAnimationFrame(() => done());")
    return driver.execute_script(MEASURE)


@pytest.mark.parametrize("name", NAMES)
def test_a_projected_page_is_legible_whole_and_counts_every_message(browser, tmp_path, name):
    doc = build_document(name)
    page = write_html(name, tmp_path / f"{name}.html", present=True)
    open_page(browser, page)
    for moment, step in moments(doc).items():
        if step is None:
            continue
        s = goto(browser, step)
        where = (name, moment, step)
        assert s["step"] == step and s["view"] == [WIDTH, HEIGHT, WIDTH, HEIGHT], where
        small = [t for t in s["texts"] if t[0] < (14 if t[1] else 12)]
        assert not small, (where, small[:5])
        assert not s["cut"], (where, s["cut"][:5])
        flying = len(state_at(doc, step).arrows)
        assert s["listed"] + s["more"] == flying, where  # every message in flight listed, or counted in "+N more"
        assert all(b[2] <= s["flyingBox"][2] + 0.5 for b in s["flyingItems"]), where  # none half shown
        if moment == "middle":
            assert s["labels"] > 0, where  # blocks labelled (in a window around now where they are thin)
        assert not s["fullscreen"], where  # at the full 1280 x 720 screen, no advice to go full screen
    if name.startswith("cp-"):
        assert "A" in s["legend"]  # attention work coloured and named, not all grey "other work"
    assert_quiet(browser, page)


def test_the_page_asks_for_full_screen_when_the_browser_s_bars_take_room(browser, tmp_path):
    page = write_html("pipeline-1f1b", tmp_path / "p.html", present=True)
    browser.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {
            "width": WIDTH,
            "height": 590,
            "screenWidth": WIDTH,
            "screenHeight": HEIGHT,
            "deviceScaleFactor": 1,
            "mobile": False,
        },
    )  # a 1280 x 720 screen with the browser's bars taking 130 px
    try:
        open_page(browser, page)
        assert goto(browser, 10)["fullscreen"]
        text = browser.execute_script("return document.querySelector('.psv-fullscreen').textContent")
        assert "full screen" in text and "F11" in text
    finally:
        browser.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )
