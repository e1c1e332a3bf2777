"""Ring all-reduces booked whole with their payloads kept (the default World) make the run the messages make:
every row, every payload (bytes, dtype, shape, flags, and which objects are the same), every op, every result."""

import dataclasses

import numpy as np
import pytest

from simulator import CostModel, PerDevice, World
from simulator.checker import Reference, check
from simulator.core.errors import SimulationError
from simulator.cost.meta import MetaArray
from simulator.cost.model import TwoLevel
from simulator.teach.examples import all_scenarios
from simulator.views.stepper import Stepper


def values_of(n, rank, dtype):
    """Numbers that make every sum's rounding show (and, for integers, wrap-around)."""
    if np.dtype(dtype).kind in "iu":
        return (np.arange(n, dtype=np.int64) * 2_000_000_011 + 7 * rank).astype(dtype)
    return (np.sin(np.arange(n) * 12.9898 + rank) * 43758.5453 % 3.0 - 1.3).astype(dtype)


def staggered(dev, n, op, dtype, groups=False, in_place=False, name=None, shape=None):
    """A student's program: own names, late members, an all-reduce, then each half of the devices its own ring."""
    x = values_of(n, dev.rank, dtype)
    if shape is not None:
        x = x.reshape(shape)
    dev.compute("before", lambda v: v, x, seconds=1e-6 * (dev.rank % 3))  # members arrive at different clocks
    if in_place:
        x = x.copy()  # (compute sealed x, the op's output: a buffer of the program's own)
    y = dev.all_reduce(x, op=op, in_place=in_place, name=name)
    if groups:
        mine = [r for r in range(dev.world_size) if r % 2 == dev.rank % 2]
        y = dev.all_reduce(y.reshape(-1)[: n // 2 + 1], op=op, group=mine[::-1])  # listed in another order
    return y


def identities(trace) -> list[int]:
    """Which payloads are one object: each payload numbered by the first place its object appears (messages,
    then ops' inputs and outputs, in the trace's order). The checker tells a value's origin by it."""
    first: dict[int, int] = {}
    out = []
    values = [m.payload for m in trace.messages]
    for op in trace.ops:
        values += [*(op.inputs or ()), op.output]
    for v in values:
        out.append(first.setdefault(id(v), len(first)))
    return out


def same_array(a, b) -> None:
    assert type(a) is type(b)
    if not isinstance(a, np.ndarray):
        assert a == b
        return
    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), (a, b)
    assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")
    for flag in ("WRITEABLE", "C_CONTIGUOUS", "F_CONTIGUOUS"):
        assert a.flags[flag] == b.flags[flag], flag


def same_runs(whole, messages) -> None:
    """``whole`` (booked) and ``messages`` (message by message) are the same run, payloads and all."""
    a, b = whole.trace, messages.trace
    assert a.signature() == b.signature()
    # (the rows' raw order may differ: the trace numbers them in its canonical order, compared below)
    assert len(a.messages) == len(b.messages) and len(a.ops) == len(b.ops)
    for m, k in zip(a.messages, b.messages, strict=True):
        assert (m.src, m.dst, m.tag, m.label, m.t_send, m.t_start, m.t_arrive, m.t_recv) == (
            k.src, k.dst, k.tag, k.label, k.t_send, k.t_start, k.t_arrive, k.t_recv
        )  # fmt: skip
        assert (m.name, m.index) == (k.name, k.index)
        same_array(m.payload, k.payload)
    for o, q in zip(a.ops, b.ops, strict=True):
        assert (o.rank, o.name, o.label, o.t_start, o.t_end, o.flops, o.nbytes, o.keep, o.index) == (
            q.rank, q.name, q.label, q.t_start, q.t_end, q.flops, q.nbytes, q.keep, q.index
        )  # fmt: skip
        assert (o.inputs is None) == (q.inputs is None)
        for u, v in zip(o.inputs or (), q.inputs or (), strict=True):
            same_array(u, v)
        same_array(o.output, q.output)
    assert identities(a) == identities(b)
    assert whole.time == messages.time
    for u, v in zip(whole.outputs, messages.outputs, strict=True):
        same_array(u, v)
    results = [u for u in whole.outputs if u is not None]
    assert len({id(u) for u in results}) == len(results)  # each member its own result


def same_runs_of(whole, messages) -> None:
    """``same_runs`` for programs that return (result, names held) or None."""
    whole, messages = (
        dataclasses.replace(r, outputs=[o[0] if isinstance(o, tuple) else o for o in r.outputs])
        for r in (whole, messages)
    )
    same_runs(whole, messages)


def both(p, *args, cost=None, **kwargs):
    kw = {} if cost is None else {"cost": cost}
    return (
        World(p, **kw).run(staggered, *args, **kwargs),
        World(p, book_collectives=False, **kw).run(staggered, *args, **kwargs),
    )


SIZES = [(p, n) for p in [2, 3, 4, 5, 6, 7, 8, 9, 16] for n in (1, p, 3 * p + 2)]
DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64]


@pytest.mark.parametrize("p, n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_a_booked_ring_keeps_the_payloads_its_messages_carry(bookings, p, n, dtype):
    whole, messages = both(p, n, "sum", dtype, groups=p >= 4)
    assert bookings[0] == (3 if p >= 4 else 1)
    same_runs(whole, messages)


@pytest.mark.parametrize("n, dtype", [(64, np.float32), (201, np.float16), (1, np.int32)])
def test_sixty_four_members_in_numpy_steps(bookings, n, dtype):
    """From 32 members on the booking takes NumPy steps over all members (``book_vector``)."""
    whole, messages = both(64, n, "sum", dtype, groups=True)
    assert bookings[0] == 3
    same_runs(whole, messages)


@pytest.mark.parametrize("op", ["sum", "avg", "max", "min", "product"])
@pytest.mark.parametrize(
    "p, n, dtype", [(2, 5, np.float16), (7, 30, np.float32), (40, 83, np.float64), (5, 9, np.int32)]
)
def test_every_reduction_keeps_the_messages_floats(bookings, op, p, n, dtype):
    if op == "avg" and np.dtype(dtype).kind != "f":
        dtype = np.float64
    whole, messages = both(p, n, op, dtype, groups=True)
    assert bookings[0] == (3 if p >= 4 else 1)
    same_runs(whole, messages)


def test_half_precision_sums_round_at_every_step_as_the_messages_do(bookings):
    """float16 sums of many terms: one rounding per addition, never a wider accumulator (NumPy's float16
    reductions accumulate in float32: np.add.reduce would give other bits)."""
    whole, messages = both(64, 64 * 5, "sum", np.float16)
    same_runs(whole, messages)
    stacked = np.stack([values_of(320, r, np.float16) for r in range(64)])
    assert not np.array_equal(whole.outputs[0], np.add.reduce(stacked, axis=0))  # the check can tell them apart


def test_in_place_and_shaped_values(bookings):
    whole, messages = both(6, 24, "avg", np.float64, in_place=True, shape=(2, 3, 4))
    assert bookings[0] == 1
    same_runs(whole, messages)
    assert whole.outputs[0].shape == (2, 3, 4) and not whole.outputs[0].flags.writeable


def transposed(dev):  # a read-only view that is not contiguous: flattening it copies it
    return dev.all_reduce(dev.compute("y", np.outer, np.arange(3.0) + dev.rank, np.arange(5.0)).T)


def empty(dev):
    return dev.all_reduce(np.zeros((0, 3)))


def complex_product(dev):
    return dev.all_reduce(np.arange(7) * (1 + 2j) + dev.rank, op="product")


def boolean_max(dev):
    return dev.all_reduce(np.arange(9) % (dev.rank + 2) == 0, op="max")


def scalar(dev):
    return dev.all_reduce(np.float64(dev.rank) + 0.5)


@pytest.mark.parametrize("program", [transposed, empty, complex_product, boolean_max, scalar])
@pytest.mark.parametrize("p", [2, 5])
def test_odd_values_are_booked_as_their_messages_carry_them(bookings, program, p):
    whole, messages = World(p).run(program), World(p, book_collectives=False).run(program)
    assert bookings[0] == 1
    same_runs(whole, messages)


def test_a_named_result_is_booked_with_its_names(bookings):
    whole, messages = both(5, 13, "sum", np.float64, name="g")
    assert bookings[0] == 1
    same_runs(whole, messages)
    named = [m for m in whole.trace.messages if m.name == "g"]
    assert len(named) == 5 * 4 and all(m.index is not None for m in named)
    assert [o.name for o in whole.trace.ops].count("g") == 5

    def kept(dev):
        y = dev.all_reduce(np.arange(5.0) + dev.rank, name="g")
        return dev.memory["g"] is y

    assert World(3).run(kept).outputs == World(3, book_collectives=False).run(kept).outputs == [True] * 3


def test_the_costs_of_every_machine(bookings):
    costs = [
        CostModel(latency=0.0, flops=1e9),
        CostModel(topology=TwoLevel(4, 5e-6, 10e9)),  # rings inside a node are booked, the rest go by message
        CostModel(flops=1e9, memory_bandwidth=2e9),
    ]
    for cost in costs:
        whole, messages = both(8, 50, "avg", np.float32, groups=True, cost=cost)
        same_runs(whole, messages)
    assert bookings[0] == 3 + 0 + 3  # two-level: every ring crosses the nodes' ports


def partial_sums(dev, n, op, name, partials, p_of_group=None):
    """A row-parallel layer's output, all-reduced with its names (the tensor-parallel idiom), then what memory holds."""
    x = values_of(n, dev.rank, np.float32)
    group = None if p_of_group is None else list(range(dev.world_size))[::-1][:p_of_group]
    if group is not None and dev.rank not in group:
        return None
    y = dev.all_reduce(x, op=op, name=name, partials=partials, group=group)
    return y, sorted(dev.memory)


@pytest.mark.parametrize("p, n", [(2, 1), (3, 7), (5, 5), (8, 20), (33, 40)])
@pytest.mark.parametrize("op", ["sum", "avg", "max"])
def test_partial_sums_are_booked_with_their_names(bookings, p, n, op):
    args = (partial_sums, n, op, "Z", "Z.partial")
    whole, messages = World(p).run(*args), World(p, book_collectives=False).run(*args)
    assert bookings[0] == 1
    same_runs_of(whole, messages)
    assert [o[1] for o in whole.outputs] == [o[1] for o in messages.outputs]  # the names each device holds
    if op != "max":  # (names of partial sums mean something for sums only)
        named = {m.name for m in whole.trace.messages if m.name is not None}
        assert "Z.partial[1]" in named and any(name.count("+") == p - 2 for name in named)


def test_partial_sums_in_a_group_listed_in_its_own_order(bookings):
    args = (partial_sums, 11, "sum", "Z", "Z.partial", 5)
    whole, messages = World(7).run(*args), World(7, book_collectives=False).run(*args)
    assert bookings[0] == 1
    same_runs_of(whole, messages)


def test_other_worlds_go_message_by_message(bookings):
    World(4, keep_payloads=False).run(partial_sums, 6, "sum", "Z", "Z.partial")  # names without their values
    World(4, send_mode="rendezvous").run(staggered, 6, "sum", np.float64)
    World(4, strict=True).run(staggered, 6, "sum", np.float64)
    World(4, program_time=True).run(staggered, 6, "sum", np.float64)
    shapes_only = World(4).run(lambda dev: dev.all_reduce(MetaArray((8,), np.float32)))  # kept: no values to keep
    assert bookings[0] == 0 and len(shapes_only.trace.messages) == 24
    World(4).run(staggered, 6, "sum", np.float64)
    assert bookings[0] == 1  # (the count counts)


def test_values_a_message_cannot_carry_get_the_messages_error(bookings):
    def words(dev):
        return dev.all_reduce(np.array(["a", "b"]))

    with pytest.raises(Exception, match="carries numbers"):
        World(2).run(words)
    assert bookings[0] == 0


def test_a_read_only_view_of_writable_memory_is_copied_as_its_message_copies_it(bookings):
    def lent(dev):
        x = np.arange(8.0) * (dev.rank + 1)
        view = x.view()
        view.setflags(write=False)  # read-only, but x can still change it: a message must copy it
        return dev.all_reduce(view)

    whole = World(4).run(lent)
    messages = World(4, book_collectives=False).run(lent)
    assert bookings[0] == 1
    same_runs(whole, messages)
    errors = []
    for book in (True, False):  # the copies count against the budget both ways (4 chunks of 16 bytes)
        with pytest.raises(SimulationError, match="max_buffered_bytes") as err:
            World(4, max_buffered_bytes=40, book_collectives=book).run(lent)
        errors.append(type(err.value))
    assert errors[0] is errors[1]


def test_stepping_a_booked_run_shows_every_message_and_its_payload(bookings):
    """A live stepper shows each message as it is sent, with its payload in flight, as message by message."""

    def frames(book):
        live = World(6, book_collectives=book).start(staggered, 12, "sum", np.float64, True)
        return [(s.last_event[0], s.render(values="all"), len(s.in_flight)) for s in Stepper(live)]

    whole, messages = frames(True), frames(False)
    assert bookings[0] == 3
    assert whole == messages
    assert [kind for kind, _, _ in whole].count("send") == 2 * 6 * 5 + 2 * 2 * 3 * 2  # every message, one by one
    assert max(flying for _, _, flying in whole) > 0


def test_a_checked_run_gets_the_same_verdict_booked_or_not(bookings):
    """The checker reads the payloads, the names and which objects are the same: it says the same both ways."""
    xs = [np.arange(7.0) * (r + 1) for r in range(4)]
    ref = Reference(values={"g": sum(xs)})
    ref.result = sum(xs)

    def right(dev):
        return dev.all_reduce(xs[dev.rank], name="g")

    def wrong(dev):  # device 2 sends twice its value
        return dev.all_reduce(xs[dev.rank] * (2 if dev.rank == 2 else 1), name="g")

    for program, verdict in ((right, "passed"), (wrong, "FAILED")):
        reports = [check(World(4, book_collectives=b).run(program), ref) for b in (True, False)]
        assert reports[0].verdict == reports[1].verdict == verdict
        assert str(reports[0]) == str(reports[1])
    assert bookings[0] == 2


def test_the_scenarios_get_the_same_verdicts_booked_or_not(bookings):
    """Every scenario whose all-reduces are booked: the same report, word for word (the first divergence of the
    buggy ones included), as with every ring message by message."""
    compared = []
    for name, s in all_scenarios().items():
        before = bookings[0]
        whole = s.run()
        if bookings[0] == before:
            continue
        apart = dataclasses.replace(s, world=dataclasses.replace(s.world, book_collectives=False)).run()
        assert whole.report.verdict == apart.report.verdict, name
        assert str(whole.report) == str(apart.report), name
        assert whole.result.trace.signature() == apart.result.trace.signature(), name
        compared.append((name, s.expect))
    assert len(compared) >= 8 and {"match", "diverge"} <= {expect for _, expect in compared}


def test_the_isolation_check_says_the_same_of_a_booked_run(bookings):
    """The run is booked (its reruns with a replay go message by message): honest and smuggling programs get the
    same report both ways."""
    xs = [np.arange(6.0) * (r + 1) for r in range(4)]
    ref = Reference.of(lambda dev: dev.compute("s", lambda: sum(xs)))
    shared = {}

    def honest(dev, x):
        return dev.all_reduce(x, name="s")

    def smuggles(dev, x):  # each device leaves its input in a dict, and its left neighbour reads it there
        shared[dev.rank] = x
        y = dev.all_reduce(x, name="s")
        return dev.compute("t", np.add, y, shared[(dev.rank + 1) % dev.world_size])

    for program, verdict in ((honest, "passed"), (smuggles, "FAILED")):
        reports = [
            check(World(4, book_collectives=b).run(program, PerDevice(xs)), ref, isolation=True) for b in (True, False)
        ]
        assert reports[0].verdict == reports[1].verdict == verdict
        assert reports[0].text() == reports[1].text()
    assert bookings[0] >= 2  # (the two runs checked, at least)
