"""The notebook widget's Python side: the state it sends, the step it keeps in sync, and its text form."""

import numpy as np
import pytest
import traitlets

from simulator import World
from simulator.checker import check
from simulator.teach.examples import get
from simulator.teach.view import build_document, show
from simulator.views.web.assets import module
from simulator.views.web.page import asset
from simulator.views.web.widget import RunView


def test_the_widget_sends_the_document_and_the_step():
    w = show("split", step=3)
    state = w.get_state()  # what goes to the front end
    assert state["doc"] == build_document("split") and state["step"] == 3
    assert state["_esm"] == module() and state["_css"] == asset("view.css")  # the page's module
    w.step = 4
    assert w.get_state("step") == {"step": 4}
    assert [(i.name, i.value) for i in w.state().cards[1]] == [("A", "[7.]")]


def test_stepping_from_python():
    w = show("wrong-input")
    assert w.steps == 5 and w.step == 0
    assert w.forward().step == 1 and w.forward(10).step == 5 and w.back(2).step == 3 and w.back(9).step == 0
    arrow = w.goto(3).state().arrows[0]
    assert (arrow.value, arrow.diverged) == ("[3.]", True)
    with pytest.raises(traitlets.TraitError, match="step 6: this run has steps 0 to 5"):
        w.step = 6
    assert w.step == 3


def test_a_move_in_the_browser_reaches_python():
    w = show("split")
    w.set_state({"step": 4})  # what the comm does when the view's buttons or keys move
    assert w.step == 4 and w.state().said == "device 1 receives message #0 from device 0: A = [7.]"


def test_any_run_with_its_check():
    scenario = get("wrong-input")
    run = World(2).run(scenario.program, np.array([3.0]))
    w = show(run, check=check(run, scenario.reference()), step=5)
    assert w.doc["check"]["verdict"] == "FAILED"
    assert "device 1 | A=[3.]  <- first divergence  B=[9.]" in repr(w)


def test_the_text_form_is_the_state_at_the_step():
    w = show("split", step=3)
    text = repr(w)
    assert text.splitlines()[0] == "split: Split model: A on device 0, B on device 1"
    assert "in flight: #0 0->1 A=[7.]" in text
    bundle, _ = w._repr_mimebundle_()
    assert bundle["text/plain"] == text and "application/vnd.jupyter.widget-view+json" in bundle


def test_a_widget_from_a_document():
    doc = build_document("tp-row", max_events=5)
    w = RunView(doc, step=5)
    assert w.steps == 5 and "thinned" in w.doc["notice"]


def test_the_widget_has_the_projector_mode_too():
    w = show("3d-step", present=True)
    state = w.get_state()
    assert state["present"] is True and state["doc"]["grid"]["rows"] == 2  # the module reads both
    w.present = False
    assert w.get_state("present") == {"present": False}
