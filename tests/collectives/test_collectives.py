"""Collectives as point-to-point messages: every algorithm, group sizes 1 to 8, against NumPy."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import DeadlockError, RankError, World
from simulator.collectives import ALGORITHMS, TAG_BASE, ulp_distance
from simulator.core.errors import CollectiveMismatchError
from simulator.tensors.mesh import DeviceMesh
from simulator.tensors.placements import chunk_bounds

POW2 = {1, 2, 4, 8}


def supported(kind, algorithm, p):
    return not (algorithm == "halving_doubling" and kind != "all_reduce" and p not in POW2)


def run_on(group, world, program, *args):
    """Run program on the members of ``group``; the others idle. Returns the members' outputs by rank."""

    def prog(dev, *a):
        return program(dev, *a) if dev.rank in group else None

    result = World(world).run(prog, *args)
    return result, {r: result.outputs[r] for r in group}


@st.composite
def group_and_data(draw, equal_shapes=True):
    p = draw(st.integers(1, 8))
    world = draw(st.integers(p, 8))
    group = tuple(draw(st.permutations(range(world)))[:p])
    n = draw(st.integers(0, 12))
    cols = draw(st.integers(1, 3))
    data = np.array(draw(st.lists(st.integers(-50, 50), min_size=p * n * cols, max_size=p * n * cols)), float)
    return group, world, data.reshape(p, n, cols)


COLLECTIVE_SETTINGS = settings(max_examples=25, deadline=None)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS["all_reduce"]))
@pytest.mark.parametrize("op", ["sum", "avg", "max", "min"])
@COLLECTIVE_SETTINGS
@given(case=group_and_data())
def test_all_reduce(algorithm, op, case):
    group, world, data = case
    _, out = run_on(group, world, lambda dev: dev.all_reduce(data[group.index(dev.rank)], op, group, algorithm))
    expected = {"sum": data.sum(0), "avg": data.sum(0) / len(group), "max": data.max(0), "min": data.min(0)}[op]
    for got in out.values():
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS["reduce_scatter"]))
@COLLECTIVE_SETTINGS
@given(case=group_and_data())
def test_reduce_scatter(algorithm, case):
    group, world, data = case
    p = len(group)
    if not supported("reduce_scatter", algorithm, p):
        return
    _, out = run_on(group, world, lambda dev: dev.reduce_scatter(data[group.index(dev.rank)], "sum", group, algorithm))
    b = chunk_bounds(data.shape[1], p)
    for m, r in enumerate(group):
        np.testing.assert_array_equal(out[r], data.sum(0)[b[m] : b[m + 1]])


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS["all_gather"]))
@COLLECTIVE_SETTINGS
@given(case=group_and_data())
def test_all_gather(algorithm, case):
    group, world, data = case
    if not supported("all_gather", algorithm, len(group)):
        return
    _, out = run_on(group, world, lambda dev: dev.all_gather(data[group.index(dev.rank)], group, algorithm))
    for got in out.values():
        assert len(got) == len(group)
        for m in range(len(group)):
            np.testing.assert_array_equal(got[m], data[m])


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS["broadcast"]))
@COLLECTIVE_SETTINGS
@given(case=group_and_data(), root=st.integers(0, 7))
def test_broadcast(algorithm, case, root):
    group, world, data = case
    src = group[root % len(group)]
    _, out = run_on(
        group, world, lambda dev: dev.broadcast(data[0] if dev.rank == src else None, src, group, algorithm)
    )
    for got in out.values():
        np.testing.assert_array_equal(got, data[0])


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS["reduce"]))
@COLLECTIVE_SETTINGS
@given(case=group_and_data(), root=st.integers(0, 7))
def test_reduce(algorithm, case, root):
    group, world, data = case
    dst = group[root % len(group)]
    _, out = run_on(group, world, lambda dev: dev.reduce(data[group.index(dev.rank)], dst, "sum", group, algorithm))
    np.testing.assert_array_equal(out[dst], data.sum(0))
    assert all(v is None for r, v in out.items() if r != dst)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS["scatter"]))
@COLLECTIVE_SETTINGS
@given(case=group_and_data(), root=st.integers(0, 7))
def test_scatter(algorithm, case, root):
    group, world, data = case
    src = group[root % len(group)]
    _, out = run_on(
        group, world, lambda dev: dev.scatter(list(data) if dev.rank == src else None, src, group, algorithm)
    )
    for m, r in enumerate(group):
        np.testing.assert_array_equal(out[r], data[m])


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS["gather"]))
@COLLECTIVE_SETTINGS
@given(case=group_and_data(), root=st.integers(0, 7))
def test_gather(algorithm, case, root):
    group, world, data = case
    dst = group[root % len(group)]
    _, out = run_on(group, world, lambda dev: dev.gather(data[group.index(dev.rank)], dst, group, algorithm))
    np.testing.assert_array_equal(np.array(out[dst]), data)
    assert all(v is None for r, v in out.items() if r != dst)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS["all_to_all"]))
@COLLECTIVE_SETTINGS
@given(case=group_and_data())
def test_all_to_all(algorithm, case):
    group, world, data = case
    p = len(group)

    def prog(dev):
        me = group.index(dev.rank)
        return dev.all_to_all([data[me] * 100 + j for j in range(p)], group, algorithm)

    _, out = run_on(group, world, prog)
    for j, r in enumerate(group):
        for m in range(p):
            np.testing.assert_array_equal(out[r][m], data[m] * 100 + j)


@pytest.mark.parametrize("p", range(1, 9))
def test_barrier_holds_everyone_until_the_last_arrives(p):
    def prog(dev):
        dev.compute("late", lambda: 0, seconds=1e-3 * dev.rank)
        dev.barrier()
        return dev.clock

    result = World(p).run(prog)
    assert all(t >= 1e-3 * (p - 1) for t in result.outputs)


def test_uneven_all_gather_with_declared_shapes_and_the_error_without():
    pieces = [np.arange(3.0), np.arange(2.0), np.arange(0.0)]
    shapes = [(3,), (2,), (0,)]
    result = World(3).run(lambda dev: dev.all_gather(pieces[dev.rank], shapes=shapes, axis=0))
    for got in result.outputs:
        np.testing.assert_array_equal(got, np.concatenate(pieces))
    with pytest.raises(CollectiveMismatchError, match=r"device 0 calls all_gather\(shapes=\[\(3,\), \(3,\), \(3,\)\]"):
        World(3).run(lambda dev: dev.all_gather(pieces[dev.rank]))


def test_concurrent_collectives_on_the_rows_and_columns_of_a_mesh():
    """Row groups and column groups run at once; their tags keep their messages apart."""
    mesh = DeviceMesh.grid((2, 4))

    def prog(dev):
        x = np.array([float(dev.rank)])
        rows = dev.all_reduce(x, group=mesh.group(1, dev.rank))
        cols = dev.all_reduce(x * 10, group=mesh.group(0, dev.rank), algorithm="direct")
        return rows[0], cols[0]

    result = World(8).run(prog)
    for r in range(8):
        row, col = mesh.group(1, r), mesh.group(0, r)
        assert result.outputs[r] == (sum(row), 10 * sum(col))
    assert all(m.tag >= TAG_BASE for m in result.trace.messages)
    assert len({m.tag for m in result.trace.messages}) == 6  # one per group: 2 rows and 4 columns


def test_messages_are_labelled_with_collective_step_and_chunk():
    result = World(4).run(lambda dev: dev.all_reduce(np.arange(8.0)))
    labels = [m.label for m in result.trace.messages if m.src == 0]
    assert labels == [
        f"all_reduce#0 ring step {s} chunk {c}" for s, c in [(0, 3), (1, 2), (2, 1), (3, 0), (4, 3), (5, 2)]
    ]
    assert len(result.trace.messages) == 2 * 3 * 4
    reductions = [op for op in result.trace.ops if op.name == "all_reduce.sum"]
    assert len(reductions) == 3 * 4  # reductions are compute ops


def test_errors_name_the_problem():
    with pytest.raises(RankError, match="choose one of"):
        World(2).run(lambda dev: dev.all_reduce(np.ones(2), algorithm="butterfly"))
    with pytest.raises(RankError, match="power of two"):
        World(3).run(lambda dev: dev.all_gather(np.ones(2), algorithm="halving_doubling"))
    with pytest.raises(RankError, match="not part of"):
        World(3).run(lambda dev: dev.all_reduce(np.ones(2), group=(0, 1)))
    with pytest.raises(RankError, match="same shape|one shape"):
        World(2).run(lambda dev: dev.scatter([np.ones(2), np.ones(3)] if dev.rank == 0 else None, 0, algorithm="tree"))
    with pytest.raises(DeadlockError):  # one member never joins: a clear deadlock, not a hang
        World(3).run(lambda dev: dev.all_reduce(np.ones(3)) if dev.rank != 2 else None)


def test_rendezvous_mode_runs_every_algorithm():
    for algorithm in ALGORITHMS["all_reduce"]:
        result = World(5, send_mode="rendezvous").run(
            lambda dev, a=algorithm: dev.all_reduce(np.arange(7.0), algorithm=a)
        )
        for got in result.outputs:
            np.testing.assert_array_equal(got, 5 * np.arange(7.0))


# ---- summation order and ulps ----------------------------------------------------------------


def ring_order_sum(data):
    """The ring's documented order: chunk c is summed starting at member c+1, around the ring."""
    p = len(data)
    flat = data.reshape(p, -1)
    b = chunk_bounds(flat.shape[1], p)
    out = np.empty_like(flat[0])
    for c in range(p):
        acc = flat[(c + 1) % p, b[c] : b[c + 1]]
        for k in range(2, p + 1):
            acc = acc + flat[(c + k) % p, b[c] : b[c + 1]]
        out[b[c] : b[c + 1]] = acc
    return out.reshape(data.shape[1:])


def member_order_sum(data):
    acc = data[0]
    for x in data[1:]:
        acc = acc + x
    return acc


@pytest.mark.parametrize("p", range(2, 9))
def test_float32_sums_follow_the_documented_order_and_differ_by_few_ulps(p):
    rng = np.random.default_rng(p)
    data = rng.random((p, 1000), dtype=np.float32)  # positive: every order's error stays below (p-1) ulps
    out = {
        a: World(p).run(lambda dev, a=a: dev.all_reduce(data[dev.rank], algorithm=a)).outputs[0]
        for a in ALGORITHMS["all_reduce"]
    }
    np.testing.assert_array_equal(out["ring"], ring_order_sum(data))  # bit for bit
    np.testing.assert_array_equal(out["direct"], member_order_sum(data))
    np.testing.assert_array_equal(out["direct"], data.sum(axis=0))  # NumPy also adds member by member here
    exact = data.astype(np.float64).sum(axis=0).astype(np.float32)
    for a, got in out.items():
        worst = int(ulp_distance(got, exact).max())
        assert worst <= p - 1, f"{a} is {worst} ulps from the correctly rounded sum"


def test_ulp_distance():
    one = np.float32(1.0)
    assert ulp_distance(np.array([one]), np.array([np.nextafter(one, np.float32(2))]))[0] == 1
    assert ulp_distance(np.array([-0.0]), np.array([0.0]))[0] == 0  # the two zeros count as one value
    assert ulp_distance(np.array([np.float64(-1e-300)]), np.array([np.float64(1e-300)]))[0] > 0


@pytest.mark.parametrize("book", [True, False])
@pytest.mark.parametrize(
    "call",
    [
        lambda dev, x: dev.all_reduce(x),
        lambda dev, x: dev.reduce(x, dst=0),
        lambda dev, x: dev.reduce_scatter(x),
        lambda dev, x: dev.all_gather(x),
    ],
    ids=["all_reduce", "reduce", "reduce_scatter", "all_gather"],
)
def test_a_member_giving_a_metaarray_where_the_others_give_numbers_is_named(call, book):
    """Shapes from one member and numbers from the others would come back as shapes, the numbers lost: refused,
    booked or message by message, naming the member that gave shapes only."""
    from simulator.cost.meta import MetaArray

    def program(dev):
        x = MetaArray((8,), np.float32) if dev.rank == 2 else np.ones(8, np.float32)
        return call(dev, x)

    with pytest.raises(CollectiveMismatchError, match=r"device 2 calls \w+\(.*values='shapes only \(a MetaArray\)'"):
        World(4, book_collectives=book).run(program)
    same = World(4, book_collectives=book).run(lambda dev: call(dev, MetaArray((8,), np.float32)))
    values = [w for v in same.outputs for w in (v if isinstance(v, list) else [v])]  # (all_gather: a list of pieces)
    assert all(isinstance(v, MetaArray) or v is None for v in values)  # every member shapes only: agreed
