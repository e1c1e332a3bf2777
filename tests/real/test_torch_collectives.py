"""Collectives on real gloo processes: torch.distributed's native ones behind the simulator's signatures."""

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

from simulator.real.launch import TorchWorld  # noqa: E402
from tests import demos  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.gloo]


def assert_same(found, expected, where):
    if isinstance(expected, list):
        assert isinstance(found, list) and len(found) == len(expected), where
        for k, (f, e) in enumerate(zip(found, expected)):
            assert_same(f, e, f"{where}[{k}]")
    elif expected is None:
        assert found is None, where
    else:  # integer data: bit for bit
        assert found.dtype == expected.dtype and found.shape == expected.shape, where
        np.testing.assert_array_equal(found, expected, err_msg=where)


@pytest.fixture(scope="module")
def world4(gloo_worlds):
    return gloo_worlds(4, timeout=20)


def test_native_collectives_equal_numpy_on_one_device(world4):
    result = world4.run(demos.collectives_tour)
    for rank, (found, expected) in enumerate(zip(result.outputs, demos.expected_collectives_tour(4))):
        assert found.keys() == expected.keys()
        for key in expected:
            assert_same(found[key], expected[key], f"device {rank} {key}")
    # a native collective is one op per rank in the trace, with its measured duration; no messages
    assert result.trace.messages == []
    ops = [op for op in result.trace.ops if op.rank == 0]
    assert [op.name for op in ops][:4] == ["all_reduce (native)"] * 3 + ["reduce_scatter (native)"]
    assert all(0 <= op.t_start <= op.t_end for op in ops)


def test_a_named_native_collective_is_checked_like_a_simulated_one(world4):
    from simulator.checker import Reference, check

    result = world4.run(demos.named_all_reduce, np.arange(8.0))
    assert [o.tolist() for o in result.outputs] == [(np.arange(8.0) * 10).tolist()] * 4
    report = check(result.trace, Reference.of(demos.named_all_reduce_reference, np.arange(8.0), 4))
    assert report.ok and report.checked == 4 * 4  # per rank: its part's input and output, the total, the result
    assert result.trace.groups == {(0, 1, 2, 3)}  # as a simulation keeps them, for the checker's diagnoses
    wrong = check(result.trace, Reference.of(demos.named_all_reduce_reference, np.arange(8.0), 3))
    assert not wrong.ok and wrong.first.name == "total" and wrong.first.where == "output"


def test_message_by_message_collectives_equal_the_simulation_bit_for_bit():
    from simulator import World
    from simulator.real.compare_runs import compare

    sim = World(4).run(demos.collectives_tour)
    with TorchWorld(4, "gloo", timeout=20, collectives="messages") as w:
        real = w.run(demos.collectives_tour)
    diff = compare(sim, real, exact=True)
    assert diff.ok, str(diff)
    assert len(real.trace.messages) == len(sim.trace.messages) > 50
    labels = {m.label.split(" step")[0].split("#")[0] for m in real.trace.messages}
    assert {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all"} <= labels


def test_an_average_of_integers_is_refused_on_real_ranks_as_in_a_simulation(world4):
    from simulator import World

    real, sim = world4.run(demos.avg_of_integers).outputs, World(4).run(demos.avg_of_integers).outputs
    assert real == sim and "all_reduce(op='avg') needs floating-point values" in real[0]


def test_a_large_native_all_reduce_travels_in_pieces_and_leaves_its_input_alone(world4):
    from simulator.real.native import FIRST_PIECE_BYTES, piece_bounds

    n = 3 * FIRST_PIECE_BYTES // 8 + 12345  # pieces of 1, 2, then a short one
    assert len(piece_bounds(n, 8, FIRST_PIECE_BYTES, 1 << 30)) == 4
    for rank, checks in enumerate(world4.run(demos.all_reduce_check, n).outputs):
        assert all(checks.values()), (rank, checks)


def test_a_ring_all_reduce_received_into_its_result_sums_averages_and_ends_read_only():
    """Message by message, the ring's blocks land straight in the result (``recv_into``): uneven blocks
    (1000 values over 3 ranks), and a large call whose result comes from the reused buffers."""
    with TorchWorld(3, "gloo", timeout=20, collectives="messages") as world:
        for n in (1000, 1 << 18):
            for rank, checks in enumerate(world.run(demos.all_reduce_check, n).outputs):
                assert all(checks.values()), (n, rank, checks)


def test_a_collectives_eager_sends_are_released_as_it_ends():
    """Message by message, a ring all-reduce's chunks are waited for when the call ends: many large
    all-reduces in one run hold no chunk they sent (a plain eager send stays held until the run ends)."""
    with TorchWorld(3, "gloo", timeout=20, collectives="messages", keep_payloads=False) as world:
        held = world.run(demos.sends_held_after_all_reduces, 1 << 16, 4).outputs
    assert held == [[0, 0, 0, 0, 1]] * 3


def test_a_real_rank_receives_straight_into_an_array_of_its_own(world4):
    """``recv_into``: how a ring all-reduce on real ranks puts each block in its place in the result,
    with no copy to assemble it; a slot of the wrong size is refused, naming both shapes."""
    from simulator.real.errors import RemoteRankError

    found = world4.run(demos.receive_into_a_slot).outputs[1]
    assert found == {
        "values": [0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0],
        "in place": True,
        "read-only": True,
        "array still writable": True,
    }
    with pytest.raises(RemoteRankError, match=r"ContractError.*device 1 declared \(5,\) float64, device 0 sent \(6,\)"):
        world4.run(demos.receive_into_a_slot, True)


def test_large_all_reduces_reuse_buffers_without_touching_results_the_caller_holds():
    """On real ranks the input's snapshot and the result go into reused buffers: a result still held is
    never written again, and a changed input gives a new sum."""
    with TorchWorld(2, "gloo", timeout=20, collectives="messages", keep_payloads=False) as world:
        outputs = world.run(demos.all_reduces_of_a_changing_input, 1 << 18).outputs  # 2 MiB each
    for out in outputs:
        assert [list(v) for v in out] == [[2.0] * 4, [4.0] * 4, [6.0] * 4, [2.0] * 4]
