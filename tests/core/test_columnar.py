"""The columnar trace: records are views of packed rows, with every attribute a Message or Op has."""

import numpy as np
import pytest

import simulator.collectives.ring_plan as ring_plan
import simulator.core.engine as engine
import simulator.core.ordering as ordering
import simulator.core.rows as rows
from simulator import CostModel, World
from simulator.core.trace import Message, Op


def labelled(dev):
    if dev.rank == 0:
        x = dev.hold("x", np.arange(3.0), index=np.s_[0:3], doc="the input")
        y = dev.compute("y", lambda v: 2 * v, x, flops=7, partial=True)
        dev.send(y, dst=1, tag=5, label="hand-made")
        dev.free("x")
        return None
    got = dev.recv(src=0, tag=5, name="y", index=np.s_[0:3])
    return dev.compute("z", lambda v: v + 1, got, seconds=2e-6, keep=False)


def test_records_are_views_with_every_attribute():
    run = World(2, cost=CostModel()).run(labelled)  # 100 TFLOP/s, no op latency: y takes 7e-14 s
    trace = run.trace
    kinds = [k for k, _ in trace.events]
    assert kinds == ["hold", "op", "send", "free", "recv", "op"]
    (m,) = trace.messages
    assert isinstance(m, Message) and m.id == 0 and (m.src, m.dst, m.tag) == (0, 1, 5)
    assert m.shape == (3,) and m.dtype == np.float64 and m.nbytes == 24 and m.label == "hand-made"
    assert m.name == "y" and m.index == np.s_[0:3] and m.t_recv == m.t_arrive > m.t_send == m.t_start == 7e-14
    np.testing.assert_array_equal(m.payload, [0.0, 2.0, 4.0])
    hold, y, z = trace.events[0][1], trace.ops[0], trace.ops[1]
    assert isinstance(hold, Op) and hold.name == "x" and hold.doc == "the input" and hold.index == np.s_[0:3]
    assert hold.nbytes == 24 and hold.flops == 0 and hold.keep
    assert y.flops == 7 and y.partial == (0, 1) and y.keep and y.nbytes == 24 and y.inputs[0].tolist() == [0, 1, 2]
    assert z.flops is None and not z.keep and z.nbytes == 0 and z.t_end - z.t_start == pytest.approx(2e-6)
    assert [o.id for o in trace.ops] == [1, 3] and trace.events[3][1].id == 2  # holds and frees are numbered too


def test_the_same_row_gives_the_same_object_while_someone_holds_it():
    trace = World(2).run(labelled).trace
    m = trace.messages[0]
    assert trace.events[2][1] is m and trace.events[4][1] is m and trace.messages[-1] is m
    assert trace.messages[0:1] == [m] and trace.messages != [] and list(trace.ops)[0] is trace.ops[0]


def test_sequences_compare_like_lists():
    trace = World(3).run(lambda dev: None).trace
    assert trace.messages == [] and trace.ops == [] and len(trace.events) == 0
    with pytest.raises(IndexError):
        trace.messages[0]


def test_columns_agree_with_the_views():
    run = World(4, cost=CostModel(latency=3e-6)).run(lambda dev: dev.all_reduce(np.arange(10.0) * dev.rank))
    trace = run.trace
    cols = trace.message_columns()
    for m in trace.messages:
        row = (cols["src"][m.id], cols["dst"][m.id], cols["t_send"][m.id], cols["t_recv"][m.id], cols["nbytes"][m.id])
        assert row == (m.src, m.dst, m.t_send, m.t_recv, m.nbytes)
    ops = trace.op_columns(only_ops=True)
    assert ops["t_end"].tolist() == [o.t_end for o in trace.ops] and ops["id"].tolist() == [o.id for o in trace.ops]
    assert trace.end_time == max(cols["t_recv"].max(), ops["t_end"].max())


def test_collective_parts_carry_numbers_and_show_their_labels():
    def program(dev):
        dev.all_reduce(np.arange(6.0) + dev.rank)  # ring: numbered steps and chunks
        dev.all_reduce(np.arange(6.0), algorithm="halving_doubling")  # 3 members: a "fold" step, "all" chunks
        dev.broadcast(np.ones(2) if dev.rank == 0 else None, src=0, shape=(2,), dtype=np.float64)  # tree: "all"

    trace = World(3, book_collectives=False).run(program).trace
    cols = trace.message_columns()
    labels = [m.label for m in trace.messages]
    assert (
        labels[0].startswith("all_reduce#0 ring step 0 chunk ")
        and "all_reduce#1 halving_doubling step fold chunk all" in labels
    )
    assert any(lab.startswith("broadcast#2 tree step 0 chunk all") for lab in labels)
    # one interned text per call and per named part, not one per message: the parts are numbers in their columns
    assert len(trace._rec.labels) < 10 < len(labels)
    ring = cols["label"] == cols["label"][0]
    assert (cols["step"][ring] >= 0).all() and (cols["chunk"][ring] >= 0).all()
    assert sorted(set(cols["step"][ring].tolist())) == [0, 1, 2, 3]
    # the same trace as when the ring goes by label text (the torch backend's way, PointToPoint._post)
    texts = [f"all_reduce#0 ring step {s} chunk {c}" for s, c in zip(cols["step"][ring], cols["chunk"][ring])]
    assert texts == [lab for lab, r in zip(labels, ring) if r]


def test_metadata_costs_few_bytes_per_message():
    def ring(dev, rounds):
        x = np.zeros(1)
        for _ in range(rounds):
            dev.send(x, dst=(dev.rank + 1) % dev.world_size)
            x = dev.recv(src=(dev.rank - 1) % dev.world_size)

    trace = World(256, keep_payloads=False).run(ring, 20).trace
    assert len(trace.messages) == 5120 and trace.nbytes() / 5120 < 120


def test_a_run_message_by_message_holds_little_beside_its_trace():
    import gc
    import tracemalloc

    def program(dev):
        return dev.all_reduce(np.full(256, float(dev.rank), np.float32))

    world = World(256, keep_payloads=False, book_collectives=False)
    World(4, keep_payloads=False, book_collectives=False).run(program)  # imports and first-use caches
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        run = world.run(program)
        gc.collect()
        kept, peak = (m - before for m in tracemalloc.get_traced_memory())
    finally:
        tracemalloc.stop()
    messages = 2 * 256 * 255
    assert run.outputs[0][0] == 255 * 256 / 2
    # no text per message, no array as long as the trace beside it (benchmarks/ring_allreduce_vs_simpy.py: 98 B, 1.31x)
    assert kept / messages < 110 and peak / kept < 1.45, (kept / messages, peak / kept)


def test_settling_in_small_windows_and_often_changes_nothing(monkeypatch):
    def program(dev):
        y = dev.all_reduce(np.arange(50.0) + dev.rank)
        for k in range(3):
            dev.send(y[k : k + 2], dst=(dev.rank + k + 1) % dev.world_size, tag=k)
            y = y + dev.recv(src=(dev.rank - k - 1) % dev.world_size, tag=k).sum()
        return y

    for keep in (True, False):
        whole = World(40, keep_payloads=keep).run(program)
        monkeypatch.setattr(ordering, "WINDOW", 17)
        monkeypatch.setattr(ordering, "SMALLEST_WINDOW", 17)
        monkeypatch.setattr(ordering, "WHOLE_UP_TO", 0)
        monkeypatch.setattr(ordering, "LOG_SLICE", 23)
        monkeypatch.setattr(engine, "SETTLE_EVERY", 50)
        monkeypatch.setattr(ring_plan, "SETTLE_EVERY", 50)
        pieces = World(40, keep_payloads=keep).run(program)
        monkeypatch.undo()
        assert pieces.trace.signature() == whole.trace.signature()
        assert all(np.array_equal(a, b) for a, b in zip(pieces.outputs, whole.outputs))


def test_growable_arrays():
    g = rows.Growable(np.int32, capacity=2)
    g.extend(np.arange(5))
    g.reserve(8, fill=-1)
    assert g.values.tolist() == [0, 1, 2, 3, 4, -1, -1, -1]
    g.trim()
    assert len(g._data) == 8
