"""A ring booked whole makes its payloads' objects when the trace's payloads are first read (``Recorder.keep_later``):
the same values, flags and identities as made at once, each row in its place, each run's own."""

import copy
import pickle

import numpy as np
import pytest

import simulator.collectives.ring_payloads as ring_payloads
from simulator import World
from simulator.core.rows import Recorder
from tests.collectives.test_booked_payloads import same_runs, values_of


@pytest.fixture
def made(count_calls):
    """How many times a booked ring's payload objects were made."""
    return count_calls(ring_payloads, "_objects")


def ring_then_messages(dev, n):
    """A student's program: a booked all-reduce between a message to the right and an op on what came back."""
    x = values_of(n, dev.rank, np.float64)
    right, left = (dev.rank + 1) % dev.world_size, (dev.rank - 1) % dev.world_size
    dev.send(x[:2] * 2.0, right)
    got = dev.recv(left)
    y = dev.all_reduce(x)
    z = dev.compute("z", np.add, y[:2], got)
    dev.send(z, right)
    return dev.recv(left) + y.sum()


def test_the_objects_are_made_on_the_first_read_only(made):
    run = World(40).run(lambda dev: dev.all_reduce(values_of(40, dev.rank, np.float32)))
    assert made[0] == 0  # nobody has read a payload yet
    first = run.trace.messages[0].payload
    assert made[0] == 1
    assert run.trace.messages[0].payload is first and all(op.output is not None for op in run.trace.ops)
    assert made[0] == 1  # made once, kept


def test_rows_written_after_a_booked_ring_keep_their_places(made):
    whole = World(6).run(ring_then_messages, 13)
    messages = World(6, book_collectives=False).run(ring_then_messages, 13)
    assert made[0] == 0
    same_runs(whole, messages)
    assert made[0] == 1


def test_two_rings_in_one_run_and_two_worlds_side_by_side(made):
    def twice(dev, k):
        y = dev.all_reduce(values_of(9, dev.rank + k, np.float32))
        return dev.all_reduce(y[:5] * 0.5, op="avg")

    a, b = World(5).run(twice, 0), World(5).run(twice, 3)
    assert made[0] == 0
    # b's read makes b's objects, not a's; each equals its own run message by message
    same_runs(b, World(5, book_collectives=False).run(twice, 3))
    assert made[0] == 2
    same_runs(a, World(5, book_collectives=False).run(twice, 0))
    assert made[0] == 4
    assert not {id(m.payload) for m in a.trace.messages} & {id(m.payload) for m in b.trace.messages}


def test_the_payloads_made_later_are_read_only_as_the_messages_are():
    run = World(33).run(lambda dev: dev.all_reduce(values_of(70, dev.rank, np.float64)))
    arrays = [m.payload for m in run.trace.messages]
    arrays += [v for op in run.trace.ops for v in (*op.inputs, op.output)]
    assert all(not a.flags.writeable for a in arrays)
    with pytest.raises(ValueError):
        arrays[-1].setflags(write=True)  # (read-only memory under it: the flag cannot be set back)


def test_a_recorder_keeps_placeholders_until_read():
    rec = Recorder(True)
    rec.add_msg_payload("m0")
    made = []

    def make():
        made.append(1)
        return ["m1", "m2"], [("in", "out")]

    rec.keep_later(2, 1, make)
    rec.add_msg_payload("m3")
    rec.add_op_payload((None, "o1"))
    assert not made
    assert rec.op_payloads == [("in", "out"), (None, "o1")]
    assert rec.msg_payloads == ["m0", "m1", "m2", "m3"]
    assert made == [1]


@pytest.mark.parametrize("clone", [lambda r: pickle.loads(pickle.dumps(r)), copy.deepcopy], ids=["pickle", "deepcopy"])
def test_a_run_pickled_or_copied_before_its_payloads_are_read_keeps_them(made, clone):
    run = World(6).run(ring_then_messages, 13)
    copied = clone(run.trace.recorder)
    assert made[0] == 1  # (made for the copy)
    original = run.trace.recorder
    assert len(copied.msg_payloads) == len(original.msg_payloads) == len(run.trace.messages)
    for a, b in zip(copied.msg_payloads + copied.op_payloads, original.msg_payloads + original.op_payloads):
        assert type(a) is type(b) and repr(a) == repr(b)


def test_reading_many_rings_message_by_message_makes_each_block_once_and_works_out_the_bounds_once(made, monkeypatch):
    """A training loop's rings read in order, one message at a time (a view stepping through the run): each block is
    made when its first row is read, and the blocks' bounds are worked out once (each block made used to rebuild the
    list of those waiting and their bounds: 4,000 rings read so took 3.7 s where making them at once took 0.4)."""
    builds = [0]
    bounds = Recorder._block_bounds

    def counted(self, field):
        builds[0] += self._bounds is None
        return bounds(self, field)

    monkeypatch.setattr(Recorder, "_block_bounds", counted)

    def loop(dev, k):
        y = values_of(8, dev.rank, np.float64)
        for _ in range(k):
            y = dev.all_reduce(y, op="avg")
        return y

    run = World(4).run(loop, 50)
    eager = World(4).run(loop, 50)
    at_once = eager.trace.recorder.msg_payloads
    assert made[0] == 50
    payloads = [m.payload for m in run.trace.messages]
    assert made[0] == 100 and builds[0] == 1 and run.trace.recorder.all_made
    assert len(payloads) == len(at_once) and all(np.array_equal(a, b) for a, b in zip(payloads, at_once, strict=True))
    ops = [op.output for op in run.trace.ops]
    assert made[0] == 100 and all(out is not None for out in ops)


def test_a_block_whose_making_fails_still_waits_and_the_ones_made_before_it_stay_made():
    rec = Recorder(True)
    rec.keep_later(1, 0, lambda: (["a"], []))
    tries = [0]

    def fails_once():
        tries[0] += 1
        if tries[0] == 1:
            raise MemoryError("no room for the views")
        return ["b"], []

    rec.keep_later(1, 0, fails_once)
    with pytest.raises(MemoryError):
        _ = rec.msg_payloads
    assert rec.msg_payload(0) == "a" and not rec.all_made and rec.blocks_made == 1
    assert rec.msg_payloads == ["a", "b"] and rec.all_made and rec.blocks_made == 2


@pytest.mark.parametrize("first", range(0, 200, 20))
def test_blocks_read_in_any_order_are_each_made_once_in_their_rows(first):
    """Blocks of later payloads between rows written at once, read in a random order (a message's payload, an op's,
    rows asked which are made, rows made): each block made once, every row what it would hold made at once."""
    for seed in range(first, first + 20):
        rng = np.random.default_rng(seed)
        rec, msgs, ops, made = Recorder(True), [], [], []
        for b in range(int(rng.integers(1, 30))):
            for _ in range(int(rng.integers(0, 3))):
                msgs.append(("m", b, len(msgs)))
                rec.add_msg_payload(msgs[-1])
            if rng.random() < 0.5:
                ops.append(("o", b, len(ops)))
                rec.add_op_payload(ops[-1])
            block = [("M", b, i) for i in range(int(rng.integers(0, 4)))], [("O", b, i) for i in range(rng.integers(3))]
            rec.keep_later(len(block[0]), len(block[1]), lambda b=b, block=block, made=made: made.append(b) or block)
            msgs += block[0]
            ops += block[1]
        for _ in range(int(rng.integers(0, 40))):
            k = rng.integers(3)
            if k == 0 and msgs:
                row = int(rng.integers(len(msgs)))
                assert rec.msg_payload(row) == msgs[row]
            elif k == 1 and ops:
                row = int(rng.integers(len(ops)))
                assert rec.op_payload(row) == ops[row]
            else:
                m_rows = rng.integers(0, len(msgs), 3) if msgs else np.zeros(0, int)  # (rows asked, some twice)
                o_rows = rng.integers(0, len(ops), 2) if ops else np.zeros(0, int)
                waits_m, waits_o = rec.unmade(m_rows, o_rows)
                assert waits_m.tolist() == [rec._msg_payloads[r] is None for r in m_rows]
                assert waits_o.tolist() == [rec._op_payloads[r] is None for r in o_rows]
                got_m, got_o = rec.make_rows(m_rows, o_rows)
                assert [got_m[r] for r in m_rows] == [msgs[r] for r in m_rows]
                assert [got_o[r] for r in o_rows] == [ops[r] for r in o_rows]
        assert len(made) == len(set(made))  # (no block made twice)
        assert rec.msg_payloads == msgs and rec.op_payloads == ops and rec.all_made and rec.blocks_made == len(made)
