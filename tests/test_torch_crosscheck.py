"""Cross-checks with PyTorch's own implementations, on real gloo processes."""

import re

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

from simulator.backends import crosscheck  # noqa: E402
from simulator.backends.errors import RemoteRankError  # noqa: E402
from simulator.backends.launch import TorchWorld  # noqa: E402
from simulator.examples import get  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.gloo]


@pytest.fixture(scope="module")
def world():
    with TorchWorld(2, "gloo", timeout=30) as w:
        yield w


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


def torch_chunks(n, p):
    c = -(-n // p)
    return [(min(i * c, n), min((i + 1) * c, n)) for i in range(p)]


def test_dtensor_shards_follow_the_chunk_rule(world):
    w = np.arange(35.0).reshape(5, 7)  # 5 rows over 2 ranks: 3 and 2; 7 columns: 4 and 3
    rows = world.run(crosscheck.dtensor_shards, w, "S(0)").outputs
    cols = world.run(crosscheck.dtensor_shards, w, "S(1)").outputs
    reps = world.run(crosscheck.dtensor_shards, w, "R").outputs
    for r, ((r0, r1), (c0, c1)) in enumerate(zip(torch_chunks(5, 2), torch_chunks(7, 2))):
        np.testing.assert_array_equal(rows[r], w[r0:r1])
        np.testing.assert_array_equal(cols[r], w[:, c0:c1])
        np.testing.assert_array_equal(reps[r], w)


def test_colwise_and_rowwise_parallel_linear(world):
    x = np.arange(8.0).reshape(2, 4)
    a = np.arange(24.0).reshape(4, 6) / 7
    col = world.run(crosscheck.tensor_parallel_linear, x, a, "column").outputs
    row = world.run(crosscheck.tensor_parallel_linear, x, a, "row").outputs
    for r, ((c0, c1), (k0, k1)) in enumerate(zip(torch_chunks(6, 2), torch_chunks(4, 2))):
        np.testing.assert_array_equal(col[r]["a_shard"], a[:, c0:c1])  # column split: A's columns
        np.testing.assert_allclose(col[r]["y"], x @ a[:, c0:c1])  # Y's columns, no communication
        np.testing.assert_array_equal(row[r]["a_shard"], a[k0:k1])  # row split: A's rows
        np.testing.assert_allclose(row[r]["y"], x @ a)  # partial sums all-reduced by PyTorch
