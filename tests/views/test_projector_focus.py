"""A projector card too small for a wrong matrix shortens it in the middle: the first wrong cell, and the cell due
there, stay shown (their row and column kept between the ellipses), in Chromium at 1280 x 720."""

import numpy as np
import pytest

from simulator import Reference, World, check
from simulator.teach.view import build_document, write_html
from simulator.views.web.texts import cells
from tests.views.test_projector_pages import browser, goto, moments  # noqa: F401 (browser: the fixture)
from tests.views.test_view_browser import assert_quiet, open_page

pytestmark = pytest.mark.browser
WRONG = (3, 4)  # row and column of the one wrong number: inside what an ellipsis hides on a quarter-width card


def scale(v):
    return 1.5 * v + 0.123456


def model(dev, x):
    return dev.compute("A", scale, x)


def program(dev, x):
    """Device 0 computes A right, then sends it with one number changed; device 1 keeps what arrives."""
    if dev.rank == 0:
        a = dev.compute("A", scale, x)
        sent = a.copy()
        sent[WRONG] += 10.0
        dev.send(sent, 1)
    elif dev.rank == 1:
        return dev.recv(0, name="A", shape=(8, 8), dtype=np.float64)
    else:
        dev.compute("idle work", lambda: np.zeros(2), seconds=1e-6)


READ = """
const root = document.querySelector(".psv");
const card = root.querySelectorAll(".psv-card")[1];
const tables = [...card.querySelectorAll(".psv-matrix")];
const body = card.querySelector(".psv-card-body").getBoundingClientRect();
return tables.map((t) => ({
  shortened: t.dataset.shortened || null,
  bad: [...t.querySelectorAll(".psv-cell-bad")].map((td) => [Number(td.dataset.k), td.textContent, td.title]),
  focus: t.querySelector(`td[data-k="${arguments[0]}"]`)?.textContent ?? null,
  inside: [...t.querySelectorAll("td")].every((td) => { const r = td.getBoundingClientRect(); return r.right <= body.right + 0.5 && r.bottom <= body.bottom + 0.5; }),
}));
"""


def test_the_first_wrong_cell_is_shown_when_the_card_shortens_its_matrix(browser, tmp_path):  # noqa: F811
    x = np.arange(64, dtype=np.float64).reshape(8, 8) / 7
    run = World(4).run(program, x)
    report = check(run, Reference.of(model, x))
    assert report.verdict == "FAILED"
    doc = build_document(run, report)
    flat = WRONG[0] * 8 + WRONG[1]
    assert doc["check"]["cells"] == [flat]
    page = write_html(run, tmp_path / "wrong.html", report, present=True)
    open_page(browser, page)
    goto(browser, moments(doc)["end"])  # device 1 holds what arrived
    found, due = browser.execute_script(READ, flat)
    assert found["shortened"] == "8x8" and due["shortened"] == "8x8"  # too large for the card: an ellipsis each
    assert [k for k, *_ in found["bad"]] == [flat], found  # the wrong number shown, in red
    sent = scale(x)
    sent[WRONG] += 10.0
    assert found["bad"][0][1] == cells(sent)[3][4] and found["bad"][0][2] == "row 3, column 4"
    assert due["focus"] == cells(scale(x))[3][4] != cells(sent)[3][4]  # and under it, the number due there
    assert found["inside"] and due["inside"]  # nothing cut at the card's edge
    assert_quiet(browser, page)
