"""The view document: what every step shows equals the Stepper's replay, in words and values a student reads."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from simulator import World
from simulator.checker import check
from simulator.core.trace import Message, Op, Trace
from simulator.teach.examples import get
from simulator.teach.view import build_document, state_at
from simulator.views.stepper import Stepper
from simulator.views.web.document import microbatch, part_text, value_text
from simulator.views.web.replay import said_at, steps

SCENARIOS = ("split", "wrong-input", "replicated", "tp-column", "tp-row", "tp-megatron-mlp", "pipeline-1f1b")


def short(text):
    return text if isinstance(text, str) else text[0]


def assert_same_as_stepper(doc, trace, first=0):
    """At every step, each card lists what the Stepper's memory holds, and the arrows are its messages in flight."""
    stepper = Stepper(trace)
    for step in range(steps(doc) + 1):
        snap = stepper.goto(first + step)
        state = state_at(doc, step)
        for rank, items in enumerate(state.cards):
            assert [i.name for i in items] == list(snap.memory[rank]), (step, rank)
            for item in items:
                assert item.value == short(value_text(snap.memory[rank][item.name])), (step, item)
        assert [a.message for a in state.arrows] == [m.id for m in snap.in_flight], step


@pytest.mark.parametrize("name", SCENARIOS)
def test_every_step_shows_what_the_stepper_replays(name):
    run = get(name).run()
    doc = build_document(run)
    assert steps(doc) == len(run.result.trace.events) and doc["notice"] is None
    assert_same_as_stepper(doc, run.result.trace)
    json.dumps(doc, allow_nan=False)  # JSON as it stands: no numpy scalars, no NaN


def test_split_shows_7_arriving_on_device_1():
    doc = build_document("split")
    in_flight = state_at(doc, 3)
    assert [(a.src, a.dst, a.name, a.value) for a in in_flight.arrows] == [(0, 1, "A", "[7.]")]
    assert in_flight.said == "device 0 sends message #0 to device 1: A = [7.], 8 bytes; it arrives at t=2.008 us"
    after = state_at(doc, 4)
    assert [(i.name, i.value) for i in after.cards[1]] == [("A", "[7.]")] and after.arrows == []
    assert after.said == "device 1 receives message #0 from device 0: A = [7.]"
    assert doc["check"]["verdict"] == "passed" and doc["check"]["event"] is None
    assert doc["check"]["text"].startswith("check passed: 7 values and the result")


def test_wrong_input_marks_the_message_and_where_it_lands():
    run = get("wrong-input").run()
    doc = build_document(run)
    c = doc["check"]
    assert c["verdict"] == "FAILED" and c["where"] == "message" and c["rank"] == 1
    assert c["event"] == 2 and c["marks"] == [2, 3]  # the send, and the recv that lands the wrong value
    assert c["explain"] == run.report.first.explain() and "[3.] is x (the model's raw input)" in c["explain"]
    assert c["text"] == str(run.report)
    assert [(a.value, a.diverged) for a in state_at(doc, 3).arrows] == [("[3.]", True)]
    held = {i.name: i for i in state_at(doc, 5).cards[1]}
    assert held["A"].value == "[3.]" and held["A"].diverged and not held["B"].diverged
    assert not any(i.diverged for i in state_at(doc, 5).cards[0])


def test_a_check_given_with_any_run_is_shown():
    x = np.array([3.0])
    run = World(2).run(get("wrong-input").program, x)
    doc = build_document(run, check(run, get("wrong-input").reference()))
    assert doc["check"]["event"] == 2 and doc["title"] == "a run on 2 devices"
    assert build_document(run)["check"] is None


def test_the_verdict_is_read_where_the_report_has_one():
    report = SimpleNamespace(first=None, ok=True, verdict="not verified")
    doc = build_document(get("split").run().result, report)
    assert doc["check"]["verdict"] == "not verified"  # not "passed": ok alone would say passed
    old_style = SimpleNamespace(first=None, ok=False)
    assert build_document(get("split").run().result, old_style)["check"]["verdict"] == "FAILED"


def test_shards_say_their_part_and_collectives_their_step_and_chunk():
    doc = build_document("tp-row")
    held = {i.name: i for i in state_at(doc, 12).cards[1]}
    assert held["X"].part == "[0:2, 2:4]" and held["W"].part == "[2:4, 0:6]"
    assert held["Y.partial[0]"].part == "elements 6-11 (flattened)"
    labels = [e.get("lb") for e in doc["events"] if e["k"] == "send"]
    assert "all_reduce#0 ring step 0 chunk 1" in labels and "all_reduce#0 ring step 1 chunk 0" in labels
    said = said_at(doc, 5)
    assert said.startswith("device 0 sends message #2 to device 1 (all_reduce#0 ring step 0 chunk 1): Y.partial[0]")
    text = json.dumps(doc)
    for m in get("tp-row").run().result.trace.messages:  # never a raw collective tag
        assert str(m.tag) not in text or m.tag < 1 << 30


def partial_trace():
    """Device 0 and 1 each compute a partial sum of Y over both; device 0 sends its own to device 1."""

    class PartialOp(Op):  # records gain a ``partial`` attribute: the ranks a partial sum is over
        __slots__ = ("partial",)

    class PartialMessage(Message):
        __slots__ = ("partial",)

    trace = Trace(2)
    for rank in (0, 1):
        op = PartialOp(rank, rank, f"Y.partial[{rank}]", 0.0, 1e-6, 0, None, np.array([1.0, 2.0]), None, None)
        op.partial = (0, 1)
        trace.events.append(("op", op))
    m = PartialMessage(0, 0, 1, 0, (2,), np.float64, 16, 1e-6, np.array([1.0, 2.0]), None, 1e-6, 2e-6)
    m.name, m.partial, m.t_recv = "Y.partial[0]", (0, 1), 2e-6
    trace.events += [("send", m), ("recv", m)]
    return trace


def test_partial_sums_say_over_which_devices():
    doc = build_document(partial_trace())
    item = state_at(doc, 2).cards[1][0]
    assert item.partial == (0, 1) and item.render() == "Y.partial[1] (partial over 0, 1)=[1., 2.]"
    assert "Y.partial[0] (a partial sum over devices 0, 1) = [1., 2.]" in said_at(doc, 0)
    (arrow,) = state_at(doc, 3).arrows
    assert arrow.partial == (0, 1) and arrow.render() == "#0 0->1 Y.partial[0] (partial over 0, 1)=[1., 2.]"
    assert state_at(doc, 4).cards[1][1].partial == (0, 1)  # what arrives is still partial


def test_pipelines_show_microbatch_numbers():
    doc = build_document("pipeline-1f1b")
    by_name = {e["n"]: e.get("mb") for e in doc["events"] if "n" in e}
    assert by_name["h1.mb0"] == 0 and by_name["dz3.mb2"] == 2 and by_name["W1"] is None
    sends = [e for e in doc["events"] if e["k"] == "send"]
    assert all(e["mb"] == int(e["lb"][-1]) for e in sends)  # "0SEND_F3" is microbatch 3
    assert "(microbatch 2)" in said_at(doc, next(i for i, e in enumerate(doc["events"]) if e.get("n") == "h1.mb2"))


@pytest.mark.parametrize(
    ("name", "label", "mb"),
    [
        ("h2.mb3", None, 3),
        ("1F0", None, 0),
        ("W1", None, None),  # a weight, not microbatch 1
        ("dW3.mb0+dW3.mb1", None, None),  # a sum over microbatches
        (None, "0SEND_F1", 1),
        ("h1", "F4", 4),
        ("x", "all_reduce#0 ring step 1 chunk 2", None),
    ],
)
def test_microbatch_reads_names_and_labels(name, label, mb):
    assert microbatch(name, label) == mb


def test_values_and_parts_as_text():
    assert value_text(np.array([7.0])) == "[7.]"
    assert value_text(np.arange(12.0).reshape(2, 6)) == [
        "(2, 6) float64",
        "[[0., 1., 2., 3., 4., 5.], [6., 7., 8., 9., 10., 11.]]",
        [["0.", "1.", "2.", "3.", "4.", "5."], ["6.", "7.", "8.", "9.", "10.", "11."]],  # the projector's matrix
    ]
    assert value_text(np.arange(8).reshape(2, 2, 2))[2] == [["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"]]
    assert value_text(np.linspace(-1, 1, 64))[2][0][:3] == ["-1.", "-0.9683", "-0.9365"]  # 64 numbers: all shown
    assert value_text(np.zeros(1000, np.float32)) == [
        "(1000,) float32",
        "(1000,) float32, starting [0., 0., 0., 0., 0., 0., 0., 0., ...]",
    ]
    assert value_text(None, "(4,) float32") == "(4,) float32"  # a metadata-only run
    assert value_text({"W1": 1, "b1": 2}) == "{W1, b1}"
    assert part_text(np.s_[:, 3:6]) == "[:, 3:6]" and part_text(None) is None and part_text(np.s_[::2]) == "[::2]"


def test_long_runs_are_thinned_to_a_window_that_starts_where_the_run_was():
    run = get("pipeline-1f1b").run()
    doc = build_document(run, max_events=100, first_event=150)
    assert steps(doc) == 100 and doc["first"] == 150 and doc["total"] == 289 and doc["base"] > 0
    assert "this run has 289 events" in doc["notice"] and "events 150 to 249" in doc["notice"]
    assert_same_as_stepper(doc, run.result.trace, first=150)
    assert len(json.dumps(doc)) < len(json.dumps(build_document(run)))


def test_a_thinned_window_holds_the_first_divergence():
    run = get("dp-sum-not-average").run()
    diverged = run.report.first.event
    doc = build_document(run, max_events=100)
    assert doc["first"] <= diverged < doc["first"] + 100
    assert "around the first divergence" in doc["notice"]
    assert doc["check"]["event"] == doc["base"] + diverged - doc["first"]
    assert_same_as_stepper(doc, run.result.trace, first=doc["first"])


def test_bad_requests_say_what_is_wrong():
    with pytest.raises(ValueError, match="stops with ContractError, so there is no finished run"):
        build_document("wrong-shape")
    assert "It stops here, with deadlock" in build_document("send-send-deadlock")["story"]  # the run up to it
    with pytest.raises(TypeError, match="give a run"):
        build_document(42)
    with pytest.raises(KeyError, match="did you mean 'wrong-input'"):
        build_document("wrong_input")
    with pytest.raises(ValueError, match="positive number of events"):
        build_document("split", max_events=0)
    with pytest.raises(ValueError, match="the run has events 0 to 4"):
        build_document("split", first_event=5)
    with pytest.raises(ValueError, match="this view has steps 0 to 5"):
        state_at(build_document("split"), 6)


def test_the_document_needs_no_payloads():
    result = World(2, keep_payloads=False).run(get("split").program, np.array([3.0]))
    doc = build_document(result)
    assert [(a.value, a.name) for a in state_at(doc, 3).arrows] == [("(1,) float64", "A")]


# ---- what the projector mode draws: the mesh's grid, pass tags, and the wrong numbers ----------------------


def test_a_scenario_on_a_mesh_lays_its_cards_out_on_the_mesh():
    grid = build_document("3d-step")["grid"]  # dp x pp x tp = 2 x 2 x 2: a row per replica
    assert (grid["rows"], grid["cols"]) == (2, 4) and grid["ranks"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert grid["coords"][6] == "dp1 pp1 tp0"
    assert build_document("pipeline-1f1b")["grid"] is None  # no mesh: the page picks one row of four


def test_a_mesh_that_does_not_hold_the_run_s_devices_is_refused():
    from simulator.tensors.mesh import DeviceMesh

    with pytest.raises(ValueError, match="does not hold each of the run's 2 devices once"):
        build_document(get("split").run(), mesh=DeviceMesh.grid((2, 2)))


@pytest.mark.parametrize(
    ("name", "tags"),
    [("pipeline-1f1b", {"F", "B"}), ("pipeline-zb-h1", {"F", "I", "W"}), ("tp-row", set())],
)
def test_ops_are_tagged_with_their_pass_as_the_schedule_runs_it(name, tags):
    doc = build_document(name)
    ops = [e for e in doc["events"] if e["k"] == "op"]
    assert {e["tg"][0] for e in ops if "tg" in e} == tags
    for e in ops:
        if "tg" in e:
            assert e["tg"][1:] == str(e["mb"]), e  # F3 is microbatch 3's


def test_the_first_divergence_names_its_wrong_numbers_and_the_value_due():
    run = get("tp-bug-wrong-order").run()
    doc = build_document(run)
    first = run.report.first
    found, expected = np.asarray(first.found), np.asarray(first.expected)
    wrong = [i for i, (f, e) in enumerate(zip(found.reshape(-1), expected.reshape(-1))) if f != e]
    assert doc["check"]["cells"] == wrong and 0 < len(wrong) < found.size  # the blocks swapped, not all wrong
    short, _, cells = doc["values"][doc["check"]["expected"]]
    assert short == "(2, 6) float64" and np.array_equal(np.array(cells, dtype=float), expected)
    marked = doc["events"][doc["check"]["event"]]
    assert np.array_equal(np.array(doc["values"][marked["v"]][2], dtype=float), found)  # the card's numbers


def test_a_small_wrong_value_is_marked_whole():
    check_ = build_document("wrong-input")["check"]
    assert check_["cells"] == [0] and build_document("wrong-input")["values"][check_["expected"]] == "[7.]"


def test_an_op_the_cost_model_does_not_price_is_not_said_to_take_0_us():
    doc = build_document("tp-row")
    said = [" ".join(e["say"]) if isinstance(e["say"], list) else e["say"] for e in doc["events"] if e["k"] == "op"]
    assert not [s for s in said if "taking 0 " in s]
    free = [e for e in doc["events"] if e["k"] == "op" and e["t1"] == e["t"]]
    assert free and all("no time in the cost model" in e["say"][-1] for e in free)
