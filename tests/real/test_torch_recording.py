"""The backend's pure-NumPy parts, without processes: the wire header, and merging rank records."""

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check
from simulator.core.tags import user_tag
from simulator.core.trace import Message, Op
from simulator.real.compare_runs import compare
from simulator.real.recording import OpRecord, RankRecord, RecvRecord, SendRecord, merge
from simulator.real.wire import (
    DTYPES,
    as_bytes,
    decode_header,
    encode_header,
    from_bytes,
)
from simulator.teach.examples import seeds
from simulator.views.stepper import Stepper


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3, 1)])
def test_header_and_bytes_round_trip(dtype, shape):
    arr = (np.arange(int(np.prod(shape))) % 2).astype(dtype).reshape(shape)
    got_shape, got_dtype = decode_header(encode_header(arr))
    assert (got_shape, got_dtype) == (shape, np.dtype(dtype))
    back = from_bytes(as_bytes(arr).copy(), got_shape, got_dtype)
    assert back.dtype == arr.dtype and back.shape == arr.shape and back.tobytes() == arr.tobytes()
    assert not back.flags.writeable


def test_header_refuses_what_it_cannot_carry():
    with pytest.raises(TypeError, match="cannot send dtype <U1"):
        encode_header(np.array(["a"]), rank=3)
    with pytest.raises(ValueError, match="at most 8 dims"):
        encode_header(np.zeros((1,) * 9))


def test_tags_follow_the_simulator_rule_which_torch_accepts():
    assert user_tag(np.int64(4), 0, "send") == 4
    assert user_tag((1 << 30) - 1, 0, "send") == (1 << 30) - 1
    for bad in ("x", 1.5, True, ("a", 1)):
        with pytest.raises(TypeError, match=r"a tag is an int \(0 to 1,073,741,823\)"):
            user_tag(bad, 2, "recv")
    for bad in (-1, 1 << 30, 1 << 31):
        with pytest.raises(ValueError, match=r"tags are >= 0|reserved for the collectives"):
            user_tag(bad, 2, "recv")


def _split_records(payload, t):
    """What ranks 0 and 1 record when running seeds.split, with given times."""
    r0, r1 = RankRecord(0), RankRecord(1)
    x = np.array([3.0])
    r0.ops.append(OpRecord("hold", Op(None, 0, "x", t[0], t[0], 0, None, x, None, None), r0.next_order()))
    r0.ops.append(OpRecord("op", Op(None, 0, "A", t[1], t[2], 1, (x,), 2 * x + 1, None, None), r0.next_order()))
    msg = Message(None, 0, 1, 0, (1,), np.dtype(np.float64), 8, t[3], payload, None)
    r0.sends.append(SendRecord(msg, 0, r0.next_order()))
    r1.recvs.append(RecvRecord(0, 1, 0, 0, t[0], t[4], "A", None, r1.next_order()))
    r1.ops.append(OpRecord("op", Op(None, 1, "B", t[5], t[6], 1, (payload,), payload**2, None, None), r1.next_order()))
    return [r0, r1]


def test_merge_joins_the_two_halves_of_a_message_and_orders_events_by_time():
    trace = merge(2, _split_records(np.array([7.0]), [0.0, 1e-6, 2e-6, 3e-6, 9e-6, 10e-6, 11e-6]), [None, [49.0]])
    assert [k for k, _ in trace.events] == ["hold", "op", "send", "recv", "op"]
    (m,) = trace.messages
    assert (m.id, m.name, m.t_send, m.t_start, m.t_arrive, m.t_recv) == (0, "A", 3e-6, 3e-6, 9e-6, 9e-6)
    assert [op.id for _, op in trace.events if _ != "send" and _ != "recv"] == [0, 1, 2]
    assert [op.name for op in trace.ops] == ["A", "B"]
    assert trace.end_time == 11e-6
    # the checker and the stepper work on it as on a simulated trace
    assert check(trace, Reference.of(seeds.model, np.array([3.0]))).ok
    assert "in flight: #0 0->1=[7.]" in Stepper(trace).goto(3).render()
    assert trace.log()[2] == "t=3.000us  send  device 0 -> 1  msg #0 tag 0 (1,) float64 = [7.]"


def test_merge_of_the_bug_is_flagged_at_the_message():
    trace = merge(2, _split_records(np.array([3.0]), [0.0, 1e-6, 2e-6, 3e-6, 9e-6, 10e-6, 11e-6]))
    first = check(trace, Reference.of(seeds.model, np.array([3.0]))).first
    assert first.where == "message" and first.is_also == ["x"]


def test_merge_keeps_the_groups_the_ranks_called_collectives_on():
    """The checker names a sum over a group ("2 is the number of devices in the group") from trace.groups, on
    real ranks as in a simulation."""
    records = _split_records(np.array([7.0]), [0.0, 1e-6, 2e-6, 3e-6, 9e-6, 10e-6, 11e-6])
    assert merge(2, records).groups == set()  # point to point only
    records[0].groups |= {(0, 1)}
    records[1].groups |= {(0, 1), (1,)}
    assert merge(2, records).groups == {(0, 1), (1,)}


def test_merge_keeps_an_unreceived_message_and_refuses_an_orphan_receive():
    records = _split_records(np.array([7.0]), [0, 1, 2, 3, 9, 10, 11])
    records[1].recvs.clear()
    trace = merge(2, records)
    assert trace.unreceived() == trace.messages and trace.messages[0].t_arrive is None
    records = _split_records(np.array([7.0]), [0, 1, 2, 3, 9, 10, 11])
    records[0].sends.clear()
    with pytest.raises(ValueError, match="device 0 recorded no such send"):
        merge(2, records)


def test_compare_ignores_time_but_not_values():
    sim = World(2).run(seeds.split, np.array([3.0]))

    class Run:
        def __init__(self, payload, out):
            self.trace = merge(2, _split_records(payload, [0, 1, 2, 3, 9, 10, 11]))
            self.outputs = [None, out]

    same = compare(sim, Run(np.array([7.0]), np.array([49.0])), exact=True)
    assert same.ok and str(same) == "same run: 1 message and 3 ops/values match, outputs equal"
    diff = compare(sim, Run(np.array([7.0 + 1e-12]), np.array([49.0])), exact=True)
    assert [d.split(":")[0] for d in diff.differences] == ["channel 0->1 tag 0, message 0", "device 1"]
    assert diff.differences[1].startswith("device 1: op B = [49.] simulated, [49.] measured")  # B squared it
    assert compare(sim, Run(np.array([7.0 + 1e-12]), np.array([49.0]))).ok  # allclose
    assert "device 1: returned [49.] simulated, [50.] measured" in str(
        compare(sim, Run(np.array([7.0]), np.array([50.0])))
    )


def test_buffer_pool_reuses_only_buffers_nobody_holds():
    from simulator.real.pool import MIN_BYTES, BufferPool

    def address(a):
        return a.__array_interface__["data"][0]

    pool = BufferPool(capacity=3)
    n = MIN_BYTES // 8
    a = pool.take((n,), np.float64)
    first = address(a)
    b = pool.take((n,), np.float64)
    assert address(b) != first  # a is still held
    view = a[::2]
    del a
    assert address(pool.take((n,), np.float64)) != first  # a view still holds a's memory
    del view
    c = pool.take((2, n // 2), np.float64)  # same size, another shape: reused
    assert address(c) == first and c.shape == (2, n // 2)
    assert len(pool) == 3  # a's memory, b, and the one made while a was held
    small = pool.take((3,), np.float64)
    assert small.nbytes < MIN_BYTES and len(pool) == 3  # small arrays are not pooled
