"""The view pages in a real browser (headless Chromium): what each device shows as the controls move.

One browser for the whole module. Every test ends by checking that the console has no errors and
that the page asked for nothing but itself (the performance log records every request the page makes).
"""

import json
import time

import pytest

from simulator.parallel.compose import Parallel3D
from simulator.parallel.mlp import MLP
from simulator.teach.view import build_document, write_html, write_page
from simulator.tensors.mesh import DeviceMesh
from simulator.views.web.browser import find_chromium, headless

pytestmark = pytest.mark.browser
SCENARIOS = ("split", "wrong-input", "tp-row", "pipeline-1f1b")

# Everything a test asserts on, read from the page in one call.
READ_VIEW = """
const root = document.querySelector(".psv");
const text = (el, sel) => { const n = el.querySelector(sel); return n ? n.textContent : null; };
return {
  step: Number(root.dataset.step),
  said: text(root, ".psv-said"),
  cursor: Number(root.querySelector(".psv-timeline").dataset.cursor),
  explainShown: !!root.querySelector(".psv-explain.psv-shown"),
  cards: [...root.querySelectorAll(".psv-card")].map((card) =>
    [...card.querySelectorAll(".psv-item")].map((li) => ({
      name: li.dataset.name, value: text(li, ".psv-value"), part: text(li, ".psv-part"),
      partial: text(li, ".psv-partial"), mb: text(li, ".psv-mb"), bad: li.classList.contains("psv-bad"),
    }))),
  arrows: [...root.querySelectorAll(".psv-arrow")].map((g) => ({
    message: Number(g.dataset.message), label: text(g, "text"), bad: g.classList.contains("psv-bad"),
  })),
  flying: [...root.querySelectorAll(".psv-flying li[data-message]")].map((li) => li.textContent),
};
"""


@pytest.fixture(scope="module")
def browser():
    found = find_chromium()
    if isinstance(found, str):
        pytest.skip(f"no headless browser: {found}")
    with headless() as driver:
        yield driver


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    out = tmp_path_factory.mktemp("pages")
    return {name: write_html(name, out / f"{name}.html") for name in SCENARIOS}


def open_page(driver, path):
    driver.get_log("browser"), driver.get_log("performance")  # start both logs afresh
    driver.get(path.resolve().as_uri())
    for _ in range(100):
        if driver.execute_script("const v = document.querySelector('.psv'); return !!(v && v.dataset.ready)"):
            return
        time.sleep(0.05)
    raise AssertionError(f"the view in {path.name} never became ready: {driver.get_log('browser')}")


def view(driver):
    return driver.execute_script(READ_VIEW)


def held(state, rank):
    return {item["name"]: item for item in state["cards"][rank]}


def click(driver, action, times=1):
    button = driver.find_element("css selector", f'.psv button[data-action="{action}"]')
    for _ in range(times):
        button.click()


def press(driver, key, times=1):
    driver.find_element("tag name", "body").send_keys(key * times)


def assert_quiet(driver, path):
    """No console errors, and no request for anything but the page itself."""
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    page = path.resolve().as_uri()
    requests = []  # (url, the document that asked); the browser's own pages (chrome://) ask too
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requests.append((message["params"]["request"]["url"], message["params"].get("documentURL")))
    by_page = [url for url, document in requests if document == page]
    assert page in by_page, requests  # the log saw the page load
    assert all(url == page or url.startswith("data:") for url in by_page), by_page
    network = [url for url, _ in requests if url.split(":")[0] in ("http", "https", "ws", "wss", "ftp")]
    assert not network, network


def test_split_forward_and_arrow_keys(browser, pages):
    from selenium.webdriver.common.keys import Keys

    open_page(browser, pages["split"])
    assert view(browser)["step"] == 0 and view(browser)["said"] == "start: nothing has happened yet"
    click(browser, "forward", 3)
    state = view(browser)
    assert state["step"] == 3 and held(state, 1) == {}
    assert state["arrows"] == [{"message": 0, "label": "A = [7.]", "bad": False}]  # 7 crosses the boundary
    press(browser, Keys.ARROW_RIGHT)
    state = view(browser)
    assert state["step"] == 4 and held(state, 1)["A"]["value"] == "[7.]" and state["arrows"] == []
    assert state["said"] == "device 1 receives message #0 from device 0: A = [7.]" and state["cursor"] == 3
    press(browser, Keys.ARROW_LEFT)
    assert view(browser)["step"] == 3 and len(view(browser)["arrows"]) == 1
    press(browser, Keys.END)
    assert held(view(browser), 1)["B"]["value"] == "[49.]"
    press(browser, Keys.HOME)
    assert view(browser)["step"] == 0 and held(view(browser), 0) == {}
    assert_quiet(browser, pages["split"])


def test_wrong_input_highlights_3_as_the_first_divergence(browser, pages):
    from selenium.webdriver.common.keys import Keys

    open_page(browser, pages["wrong-input"])
    banner = browser.find_element("css selector", ".psv-verdict").text
    assert "check FAILED at the first divergence: message #0 from device 0 to device 1" in banner
    assert not view(browser)["explainShown"]
    click(browser, "jump")
    state = view(browser)
    assert state["step"] == 3 and state["explainShown"]
    assert state["arrows"] == [{"message": 0, "label": "A = [3.]", "bad": True}]
    explanation = browser.find_element("css selector", ".psv-explain").text
    assert "carried [3.], but device 1 should have received A" in explanation and "[3.] is x" in explanation
    press(browser, Keys.ARROW_RIGHT)
    state = view(browser)
    assert held(state, 1)["A"] == {"name": "A", "value": "[3.]", "part": None, "partial": None, "mb": None, "bad": True}
    assert not any(item["bad"] for item in state["cards"][0])  # device 0's A = 7 is right
    assert_quiet(browser, pages["wrong-input"])


def test_tp_row_shards_partial_sums_and_all_reduce_chunks(browser, pages):
    from selenium.webdriver.common.keys import Keys

    open_page(browser, pages["tp-row"])
    press(browser, Keys.ARROW_RIGHT, 12)
    state = view(browser)
    assert state["step"] == 12
    device1 = held(state, 1)
    assert device1["X"]["part"] == "[0:2, 2:4]" and device1["X"]["value"] == "[[0.5, 1.], [0.75, 1.]]"
    assert device1["Y.partial[0]"]["part"] == "elements 6-11 (flattened)"
    assert state["flying"] == [
        "#3 1 \u2192 0 Y.partial[1] elements 0-5 (flattened) = [-0.25, -0.125, -0.125, -0.25, -0.375, -1.] "
        "(all_reduce#0 ring step 0 chunk 0)"
    ]
    assert "1073764294" not in browser.find_element("tag name", "body").text  # labels, never raw tags
    press(browser, Keys.SHIFT + Keys.ARROW_RIGHT)
    assert view(browser)["step"] == 20  # ten more, but there are only eight
    slider = browser.find_element("css selector", ".psv-slider")
    slider.send_keys(Keys.ARROW_LEFT)  # the slider moves the view too
    assert view(browser)["step"] == 19
    assert_quiet(browser, pages["tp-row"])


def test_pipeline_microbatches_play_and_a_timeline_click(browser, pages):
    from selenium.webdriver.common.keys import Keys

    open_page(browser, pages["pipeline-1f1b"])
    press(browser, Keys.ARROW_RIGHT, 20)
    device0 = held(view(browser), 0)
    assert device0["h1.mb0"]["mb"] == "mb 0" and device0["W1"]["mb"] is None
    press(browser, Keys.END)
    assert view(browser)["step"] == 289
    click(browser, "start")
    click(browser, "play")
    time.sleep(1.0)
    click(browser, "play")  # pause
    paused = view(browser)["step"]
    time.sleep(0.6)
    assert 1 <= paused == view(browser)["step"]
    canvas = browser.find_element("css selector", ".psv-timeline-front")
    from selenium.webdriver.common.action_chains import ActionChains

    ActionChains(browser).move_to_element_with_offset(canvas, canvas.size["width"] // 4, 0).click().perform()
    picked = view(browser)["step"]
    assert 0 < picked < 289
    assert_quiet(browser, pages["pipeline-1f1b"])


def test_pipeline_steps_without_lag(browser, pages):
    open_page(browser, pages["pipeline-1f1b"])
    ms = browser.execute_script("""
        const root = document.querySelector(".psv");
        const t0 = performance.now();
        for (let i = 0; i < 289; i++) root.dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowRight", bubbles: true}));
        return (performance.now() - t0) / 289;
    """)
    assert view(browser)["step"] == 289
    print(f"1F1B page: {ms:.2f} ms per step")
    assert ms < 50, f"{ms:.1f} ms per step"  # a frame is 16 ms; allow a busy two-core machine
    assert_quiet(browser, pages["pipeline-1f1b"])


def three_d_step(dp: int, pp: int, tp: int):
    """One 1F1B training step of a small MLP on a dp x pp x tp mesh, payloads kept."""
    mlp = MLP((8,) * (2 * pp + 1))
    x, t = mlp.data(dp * 2 * 2, seed=1)
    job = Parallel3D(mlp, DeviceMesh.grid((dp, pp, tp), ("dp", "pp", "tp")), "1f1b", microbatches=2)
    return job.world().run(job, mlp.init(seed=0), x, t)


def test_a_64_device_run_of_10000_events_is_small_and_opens_fast(browser, tmp_path):
    from selenium.webdriver.common.keys import Keys

    run = three_d_step(4, 8, 2)
    assert run.trace.world_size == 64 and 9_000 <= len(run.trace.events) <= 11_000
    path = write_html(run, tmp_path / "64.html")
    size = path.stat().st_size
    open_page(browser, path)
    # from the start of navigation to the frame after the timeline is drawn (browser clock, in ms)
    opened = (
        browser.execute_async_script(
            "const done = arguments[0]; requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now())));"
        )
        / 1e3
    )
    print(f"64 devices, {len(run.trace.events):,} events: {size / 1e6:.2f} MB page, opened in {opened:.2f} s")
    assert size < 5e6 and opened < 2.0
    assert len(view(browser)["cards"]) == 64 and not browser.find_elements("css selector", ".psv-notice")
    press(browser, Keys.END)
    assert view(browser)["step"] == len(run.trace.events)
    assert_quiet(browser, path)


def test_a_longer_run_is_thinned_and_says_so(browser, tmp_path):
    run = three_d_step(4, 4, 4)
    doc = build_document(run)
    assert len(run.trace.events) > doc["total"] - 1 > len(doc["events"]) - doc["base"]
    path = write_page(doc, tmp_path / "thinned.html")
    open_page(browser, path)
    notice = browser.find_element("css selector", ".psv-notice").text
    assert notice.startswith(f"thinned: this run has {len(run.trace.events):,} events")
    assert_quiet(browser, path)


def test_the_widget_module_keeps_the_step_in_sync_with_its_model(browser, tmp_path):
    """anywidget calls the module's default export with a model; a stand-in model records what it is told."""
    from selenium.webdriver.common.keys import Keys

    from simulator.views.web.assets import module

    doc = json.dumps(build_document("split")).replace("<", "\\u003c")
    harness = """
const listeners = {};
const values = {doc: DOC, step: 2};
const model = {
  sent: [],
  get: (key) => values[key],
  set: (key, value) => { values[key] = value; },
  save_changes() { this.sent.push(values.step); },
  on: (event, fn) => { listeners[event] = fn; },
  off: (event) => { delete listeners[event]; },
};
window.model = model;
window.fromPython = (step) => { values.step = step; listeners["change:step"](); };
window.cleanup = widget.render({model, el: document.getElementById("view")});
""".replace("DOC", doc)
    script = module().replace("export default { render };", "const widget = { render };") + harness
    path = tmp_path / "widget.html"
    path.write_text(
        f'<!DOCTYPE html><meta charset="utf-8"><div id="view"></div><script type="module">{script}</script>'
    )
    open_page(browser, path)
    assert view(browser)["step"] == 2  # the model's step
    click(browser, "forward", 2)
    assert browser.execute_script("return window.model.sent") == [3, 4]  # each move goes back to Python
    browser.execute_script("window.fromPython(1)")  # Python sets the step: the view follows, and says nothing back
    assert view(browser)["step"] == 1 and browser.execute_script("return window.model.sent") == [3, 4]
    browser.find_element("css selector", ".psv h2").click()  # in a notebook the keys work once the view has focus
    browser.switch_to.active_element.send_keys(Keys.ARROW_RIGHT)
    assert view(browser)["step"] == 2 and browser.execute_script("return window.model.sent") == [3, 4, 2]
    browser.execute_script("window.cleanup()")
    assert not browser.find_elements("css selector", ".psv")
    assert_quiet(browser, path)


def test_partial_sums_are_marked_partial(browser, tmp_path):
    from tests.views.test_view_document import partial_trace

    path = write_html(partial_trace(), tmp_path / "partial.html", step=3)
    open_page(browser, path)
    state = view(browser)
    assert [item["partial"] for item in state["cards"][0]] == ["partial sum over 0, 1"]
    assert state["flying"] == ["#0 0 \u2192 1 Y.partial[0] = [1., 2.] (partial sum over 0, 1)"]
    assert_quiet(browser, path)
