"""Seeing shards and communication: the text table, the picture, and the communication summary."""

import numpy as np
import pytest

from simulator import World
from simulator.checker.comm_summary import comm_summary
from simulator.parallel import tensor as tp
from simulator.tensors.mesh import DeviceMesh
from simulator.tensors.placements import P, R, S
from simulator.tensors.sharded import Layout, ShardedArray
from simulator.views.plot.sharding import plot_sharding
from simulator.views.sharding_table import device_listing, sharding_table


def test_table_of_a_2d_mesh():
    lay = Layout((4, 6), DeviceMesh.grid((2, 2)), (S(0), S(1)))
    assert sharding_table(lay).splitlines()[1:] == [
        "          cols 0:3  cols 3:6",
        "rows 0:2  0         1",
        "rows 2:4  2         3",
    ]


def test_table_tells_replicas_from_partial_values():
    mesh = DeviceMesh.grid((2, 2))
    replicated = sharding_table(Layout((4, 6), mesh, (R, S(1))))
    partial = sharding_table(Layout((4, 6), mesh, (S(0), P)))
    assert "rows 0:4  0, 2      1, 3" in replicated
    assert "rows 0:2  0+1 (sum)" in partial and "rows 2:4  2+3 (sum)" in partial
    assert "partial sum, reduction pending" in device_listing(Layout((4, 6), mesh, (S(0), P)))


def test_table_of_an_uneven_1d_split_names_the_empty_piece():
    text = sharding_table(Layout((5,), DeviceMesh.grid(4), (S(0),)))
    assert "4:5  2" in text and "empty piece (uneven split): devices 3" in text


def test_picture_hatches_partial_values_and_not_replicas():
    x = np.arange(24.0).reshape(4, 6)
    mesh = DeviceMesh.grid(2)

    def hatched(fig):
        return [p for ax in fig.axes for p in ax.patches if p.get_hatch()]

    rep = plot_sharding(ShardedArray.distribute(x, mesh, [R]))
    part = plot_sharding(ShardedArray.distribute(x, mesh, [P]))
    assert hatched(rep) == [] and len(hatched(part)) >= 2
    titles = [ax.get_title() for ax in part.axes]
    assert "device 1: partial, reduction pending" in titles and "after the sum (pending)" in titles
    texts = [t.get_text() for t in part.axes[0].texts]
    assert texts == ["0+1 (sum)"]
    with pytest.raises(ValueError, match="1-D and 2-D"):
        plot_sharding(Layout((2, 2, 2), mesh, (R,)))


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_ring_all_reduce_bytes_per_device(p):
    n = 240 * p
    result = World(p).run(lambda dev: dev.all_reduce(np.ones(n, np.float32)))
    s = comm_summary(result.trace)
    assert s.collectives == {"all_reduce": 1}  # one all-reduce, however many devices take part
    assert all(s.calls[r] == {"all_reduce": 1} for r in range(p))
    for r in range(p):
        assert s.sent_bytes[r] == s.recv_bytes[r] == 2 * (p - 1) / p * 4 * n
        assert s.sent_messages[r] == 2 * (p - 1)


def test_summary_of_a_megatron_mlp():
    rng = np.random.default_rng(0)
    X, A, B = rng.standard_normal((2, 4)), rng.standard_normal((4, 8)), rng.standard_normal((8, 4))
    s = comm_summary(World(2).run(tp.megatron_mlp_program, X, A, B).trace)
    assert s.collectives == {"all_reduce": 1}  # one all-reduce per forward
    assert "  all_reduce              1   on 2 devices" in str(s)
    assert set(s.bytes_by_kind) == {"distribute", "all_reduce"}
    assert s.bytes_by_kind["all_reduce"] == 2 * X.nbytes  # ring: 2(p-1)/p of Z's bytes from each of 2 devices
    text = str(s)
    assert "all_reduce" in text and "sent bytes" in text
