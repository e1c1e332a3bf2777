"""Cross-checks with PyTorch's own implementations, on real gloo processes."""

import re

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

from simulator import World  # noqa: E402
from simulator.parallel import tensor  # noqa: E402
from simulator.real import crosscheck  # noqa: E402
from simulator.real.errors import RemoteRankError  # noqa: E402
from simulator.teach.examples import get  # noqa: E402
from simulator.tensors.mesh import DeviceMesh  # noqa: E402
from simulator.tensors.placements import R, S  # noqa: E402
from simulator.tensors.sharded import ShardedArray  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.gloo]


@pytest.fixture(scope="module")
def world(gloo_worlds):
    return gloo_worlds(2, timeout=30)


def test_pytorch_pipelining_gives_the_seed_answers(world):
    assert world.run(crosscheck.world_rank).outputs == [0, 1]
    assert world.run(crosscheck.pipelined_two_stage, [3.0]).outputs[1].tolist() == [49.0]
    assert world.run(crosscheck.pipelined_two_stage, [3.0, 4.0], 2).outputs[1].tolist() == [49.0, 81.0]
    # and so does the simulator's split scenario
    assert get("split").run().result.outputs[1].tolist() == [49.0]


def test_the_broken_contract_is_pytorchs_error_beside_the_simulators(world):
    sim = get("wrong-shape").run().error
    with pytest.raises(RemoteRankError) as info:
        world.run(crosscheck.pipelined_two_stage, [3.0], broken=True)
    err = info.value
    assert err.exc_type == "PipeliningMetadataError"
    # PyTorch validates on both sides: stage 0 its outputs, stage 1 the metadata it is sent
    assert re.match(
        r"Stage [01] \w+\[0\]: shape mismatch: torch.Size\(\[1\]\) vs torch.Size\(\[1, 1\]\)", err.remote_message
    )
    assert "dtype mismatch: torch.float64 vs torch.float32" in err.remote_message
    assert "device 1 declared (1,) float64, device 0 sent (1, 1) float32" in str(sim)


def test_dtensor_shards_equal_the_simulators_placements(world):
    w = np.arange(35.0).reshape(5, 7)  # 5 rows over 2 ranks: 3 and 2; 7 columns: 4 and 3
    mesh = DeviceMesh([0, 1])
    for text, placement in (("S(0)", S(0)), ("S(1)", S(1)), ("R", R)):
        torch_pieces = world.run(crosscheck.dtensor_shards, w, text).outputs
        ours = ShardedArray.distribute(w, mesh, [placement])
        for r in (0, 1):
            np.testing.assert_array_equal(torch_pieces[r], ours.local(r), err_msg=f"{text} on rank {r}")
    assert [p.shape for p in torch_pieces] == [(5, 7), (5, 7)]


def test_colwise_and_rowwise_parallel_equal_the_simulators_column_and_row_splits(world):
    x = np.arange(8.0).reshape(2, 4)
    a = np.arange(24.0).reshape(4, 6) / 7
    mesh = DeviceMesh([0, 1])
    col = world.run(crosscheck.tensor_parallel_linear, x, a, "column").outputs
    row = world.run(crosscheck.tensor_parallel_linear, x, a, "row").outputs
    sim_col = World(2).run(tensor.column_parallel_program, x, a, False).outputs  # each device's columns of Y
    sim_row = World(2).run(tensor.row_parallel_program, x, a).outputs  # Y, all-reduced
    for r in (0, 1):
        np.testing.assert_array_equal(col[r]["a_shard"], ShardedArray.distribute(a, mesh, [S(1)]).local(r))
        np.testing.assert_array_equal(row[r]["a_shard"], ShardedArray.distribute(a, mesh, [S(0)]).local(r))
        np.testing.assert_allclose(col[r]["y"], sim_col[r], rtol=1e-12)
        np.testing.assert_allclose(row[r]["y"], sim_row[r], rtol=1e-12)
    np.testing.assert_allclose(np.concatenate([c["y"] for c in col], axis=1), x @ a, rtol=1e-12)
