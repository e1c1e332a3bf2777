"""The schedule explorer page: the project's own orders, and in Chromium the same times, bubbles and peaks
as ``simulator.parallel.schedules.execute`` for every case and cost the page offers."""

import itertools
import json
import time
import zlib
from fractions import Fraction

import pytest

from simulator.parallel.schedules import SCHEDULES, Action, execute, peak_activations
from simulator.parallel.schedules.bubbles import bubble_ratio
from simulator.views.web.browser import find_chromium, headless
from simulator.views.web.explorer import COSTS, case_key, encode, explorer_data, offered, schedule_of, write_explorer

UNIT = {"F": 1.0, "B": 2.0, "W": 1.0}


@pytest.fixture(scope="module")
def data():
    return explorer_data()


def test_every_schedule_the_project_has_is_offered_with_its_own_order(data):
    assert [s["name"] for s in data["schedules"]] == list(SCHEDULES)
    cases = offered()
    assert len(cases) == len(data["cases"]) == 8 * 7 * 16 + 3 * 3 * 7 * 16  # v = 1..4 where the schedule loops
    refused = 0
    for name, p, m, v in cases:
        case = data["cases"][case_key(name, p, m, v)]
        try:
            schedule = schedule_of(name, p, m, v)
        except ValueError as exc:
            assert case == {"error": str(exc)}  # the generator's own words
            refused += 1
            continue
        assert case["ranks"] == encode(schedule) and case["placement"] == list(schedule.placement)
        decoded = [
            [Action(int(t[1], 36), t[0], int(t[2], 36)) for t in (row[k : k + 3] for k in range(0, len(row), 3))]
            for row in case["ranks"]
        ]
        assert decoded == [[a for a in acts if a.is_compute] for acts in schedule.actions.values()]
        ratio = bubble_ratio(name, p, m, v)
        assert case["formula"] == (None if ratio is None else [ratio.numerator, ratio.denominator])
    assert 0 < refused < len(cases) // 5


def test_peak_activations_of_the_classic_schedules():
    from simulator.parallel.schedules import make_schedule

    assert peak_activations(make_schedule("1f1b", 4, 8)) == [4, 3, 2, 1]  # p - r
    assert peak_activations(make_schedule("1f1b", 4, 2)) == [2, 2, 2, 1]  # min(p - r, m)
    assert peak_activations(make_schedule("gpipe", 4, 8)) == [8] * 4  # every microbatch
    assert peak_activations(make_schedule("zb-h1", 4, 8)) == [4] * 4  # held until W: p on every rank


def test_the_page_is_self_contained(tmp_path):
    from simulator.views.web.page import CSP

    html = write_explorer(tmp_path / "explore.html").read_text()
    assert f'content="{CSP}"' in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert html.count("<script") == 2 and 1e6 < len(html) < 2e6


# ---- in the browser ------------------------------------------------------------------------------------

# The page's model of every case in one call, each as one line of text, and the line's CRC-32 (the page's
# times are multiples of half a unit, so twice each is a whole number, written exactly).
MODELS = """
const [choices] = arguments;
const table = new Uint32Array(256).map((_, n) => { let c = n; for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1; return c; });
const crc = (s) => { let c = 0xffffffff; for (let i = 0; i < s.length; i++) c = table[(c ^ s.charCodeAt(i)) & 0xff] ^ (c >>> 8); return (c ^ 0xffffffff) >>> 0; };
const out = {};
for (const c of choices) {
  const m = window.explorer.model(c);
  const line = m.error ? "refused" : m.times.map((rows) => rows.map(([s, e, a]) => `${a.stage}${a.kind}${a.mb}@${2 * s}-${2 * e}`).join(" ")).join("|")
    + `/${m.peaks.join(",")}/${m.busy.map((b) => 2 * b).join(",")}/${2 * m.step}`;
  out[`${c.schedule}|${c.p}|${c.m}|${c.v}|${c.F}|${c.B}|${c.W}`] = crc(line);
}
return out;
"""


def python_line(name, p, m, v, F, B, W):
    """What the page must compute for a case, in the script's words: every action's times, peaks, busy, step."""
    schedule = schedule_of(name, p, m, v)
    split = any(a.kind in ("I", "W") for acts in schedule.actions.values() for a in acts)
    if split and not W < B:
        return "refused"
    spans = execute(schedule, {"F": F, "B": B, "I": B - W, "W": W})
    rows = [" ".join(f"{a.stage}{a.kind}{a.microbatch}@{2 * s:g}-{2 * e:g}" for s, e, a in spans[r]) for r in spans]
    busy = [sum(e - s for s, e, _ in spans[r]) for r in spans]
    step = max(e for r in spans for _, e, _ in spans[r])
    peaks = ",".join(map(str, peak_activations(schedule)))
    return "|".join(rows) + f"/{peaks}/{','.join(f'{2 * b:g}' for b in busy)}/{2 * step:g}"


@pytest.fixture(scope="module")
def page(tmp_path_factory, data):
    found = find_chromium()
    if isinstance(found, str):
        pytest.skip(f"no headless browser: {found}")
    path = write_explorer(tmp_path_factory.mktemp("explorer") / "explore.html")
    with headless(1280, 720) as driver:
        driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 720, "deviceScaleFactor": 1, "mobile": False},
        )
        driver.get(path.resolve().as_uri())
        for _ in range(100):
            if driver.execute_script("const e = document.querySelector('.ex'); return !!(e && e.dataset.ready)"):
                break
            time.sleep(0.05)
        yield driver, path


def accepted(data):
    return [c for c in offered() if "error" not in data["cases"][case_key(*c)]]


def compare(driver, cases):
    """Every case's line from the page against Python's, by CRC-32; the first that differs is named."""
    choices = [dict(zip(("schedule", "p", "m", "v", "F", "B", "W"), c)) for c in cases]
    got = driver.execute_script(MODELS, choices)
    for c in cases:
        want = zlib.crc32(python_line(*c).encode())
        key = "|".join(f"{x:g}" if isinstance(x, float) else str(x) for x in c)
        assert got[key] == want, f"the page's times for {key} differ from execute's"
    return len(cases)


@pytest.mark.browser
def test_every_case_at_the_papers_costs_has_python_s_times(page, data):
    driver, _ = page
    cases = [(*c, UNIT["F"], UNIT["B"], UNIT["W"]) for c in accepted(data)]
    assert compare(driver, cases) > 1400


def cost_choices():
    return list(itertools.product(COSTS["F"], COSTS["B"], COSTS["W"]))


@pytest.mark.browser
def test_every_cost_offered_has_python_s_times_for_each_schedule(page, data):
    driver, _ = page
    cases = [
        (name, 4, 8, v, *costs)
        for name in SCHEDULES
        for v in (1, 2, 4)
        for costs in cost_choices()
        if case_key(name, 4, 8, v) in data["cases"] and "error" not in data["cases"][case_key(name, 4, 8, v)]
    ]
    assert compare(driver, cases) == (3 * 3 + 5) * len(cost_choices())


@pytest.mark.browser
@pytest.mark.slow
def test_every_case_and_every_cost_the_page_offers_has_python_s_times(page, data):
    driver, _ = page
    cases = [(*c, *costs) for c in accepted(data) for costs in cost_choices()]
    for k in range(0, len(cases), 2000):
        compare(driver, cases[k : k + 2000])


# What the page draws and says, read from the page.
READ = """
const ex = document.querySelector(".ex");
const rows = (attr) => { const n = ex.querySelector(`[${attr}]`); return n ? n.getAttribute(attr) : null; };
return {
  choice: JSON.parse(ex.dataset.choice),
  blocks: [...ex.querySelectorAll(".ex-block rect")].map((r) => [Number(r.dataset.rank), r.dataset.action, Number(r.dataset.start), Number(r.dataset.end)]),
  labels: [...ex.querySelectorAll(".ex-label")].map((t) => t.textContent),
  ratio: JSON.parse(rows("data-ratio") || "null"),
  formula: rows("data-formula"),
  peaks: JSON.parse(rows("data-peaks") || "null"),
  text: ex.querySelector(".ex-out").textContent,
  error: ex.querySelector(".ex-error") ? ex.querySelector(".ex-error").textContent : null,
  legend: [...ex.querySelectorAll(".ex-legend-entry")].map((e) => e.textContent),
  size: [document.documentElement.scrollWidth, document.documentElement.scrollHeight],
};
"""


def pick(driver, **choice):
    from selenium.webdriver.support.ui import Select

    for name, value in choice.items():
        Select(driver.find_element("css selector", f'select[data-control="{name}"]')).select_by_value(
            f"{value:g}" if isinstance(value, float) else str(value)
        )
    return driver.execute_script(READ)


@pytest.mark.browser
@pytest.mark.parametrize(
    ("name", "p", "m", "v", "F", "B", "W"),
    [
        ("1f1b", 4, 8, 1, 1.0, 2.0, 1.0),
        ("gpipe", 8, 16, 1, 2.0, 4.0, 1.0),
        ("interleaved-1f1b", 4, 8, 2, 1.0, 2.0, 1.0),
        ("looped-bfs", 3, 6, 3, 1.0, 3.0, 1.0),
        ("zb-h1", 4, 8, 1, 1.0, 2.0, 1.0),
        ("interleaved-zb", 4, 8, 2, 1.0, 3.0, 1.5),
        ("zbv", 4, 8, 2, 1.0, 2.0, 1.0),
        ("dualpipe-v", 8, 16, 2, 1.0, 3.0, 1.0),
    ],
)
def test_what_the_page_draws_and_says_is_python_s(page, name, p, m, v, F, B, W):
    driver, _ = page
    shown = pick(driver, schedule=name, p=p, m=m, v=v, F=F, B=B, W=W)
    assert shown["choice"] == {"schedule": name, "p": p, "m": m, "v": v, "F": F, "B": B, "W": W}
    schedule = schedule_of(name, p, m, v)
    spans = execute(schedule, {"F": F, "B": B, "I": B - W, "W": W})
    want = sorted((r, str(a), s, e) for r in spans for s, e, a in spans[r])
    assert sorted(map(tuple, shown["blocks"])) == want  # every block, where execute puts it
    step = max(e for _, _, _, e in want)
    busy = [sum(e - s for s, e, _ in spans[r]) for r in spans]
    assert shown["ratio"] == pytest.approx([(step - b) / b for b in busy], rel=1e-12)
    assert shown["peaks"] == peak_activations(schedule)
    closed = bubble_ratio(name, p, m, v)
    assert shown["formula"] == ("" if closed is None else f"{closed.numerator}/{closed.denominator}")
    if closed is not None and (F, B, W) == (1.0, 2.0, 1.0):  # at the papers' costs the measured is the closed form
        assert all(Fraction(r).limit_denominator(10_000) == closed for r in shown["ratio"])
    assert f"{float(Fraction(busy[0]) / 1):g}" in shown["text"].replace(",", "")
    assert shown["labels"] and all(label[0] in "FBIW" for label in shown["labels"])  # labelled blocks
    assert any(e.startswith("idle") for e in shown["legend"])
    assert shown["size"] == [1280, 720]  # one screen, no scrolling


@pytest.mark.browser
def test_the_page_refuses_what_the_schedules_refuse(page):
    driver, _ = page
    shown = pick(driver, schedule="interleaved-1f1b", p=4, m=9, v=2)
    with pytest.raises(ValueError) as refused:
        schedule_of("interleaved-1f1b", 4, 9, 2)
    assert shown["error"] == str(refused.value) and not shown["blocks"]
    shown = pick(driver, schedule="zb-h1", p=4, m=8, v=1, B=1.0, W=1.0)
    assert shown["error"].startswith("W = 1 is not less than B = 1")
    shown = pick(driver, B=2.0)
    assert shown["error"] is None and shown["blocks"]


@pytest.mark.browser
def test_a_link_names_the_choice(page):
    driver, path = page
    driver.get(path.resolve().as_uri() + "#schedule=zbv&p=3&m=6&v=2&F=1&B=2&W=1")
    shown = driver.execute_script(READ)
    assert shown["choice"]["schedule"] == "zbv" and shown["choice"]["p"] == 3
    pick(driver, m=7)
    assert "m=7" in driver.execute_script("return location.hash")
    assert json.loads(json.dumps(shown["peaks"])) == peak_activations(schedule_of("zbv", 3, 6, 2))
