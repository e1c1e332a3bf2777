"""Device mesh, placements, the splitting rule, and sharded arrays moved only by messages."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import World
from simulator.tensors.mesh import DeviceMesh
from simulator.tensors.placements import P, Partial, R, Replicate, S, Shard, chunk_bounds, chunk_sizes
from simulator.tensors.redistribute import assemble, distribute, redistribute
from simulator.tensors.sharded import Layout, ShardedArray

# ---- mesh ------------------------------------------------------------------------------------


def test_mesh_groups_along_each_dimension():
    mesh = DeviceMesh(np.arange(8).reshape(2, 2, 2), ("dp", "pp", "tp"))
    assert mesh.shape == (2, 2, 2) and mesh.size() == 8 and mesh.size("tp") == 2
    assert mesh.coordinate(5) == (1, 0, 1)
    assert mesh.group("tp", 5) == (4, 5)
    assert mesh.group("pp", 5) == (5, 7)
    assert mesh.group("dp", 5) == (1, 5)
    assert mesh.get_group(0, 5) == mesh.group("dp", 5)
    assert mesh.groups("tp") == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert mesh.groups("dp") == [(0, 4), (1, 5), (2, 6), (3, 7)]
    assert mesh.rank_at((1, 1, 0)) == 6


def test_mesh_of_any_ranks_and_its_errors():
    mesh = DeviceMesh([[3, 1], [0, 2]])
    assert mesh.group(0, 1) == (1, 2) and mesh.group(1, 2) == (0, 2)
    assert DeviceMesh.grid((2, 3)) == DeviceMesh(np.arange(6).reshape(2, 3))
    with pytest.raises(ValueError, match="distinct"):
        DeviceMesh([0, 0])
    with pytest.raises(KeyError, match="no dimension named 'tp'"):
        DeviceMesh.grid(4, ("dp",)).group("tp", 0)
    with pytest.raises(ValueError, match="rank 9 is not in this mesh"):
        mesh.coordinate(9)


# ---- placements and the splitting rule -------------------------------------------------------


def test_short_forms():
    assert S(1) == Shard(1) and Replicate() == R and Partial("sum") == P
    assert repr(S(0)) == "S(0)" and repr(R) == "R" and repr(P) == "P" and repr(Partial("max")) == "P(max)"
    with pytest.raises(ValueError, match="choose one of"):
        Partial("mean")


@pytest.mark.parametrize(
    "n, p, sizes",
    [(8, 4, [2, 2, 2, 2]), (5, 4, [2, 2, 1, 0]), (7, 3, [3, 3, 1]), (2, 4, [1, 1, 0, 0]), (0, 3, [0, 0, 0])],
)
def test_uneven_sizes_follow_torch_chunk(n, p, sizes):
    assert chunk_sizes(n, p) == sizes
    torch = pytest.importorskip("torch")
    got = [len(c) for c in torch.chunk(torch.arange(n), p)] if n else []
    assert got == [s for s in sizes if s][: len(got)]  # torch.chunk drops the empty trailing chunks


@given(st.integers(0, 50), st.integers(1, 9))
def test_chunk_bounds_cover_everything_in_order(n, p):
    b = chunk_bounds(n, p)
    assert b[0] == 0 and b[-1] == n and all(x <= y for x, y in zip(b, b[1:]))
    c = -(-n // p)
    assert all(size == c for size in chunk_sizes(n, p)[: n // c if c else 0])


def test_layout_regions_and_uneven_pieces():
    mesh = DeviceMesh.grid((2, 2))
    lay = Layout((5, 3), mesh, (S(0), S(1)))
    assert lay.region(0) == (slice(0, 3), slice(0, 2))
    assert lay.region(3) == (slice(3, 5), slice(2, 3))
    nested = Layout((5,), mesh, (S(0), S(0)))  # 5 -> 3 + 2, then 3 -> 2 + 1 and 2 -> 1 + 1
    assert [nested.local_shape(r) for r in range(4)] == [(2,), (1,), (1,), (1,)]
    with pytest.raises(ValueError, match="needs 2 placements"):
        Layout((4,), mesh, (S(0),))
    with pytest.raises(ValueError, match="no dimension 2"):
        Layout((4, 4), mesh, (S(2), R))
    with pytest.raises(ValueError, match="mix partial reductions"):
        Layout((4,), mesh, (P, Partial("max")))


def test_sharded_array_local_pieces_and_partial():
    x = np.arange(12.0).reshape(4, 3)
    mesh = DeviceMesh.grid(2)
    col = ShardedArray.distribute(x, mesh, [S(1)])
    assert col.local(0).shape == (4, 2) and col.local(1).shape == (4, 1)
    np.testing.assert_array_equal(col.full(), x)
    part = ShardedArray.distribute(x, mesh, [P])
    np.testing.assert_array_equal(part.local(0), x)
    np.testing.assert_array_equal(part.local(1), np.zeros_like(x))
    np.testing.assert_array_equal(part.full(), x)
    pieces = ShardedArray.from_pieces(part.layout, [x - 1, np.ones_like(x)])
    np.testing.assert_array_equal(pieces.full(), x)
    with pytest.raises(ValueError, match="device 1's piece has shape"):
        ShardedArray.from_pieces(col.layout, [col.local(0), col.local(0)])


# ---- moving sharded data, all as messages ----------------------------------------------------

MESHES = [(1,), (2,), (3,), (4,), (2, 2), (2, 3), (3, 2), (1, 4), (2, 2, 2), (4, 2)]


def placements_for(ndim_mesh, ndim_array, op):
    one = st.one_of(st.just(R), st.just(Partial(op)), st.integers(0, max(ndim_array - 1, 0)).map(Shard))
    if ndim_array == 0:
        one = st.one_of(st.just(R), st.just(Partial(op)))
    return st.lists(one, min_size=ndim_mesh, max_size=ndim_mesh)


@st.composite
def cases(draw):
    mshape = draw(st.sampled_from(MESHES))
    shape = tuple(draw(st.lists(st.integers(0, 7), min_size=1, max_size=3)))
    op = draw(st.sampled_from(["sum", "avg", "max", "min"]))
    src = draw(placements_for(len(mshape), len(shape), op))
    dst = draw(placements_for(len(mshape), len(shape), op))
    return mshape, shape, src, dst, op


def round_trip(dev, x, lay, placements, holder):
    piece = distribute(dev, x if dev.rank == holder else None, lay, src=holder, dtype=x.dtype)
    moved = redistribute(dev, piece, lay, placements)
    return piece, moved, assemble(dev, moved, lay.with_placements(placements), dst=holder)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.integers(0, 7))
def test_distribute_redistribute_assemble_round_trip(case, holder):
    mshape, shape, src, dst, op = case
    mesh = DeviceMesh.grid(mshape)
    holder %= mesh.size()
    dtype = np.int64 if op in ("sum", "max", "min") else np.float64  # integers too: sums stay exact, dtypes kept
    x = np.arange(1, 1 + int(np.prod(shape)), dtype=dtype).reshape(shape)
    lay = Layout(shape, mesh, tuple(src))
    result = World(mesh.size()).run(round_trip, x, lay, dst, holder)
    target = lay.with_placements(dst)
    for r in range(mesh.size()):
        piece, moved, whole = result.outputs[r]
        np.testing.assert_array_equal(piece, lay.piece(x, r))  # distribute gives each device its piece
        if not target.is_partial():
            np.testing.assert_array_equal(moved, target.piece(x, r))
        assert moved.shape == target.local_shape(r)
        if r != holder:
            assert whole is None
    whole = result.outputs[holder][2]
    np.testing.assert_array_equal(whole, x)  # ... and the whole comes back intact
    assert whole.dtype == x.dtype
    # the pieces left the holder as messages: one to each other device that carries a value
    sent = [m for m in result.trace.messages if (m.label or "").startswith("distribute")]
    carriers = [r for r in range(mesh.size()) if r != holder and (lay.partial_op != "sum" or lay.holds_value(r))]
    assert sorted(m.dst for m in sent) == carriers and all(m.src == holder for m in sent)


def labels(trace):
    return {m.label.split("#")[0] for m in trace.messages if m.label and "#" in m.label}


def move(dev, x, lay, placements):
    piece = lay.piece(x, dev.rank)
    return redistribute(dev, piece, lay, placements)


@pytest.mark.parametrize(
    "src, dst, kinds",
    [
        ([S(0)], [R], {"all_gather"}),
        ([P], [R], {"all_reduce"}),
        ([P], [S(1)], {"reduce_scatter"}),
        ([S(0)], [S(1)], {"all_to_all"}),
        ([R], [S(0)], set()),
        ([R], [P], set()),
    ],
)
def test_each_redistribution_is_its_collective(src, dst, kinds):
    x = np.arange(48.0).reshape(8, 6)
    lay = Layout(x.shape, DeviceMesh.grid(4), tuple(src))
    result = World(4).run(move, x, lay, dst)
    assert labels(result.trace) == kinds
    if not kinds:
        assert result.trace.messages == []  # a local slice: no message at all
    np.testing.assert_array_equal(lay.with_placements(dst).assemble(result.outputs), x)


def test_nested_shards_on_a_2d_mesh():
    x = np.arange(70.0).reshape(7, 10)
    mesh = DeviceMesh.grid((2, 3))
    lay = Layout(x.shape, mesh, (S(0), S(0)))
    result = World(6).run(move, x, lay, [R, S(0)])
    target = lay.with_placements([R, S(0)])
    for r in range(6):
        np.testing.assert_array_equal(result.outputs[r], target.piece(x, r))


def test_distribute_needs_the_right_shape():
    lay = Layout((4,), DeviceMesh.grid(2), (S(0),))

    def prog(dev):
        return distribute(dev, np.zeros(5) if dev.rank == 0 else None, lay)

    with pytest.raises(Exception, match=r"shape \(4,\), got one of shape \(5,\)"):
        World(2).run(prog)


def test_partial_distribute_needs_the_dtype_where_no_message_arrives():
    lay = Layout((4,), DeviceMesh.grid(2), (P,))

    def prog(dev):
        return distribute(dev, np.arange(4) if dev.rank == 0 else None, lay)

    with pytest.raises(Exception, match=r"pass distribute\(\.\.\., dtype=\.\.\.\)"):
        World(2).run(prog)
