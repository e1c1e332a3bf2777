"""The projector mode in a real browser at 1280 x 720 (a projector's screen, full screen): every card, the
messages in flight and the timeline on one screen, with numbers on the cards and the wrong ones red."""

import pytest

from simulator.teach.view import build_document, write_html
from simulator.views.web.browser import find_chromium, headless
from tests.views.test_view_browser import assert_quiet, open_page

pytestmark = pytest.mark.browser
WIDTH, HEIGHT = 1280, 720
WRONG = ("tp-bug-wrong-order", "cp-bug-causal-offset")  # a wrong value kept in memory, and a temporary one
GUIDE = ("wrong-input", "tp-row", "transformer-sp", "ep-bug-swapped-splits")  # the teachers' guide projects these

# Where everything is on the screen, read in one call.
READ_SCREEN = """
const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
const root = document.querySelector(".psv");
return {
  step: Number(root.dataset.step),
  view: [innerWidth, innerHeight, document.documentElement.scrollWidth, document.documentElement.scrollHeight],
  cards: [...root.querySelectorAll(".psv-card")].map((card) => ({
    rank: Number(card.dataset.rank), box: box(card), body: box(card.querySelector(".psv-card-body")),
    items: [...card.querySelectorAll(".psv-full")].map((li) => ({
      name: li.dataset.name, event: Number(li.dataset.event), bad: li.classList.contains("psv-bad"),
      cells: [...li.querySelectorAll(":scope > .psv-matrix tr")].map((tr) => [...tr.children].map((td) => td.textContent)),
      badCells: [...li.querySelectorAll(":scope > .psv-matrix td.psv-cell-bad")].map((td) => Number(td.dataset.k)),
      shown: [...li.querySelectorAll(":scope > .psv-matrix td[data-k]")].map((td) => [Number(td.dataset.k), td.textContent]),
      shortened: !!li.querySelector(":scope > .psv-matrix[data-shortened]"),
      value: li.querySelector(".psv-value").textContent,
      numbers: [...li.querySelectorAll(":scope > .psv-matrix td")].filter((td) => td.getBoundingClientRect().bottom <= card.querySelector(".psv-card-body").getBoundingClientRect().bottom + 1).length,
      expected: li.querySelector(".psv-expected") ? li.querySelector(".psv-expected").textContent : null,
    })),
    older: card.querySelectorAll(".psv-chip").length,
  })),
  arrows: root.querySelectorAll(".psv-arrow").length,
  flying: [...root.querySelectorAll(".psv-flying li[data-message]")].map((li) => [li.textContent, box(li)]),
  inflight: box(root.querySelector(".psv-inflight")),
  more: root.querySelector(".psv-more") ? Number(root.querySelector(".psv-more").dataset.more) : 0,
  moreBox: root.querySelector(".psv-more") ? box(root.querySelector(".psv-more")) : null,
  counted: root.querySelector(".psv-inflight-head").textContent,
  timeline: box(root.querySelector(".psv-timeline")),
  said: box(root.querySelector(".psv-said")),
  legend: root.querySelector(".psv-legend").dataset.kinds,
  hash: location.hash,
};
"""


@pytest.fixture(scope="module")
def browser():
    found = find_chromium()
    if isinstance(found, str):
        pytest.skip(f"no headless browser: {found}")
    with headless(WIDTH, HEIGHT) as driver:
        # the page's own viewport, as a browser in full screen on a 1280 x 720 projector has it
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )
        yield driver


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    out = tmp_path_factory.mktemp("present")
    names = ("pipeline-1f1b", "3d-step", *WRONG, *GUIDE)
    return {name: write_html(name, out / f"{name}.html", present=True) for name in names}


def goto(driver, step):
    driver.execute_script(f"location.hash = '#step={step}'")  # the page follows its address
    for _ in range(50):
        if driver.execute_script("return Number(document.querySelector('.psv').dataset.step)") == step:
            return driver.execute_script(READ_SCREEN)
    raise AssertionError(f"the page did not move to step {step}")


def inside(inner, outer, slack=0.5):
    return (
        inner[0] >= outer[0] - slack
        and inner[1] >= outer[1] - slack
        and inner[2] <= outer[2] + slack
        and inner[3] <= outer[3] + slack
    )


def apart(a, b):
    return a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]


def assert_numbers_as_python_wrote_them(item, cells, where):
    """Every number shown is Python's at its place; all of them, unless the matrix is shortened (then its leading
    and trailing rows and columns, around an ellipsis)."""
    flat = [c for row in cells for c in row]
    if not item["shown"]:
        return  # not one row fits the card: its shape, in the item's head, stands for it
    assert all(flat[k] == text for k, text in item["shown"]), where
    ks = [k for k, _ in item["shown"]]
    assert ks == sorted(ks), where  # in order, left to right and down
    if not item["shortened"]:
        assert ks == list(range(len(flat))), where
    elif ks:
        assert ks[0] == 0, where  # the first number shown, and the last where there is room for both ends


@pytest.mark.parametrize("name", ["pipeline-1f1b", "3d-step"])
def test_every_card_the_messages_and_the_timeline_fit_one_screen(browser, pages, name):
    doc = build_document(name)
    steps = len(doc["events"]) - doc["base"]
    open_page(browser, pages[name])
    screen_box = [0, 0, WIDTH, HEIGHT]
    in_flight_seen = numbers_seen = 0
    for step in sorted({0, 1, *range(7, steps + 1, max(1, steps // 12)), steps}):
        s = goto(browser, step)
        assert s["view"] == [WIDTH, HEIGHT, WIDTH, HEIGHT], (step, s["view"])  # nothing to scroll, either way
        assert len(s["cards"]) == doc["devices"]
        for part in ("timeline", "inflight", "said"):
            assert inside(s[part], screen_box), (step, part, s[part])
        boxes = [c["box"] for c in s["cards"]]
        for i, card in enumerate(s["cards"]):
            assert inside(card["box"], screen_box) and apart(card["box"], s["timeline"]), (step, card["rank"])
            assert all(apart(card["box"], other) for other in boxes[i + 1 :]), (step, card["rank"])
            for item in card["items"]:
                value = doc["values"][doc["events"][item["event"]]["v"]]
                if isinstance(value, list) and len(value) == 3:  # up to 64 numbers: the matrix, as Python wrote them
                    assert_numbers_as_python_wrote_them(item, value[2], (step, card["rank"], item["name"]))
                    numbers_seen += item["numbers"] > 0
        assert s["arrows"] == len(s["flying"]) + s["more"]  # every message in flight shown, or counted
        assert s["counted"] == f"in flight ({s['arrows']}): "
        assert all(inside(b, s["inflight"]) for _, b in s["flying"])  # none half shown
        in_flight_seen += bool(s["flying"])
        if s["flying"]:
            assert inside(s["flying"][0][1], screen_box)  # the newest message in flight is in view
    assert in_flight_seen >= 3 and numbers_seen >= 10
    assert s["legend"] == "FB" if name == "pipeline-1f1b" else "FIW"  # the passes, told apart
    assert_quiet(browser, pages[name])


def test_every_card_shows_numbers_in_the_steady_state(browser, pages):
    open_page(browser, pages["3d-step"])
    s = goto(browser, 300)
    for card in s["cards"]:
        shown = sum(item["numbers"] for item in card["items"])
        small = [item for item in card["items"] if not item["cells"] and any(ch.isdigit() for ch in item["value"])]
        assert shown or small, card  # a matrix, or a short value's numbers in full
        assert card["items"] and card["older"] >= 1  # the newest values in full, the others by name


@pytest.mark.parametrize("name", WRONG)
def test_the_wrong_numbers_are_red_on_their_card_with_the_value_due(browser, pages, name):
    from selenium.webdriver.common.keys import Keys

    doc = build_document(name)
    open_page(browser, pages[name])
    browser.find_element("tag name", "body").send_keys("d")  # the key for the first divergence
    s = browser.execute_script(READ_SCREEN)
    assert s["step"] == doc["check"]["event"] - doc["base"] + 1 and s["hash"] == f"#step={s['step']}"
    (bad,) = [(card["rank"], item) for card in s["cards"] for item in card["items"] if item["bad"]]
    assert bad[0] == doc["check"]["rank"] and bad[1]["event"] == doc["check"]["event"]
    shown = {k for k, _ in bad[1]["shown"]}
    assert bad[1]["badCells"] == [k for k in doc["check"]["cells"] if k in shown] and bad[1]["badCells"]
    assert bad[1]["expected"].startswith("should be")
    browser.find_element("tag name", "body").send_keys(Keys.HOME)
    assert browser.execute_script(READ_SCREEN)["step"] == 0
    assert_quiet(browser, pages[name])


@pytest.mark.parametrize("name", GUIDE + WRONG[1:])
def test_what_the_guide_projects_fits_one_screen(browser, pages, name):
    doc = build_document(name)
    steps = len(doc["events"]) - doc["base"]
    open_page(browser, pages[name])
    for step in sorted({1, steps // 3, 2 * steps // 3, steps}):
        s = goto(browser, step)
        assert s["view"] == [WIDTH, HEIGHT, WIDTH, HEIGHT], (step, s["view"])
        assert all(inside(c["box"], [0, 0, WIDTH, HEIGHT]) for c in s["cards"]) and inside(
            s["timeline"], [0, 0, WIDTH, HEIGHT]
        )
    assert_quiet(browser, pages[name])


def test_a_link_opens_the_page_at_its_step_and_the_address_follows(browser, pages):
    from selenium.webdriver.common.keys import Keys

    path = pages["pipeline-1f1b"]
    browser.get(path.resolve().as_uri() + "#step=40")
    for _ in range(50):
        if browser.execute_script("const v = document.querySelector('.psv'); return !!(v && v.dataset.ready)"):
            break
    assert browser.execute_script(READ_SCREEN)["step"] == 40
    browser.find_element("tag name", "body").send_keys(Keys.ARROW_RIGHT)
    assert browser.execute_script(READ_SCREEN)["hash"] == "#step=41"
    browser.find_element("tag name", "body").send_keys(Keys.END)
    assert browser.execute_script(READ_SCREEN)["hash"] == "#step=289"
    browser.get(path.resolve().as_uri() + "#step=100000")  # past the end: the last step
    assert browser.execute_script(READ_SCREEN)["step"] == 289
