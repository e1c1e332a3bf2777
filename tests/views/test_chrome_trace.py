"""Chrome Trace Event export: valid for Perfetto / chrome://tracing, exact times, collapsing of huge runs."""

import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import CostModel, World
from simulator.cli.main import main
from simulator.cost.model import FullyConnected, Ring, TwoLevel
from simulator.cost.presets import classroom
from simulator.teach.figures.programs import fan_out, pipeline_two_stage, ring_pass
from simulator.views.memory import memory_timeline
from simulator.views.plot.chrome_trace import chrome_trace, write_chrome_trace

US = 1e-6


def check_valid(doc: dict) -> dict:
    """Assert the properties viewers rely on; returns counts by phase.

    - every complete event has ts, dur >= 0, pid, tid, cat; slices on one (pid, tid) never overlap;
    - every flow id has exactly one start ("s") and one end ("f"), start no later than end;
    - every flow event binds to a slice: same pid, tid, cat and ts as a complete event that comes
      before it in the file (what Chrome DevTools matches on; Perfetto binds it to the enclosing
      slice, which that one is, with bp = "e").
    """
    events = doc["traceEvents"]
    json.dumps(doc)  # serialisable
    slices: dict[tuple, list] = {}
    seen: set[tuple] = set()
    flows: dict[int, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for ev in events:
        ph = ev["ph"]
        counts[ph] = counts.get(ph, 0) + 1
        if ph == "X":
            assert ev["dur"] >= 0 and isinstance(ev["ts"], float | int)
            assert {"name", "cat", "pid", "tid"} <= set(ev)
            slices.setdefault((ev["pid"], ev["tid"]), []).append((ev["ts"], ev["ts"] + ev["dur"]))
            seen.add((ev["pid"], ev["tid"], ev["cat"], ev["ts"]))
        elif ph in "sf":
            assert ev["bp"] == "e"
            key = (ev["pid"], ev["tid"], ev["cat"], ev["ts"])
            assert key in seen, f"flow event {ev} binds to no slice before it"
            assert ph not in flows.setdefault(ev["id"], {}), f"flow {ev['id']} has two {ph!r} events"
            flows[ev["id"]][ph] = ev["ts"]
    for track, spans in slices.items():
        spans.sort()
        for (a0, a1), (b0, _) in zip(spans, spans[1:]):
            assert b0 >= a1 - 1e-9 * max(1.0, abs(a1)), f"overlapping slices on track {track}: {a0, a1} and {b0}"
    for fid, ends in flows.items():
        assert set(ends) == {"s", "f"}, f"flow {fid} is missing an end: {ends}"
        assert ends["s"] <= ends["f"]
    return counts


def gpipe_run():
    xs = [np.arange(250, dtype=np.float64) + i for i in range(4)]
    return World(2, cost=classroom()).run(pipeline_two_stage, xs, 4 * US, 8 * US)


def runs():
    ring = replace(classroom(), topology=Ring())
    two = CostModel(latency=US, bandwidth=1e10, topology=TwoLevel(2, 5 * US, 1e9))
    return {
        "gpipe": gpipe_run(),
        "ring pass": World(4, cost=classroom()).run(ring_pass, np.ones(500), 3, 6 * US),
        "ring topology fan-out": World(8, cost=ring).run(fan_out, np.ones(250), {0: [1, 2, 3, 4, 7, 6, 5]}, US),
        "two-level many-to-many": World(4, cost=two).run(fan_out, np.ones(100), {0: [1, 2, 3], 1: [0, 2, 3]}, US),
        "bare trace": gpipe_run().trace,
    }


@pytest.mark.parametrize("name, run", list(runs().items()))
def test_export_is_valid(name, run):
    trace = run if not hasattr(run, "trace") else run.trace
    counts = check_valid(chrome_trace(run))
    assert counts["X"] == len(trace.ops) + 2 * len(trace.messages)
    assert counts["s"] == counts["f"] == len(trace.messages)


def test_processes_tracks_and_names():
    doc = chrome_trace(gpipe_run())
    meta = [e for e in doc["traceEvents"] if e["ph"] == "M"]
    procs = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
    assert procs == {0: "device 0", 1: "device 1"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert threads == {(r, t): n for r in (0, 1) for t, n in enumerate(["compute", "send", "recv"])}
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["tid"] for e in x if e["cat"] == "compute"} == {0}
    assert {e["tid"] for e in x if e["cat"] == "comm"} == {1, 2}
    assert "cost_model" in doc["otherData"] and "collapsed" not in doc["otherData"]


def test_overlapping_sends_get_their_own_tracks():
    ring = replace(classroom(), topology=Ring())
    run = World(8, cost=ring).run(fan_out, np.ones(250), {0: [1, 2, 3, 4, 7, 6, 5]}, US)
    doc = chrome_trace(run)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name" and e["pid"] == 0}
    assert names == {"compute", "send", "send 2"}  # messages leave on the links 0->1 and 0->7 at once


def test_timestamps_are_simulated_microseconds():
    run = gpipe_run()
    doc = chrome_trace(run)
    x = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    f1 = next(e for e in x if e["name"] == "F1" and e["pid"] == 0)
    assert f1["ts"] == pytest.approx(4.0, rel=1e-12) and f1["dur"] == pytest.approx(4.0, rel=1e-12)
    m = run.trace.messages[0]
    send = next(e for e in x if e["cat"] == "comm" and e["pid"] == 0 and e["args"]["message"] == 0)
    recv = next(e for e in x if e["cat"] == "comm" and e["pid"] == 1 and e["args"]["message"] == 0)
    assert send["ts"] == m.t_start * 1e6 == pytest.approx(4.0)
    assert send["dur"] == pytest.approx(2.0, rel=1e-9)  # 2000 B at 1 GB/s
    assert recv["ts"] + recv["dur"] == pytest.approx(m.t_arrive * 1e6, rel=1e-12) == pytest.approx(7.0)
    assert send["args"]["bytes"] == 2000 and send["args"]["shape"] == [250]


def test_memory_counters_follow_the_memory_timeline():
    run = gpipe_run()
    mem = memory_timeline(run)
    counters = [e for e in chrome_trace(run)["traceEvents"] if e["ph"] == "C"]
    dev1 = [(e["ts"], e["args"]["bytes"]) for e in counters if e["pid"] == 1]
    assert dev1 == [(t * 1e6, b) for t, b in zip(mem.times[1], mem.held[1])]
    assert not [e for e in chrome_trace(run, memory=False)["traceEvents"] if e["ph"] == "C"]


def test_written_file_is_the_same_document(tmp_path):
    run = gpipe_run()
    info = write_chrome_trace(run, tmp_path / "sub" / "t.json")
    doc = json.loads(info.path.read_text())
    assert doc["traceEvents"] == json.loads(json.dumps(chrome_trace(run)))["traceEvents"]
    assert info.events == len(doc["traceEvents"]) and not info.collapsed


def chunked_ring(dev, chunks: int, steps: int):
    """Each step every device sends ``chunks`` small messages to its right neighbour (a chunked ring)."""
    p, r = dev.world_size, dev.rank
    x = np.zeros(4)
    total = 0.0
    for _ in range(steps):
        for c in range(chunks):
            dev.isend(x + r, (r + 1) % p, tag=c)
        for c in range(chunks):
            total += dev.recv((r - 1) % p, tag=c)[0]
        dev.compute("step", lambda: None, seconds=US)
    return total


def test_small_budget_collapses_and_says_so():
    run = World(4, cost=classroom()).run(chunked_ring, 16, 3)
    assert run.outputs == [3 * 16 * ((r - 1) % 4) for r in range(4)]
    full = chrome_trace(run)
    doc = chrome_trace(run, max_events=200)
    assert len(doc["traceEvents"]) <= 200 < len(full["traceEvents"])
    note = doc["otherData"]["collapsed"]
    assert note.startswith("collapsed:") and "192 messages" in note
    assert any(e["ph"] == "i" and "collapsed" in e["name"] for e in doc["traceEvents"])
    check_valid(doc)
    merged = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "comm" and e["tid"] == 1]
    assert sum(e["args"].get("messages", 1) for e in merged) == len(run.trace.messages)
    with pytest.raises(ValueError, match="positive event budget"):
        chrome_trace(run, max_events=0)


def test_a_million_event_run_is_exported_collapsed(tmp_path):
    """262,144 messages: about a million events uncollapsed; the export merges the per-chunk events."""
    run = World(64, keep_payloads=False).run(chunked_ring, 64, 64)
    info = write_chrome_trace(run, tmp_path / "big.json")
    assert info.run_events > 1_000_000 and info.collapsed
    assert info.events < 100_000 and "262,144 messages" in info.note
    doc = json.loads(info.path.read_text())
    assert doc["otherData"]["collapsed"] == info.note
    check_valid(doc)


@settings(max_examples=25, deadline=None)
@given(
    p=st.integers(2, 9),
    topology=st.sampled_from(["full", "ring", "two-level"]),
    plan=st.lists(st.tuples(st.integers(0, 8), st.integers(0, 8), st.integers(0, 300)), min_size=1, max_size=25),
)
def test_any_message_pattern_exports_validly(p, topology, plan):
    """Random messages (sizes from 0 bytes) on every topology: the export stays valid, flights exact."""
    topo = {"full": FullyConnected(), "ring": Ring(), "two-level": TwoLevel(3, 4 * US, 2e8)}[topology]
    cost = CostModel(latency=US, bandwidth=1e9, flops=1e9, topology=topo)
    sends = [(s % p, d % p, n) for s, d, n in plan if s % p != d % p]

    def prog(dev):
        for k, (s, d, n) in enumerate(sends):
            if dev.rank == s:
                dev.isend(np.zeros(n), d, tag=k)
        for k, (s, d, _) in enumerate(sends):
            if dev.rank == d:
                dev.recv(s, tag=k)
                dev.compute(f"use{k}", lambda: None, seconds=US / 2)

    run = World(p, cost=cost).run(prog)
    counts = check_valid(chrome_trace(run))
    assert counts.get("s", 0) == len(sends)
    for m in run.trace.messages:  # contention can delay a message's start, never shorten its flight
        assert m.t_start >= m.t_send
        flight = cost.message_time(m.nbytes, m.src, m.dst, world_size=p)
        assert m.t_arrive - m.t_start == pytest.approx(flight, rel=1e-9, abs=1e-18)


def test_export_command(tmp_path, capsys):
    out = tmp_path / "split.json"
    assert main(["export", "split", "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert check_valid(doc)["s"] == 1
    # a deadlock: the run up to it, with the reason on stderr
    assert main(["export", "1f1b-blocking-deadlock", "--out", str(tmp_path / "x.json")]) == 0
    said = capsys.readouterr()
    assert "stops with DeadlockError; showing the run up to there" in said.err and "wait-for cycle" in said.err
    doc = json.loads((tmp_path / "x.json").read_text())
    names = {e["name"] for e in check_valid(doc) and doc["traceEvents"] if e.get("ph") == "X"}
    # device 0 ran both forwards and device 1 microbatch 0's backward, then each blocked in its send
    assert {"h1.mb0", "h1.mb1", "h2.mb0", "dW2.mb0"} <= names and "h2.mb1" not in names
    # ... and each one's send that nobody received is a slice from its post to the end, as the timeline draws it
    waiting = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e["name"].endswith("never received")]
    assert sorted(e["pid"] for e in waiting) == [0, 1], waiting
    end = max(e["ts"] + e["dur"] for e in doc["traceEvents"] if e.get("ph") == "X")
    assert all(e["ts"] + e["dur"] == pytest.approx(end) for e in waiting)  # (device 1 posted its send at the end)


def test_the_classroom_bug_s_export_marks_its_first_divergence(tmp_path):
    """A teacher exports the wrong-input run to Perfetto: the file says the check FAILED, the message that carried x
    where A should have crossed is named by what it carried, and an instant marks where device 1 got it. Before,
    the slice read "A -> 1", as the receiver declared it, and nothing said the run was wrong."""
    out = tmp_path / "bug.json"
    assert main(["export", "wrong-input", "-o", str(out)]) == 0
    doc = json.loads(out.read_text())
    check_valid(doc)
    assert doc["otherData"]["check"]["verdict"] == "FAILED"
    marked = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "first divergence" in e["name"]]
    assert sorted(e["name"] for e in marked) == [
        "x, not A, -> 1 (first divergence)",
        "x, not A, <- 0 (first divergence)",
    ]
    assert all("carried [3.]" in e["args"]["check"] for e in marked)
    (instant,) = [e for e in doc["traceEvents"] if e.get("ph") == "i"]
    recv = next(e for e in marked if e["pid"] == 1)
    assert instant["pid"] == 1 and instant["ts"] == pytest.approx(recv["ts"] + recv["dur"])
    assert "should have received A" in instant["args"]["explain"]
    # a run that passes says so, and marks nothing
    assert main(["export", "split", "-o", str(tmp_path / "ok.json")]) == 0
    ok = json.loads((tmp_path / "ok.json").read_text())
    assert ok["otherData"]["check"]["verdict"] == "passed"
    assert not any("first divergence" in e.get("name", "") for e in ok["traceEvents"])


def test_a_collapsed_export_still_says_the_verdict_and_where_it_first_diverged():
    from simulator.teach.examples import get

    run = get("tp-bug-forgot-all-reduce").run()
    doc = chrome_trace(run.result, max_events=12, report=run.report)
    check_valid(doc)
    assert doc["otherData"]["check"]["verdict"] == "FAILED" and "collapsed" in doc["otherData"]
    assert any(e.get("ph") == "i" and e["name"] == "check FAILED: the first divergence" for e in doc["traceEvents"])
