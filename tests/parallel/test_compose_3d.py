"""Data, pipeline and tensor parallelism on a 2 x 2 x 2 mesh: one step, every gradient equal to one device's."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.checker import check
from simulator.collectives import TAG_BASE
from simulator.parallel.compose import Parallel3D, pair_partition
from simulator.parallel.data import DP_TAG
from simulator.parallel.mlp import MLP
from simulator.parallel.tensor_layers import tp_index
from simulator.tensors.mesh import DeviceMesh

MESH = DeviceMesh.grid((2, 2, 2), ("dp", "pp", "tp"))
MLP4 = MLP((3, 8, 4, 8, 2))
PARAMS = MLP4.init(seed=5)
X, T = MLP4.data(8, seed=6)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "zb-h1"])
def test_one_3d_step_equals_one_device(schedule):
    job = Parallel3D(MLP4, MESH, schedule, microbatches=2)
    result = job.run(PARAMS, X, T)
    report = check(result, job.reference(PARAMS, X, T))
    assert report.ok, str(report)
    assert not report.unknown
    whole = MLP4.gradients(PARAMS, X, T)
    for rank, grads in enumerate(result.outputs):
        _, stage, j = MESH.coordinate(rank)
        first, last = pair_partition(4, 2)[stage]
        expect = {f"{p}{k}" for k in range(first, last + 1) for p in ("dW", "db")}
        assert {k for k in grads if not k.startswith("loss")} == expect
        for name in expect:
            index = tp_index(MLP4, 2, j, name[1:])
            part = whole[name] if index is None else whole[name][index]
            np.testing.assert_allclose(grads[name], part, rtol=1e-12, atol=1e-15)


def test_each_kind_of_message_stays_on_its_mesh_dimension():
    result = Parallel3D(MLP4, MESH, "1f1b", microbatches=2).run(PARAMS, X, T)
    seen = set()
    for m in result.trace.messages:
        a, b = MESH.coordinate(m.src), MESH.coordinate(m.dst)
        differ = [d for d, (u, v) in enumerate(zip(a, b)) if u != v]
        assert len(differ) == 1, m
        kind = "tp" if m.tag >= TAG_BASE else "dp" if m.tag >= DP_TAG else "pp"
        assert ("dp", "pp", "tp")[differ[0]] == kind
        seen.add(kind)
    assert seen == {"dp", "pp", "tp"}


def test_layers_must_pair_up_per_stage():
    with pytest.raises(ValueError, match="whole layer pairs per stage"):
        Parallel3D(MLP((3, 4, 4, 2)), MESH)
    with pytest.raises(ValueError, match="dim_names"):
        Parallel3D(MLP4, DeviceMesh.grid((2, 2, 2)))


def test_the_bubble_formula_holds_with_tensor_parallel_stages():
    from simulator.parallel.measure import bubble
    from simulator.parallel.pipeline import FREE_LINKS, ActionCosts

    mesh = DeviceMesh.grid((1, 2, 2), ("dp", "pp", "tp"))
    for m in (1, 2, 4, 8):
        job = Parallel3D(MLP4, mesh, "gpipe", microbatches=m, costs=ActionCosts.equal(1.0, 1.0))
        result = job.run(PARAMS, X, T, cost=FREE_LINKS)
        assert check(result, job.reference(PARAMS, X, T)).ok
        # the tensor all-reduces add only their reductions' FLOPs (1e-14 s): the step is (m + p - 1)(F + B)
        assert result.time == pytest.approx(2 * (m + 1), rel=1e-9)
        assert bubble(result.trace).fraction == pytest.approx([1 / (m + 1)] * 4, rel=1e-9)


def test_each_parameter_says_whose_part_it_is_by_world_rank():
    # device 7 is the second of its tensor-parallel pair (6, 7): its docs name device 7, not "device 1", and
    # a row layer's bias, whole on both devices of the pair, is not called a part
    result = Parallel3D(MLP4, MESH, "1f1b", microbatches=2).run(PARAMS, X, T)
    docs = {rec.name: rec.doc for kind, rec in result.trace.events if kind == "hold" and rec.rank == 7}
    assert docs["W3"] == "device 7's part of W3"
    assert docs["W4"] == "device 7's part of W4"
    assert docs["b4"] == "all of b4, held whole by devices 6, 7"
