"""The nccl path: the same rank programs on GPUs, one per rank. Skipped, saying why, without them."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")


def _why_not() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine (the nccl backend runs one rank per GPU)"
    if not dist.is_nccl_available():
        return "this torch build has no NCCL"
    if torch.cuda.device_count() < 2:
        return f"nccl needs one GPU per rank: 2 ranks, {torch.cuda.device_count()} GPU(s) here"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.gpu, pytest.mark.skipif(_why_not() is not None, reason=_why_not() or "")]


def test_seed_scenarios_and_collectives_on_nccl():
    from simulator.real.compare_runs import compare
    from simulator.real.launch import TorchWorld
    from simulator.teach.examples import get
    from tests import demos

    with TorchWorld(2, "nccl", timeout=60) as world:
        for name in ("split", "wrong-input", "replicated"):
            sim, real = get(name).run(), get(name).run(on=world)
            assert real.as_expected and compare(sim.result, real.result, exact=True).ok, name
        result = world.run(demos.collectives_tour)
        for rank, (found, expected) in enumerate(zip(result.outputs, demos.expected_collectives_tour(2))):
            for key, value in expected.items():
                if isinstance(value, list):
                    assert all(np.array_equal(f, e) for f, e in zip(found[key], value)), (rank, key)
                elif value is None:
                    assert found[key] is None, (rank, key)
                else:
                    np.testing.assert_array_equal(found[key], value, err_msg=f"{rank} {key}")
        # results come back from the GPU: in pieces, in place, averaged
        for rank, checks in enumerate(world.run(demos.all_reduce_check, 3 << 18).outputs):
            assert all(checks.values()), (rank, checks)
