"""The same torch programs on simulated ranks and on real gloo processes give the same outputs: the hand-written
tensor-parallel MLP, the MLP through parallelize_module (1-D and 2-D meshes) and the two-stage pipeline, on
2, 4 and 8 ranks. One TorchWorld per size, every program run on it."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

from simulator import simulate_torch  # noqa: E402
from simulator.real.launch import TorchWorld  # noqa: E402
from simulator.torchsim import programs as tp  # noqa: E402
from simulator.torchsim.simulate import run_real  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.gloo]

STATE, X = tp.mlp(0).state_dict(), tp.batch(1)
XP = torch.arange(1.0, 17.0).reshape(16, 1)


def programs(n):
    yield "tp_mlp", tp.tp_mlp, (STATE, X)
    yield "dtensor_mlp", tp.dtensor_mlp, (STATE, X)
    if n >= 4:
        yield "dtensor_mlp 2-D", tp.dtensor_mlp, (STATE, X, (2, n // 2))
    yield "pipeline", tp.pipeline, (XP, 2)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_simulated_outputs_equal_gloo_outputs(n):
    with TorchWorld(n, timeout=60) as world:
        for name, program, args in programs(n):
            real = run_real(world, program, *args).outputs
            simulated = simulate_torch(program, n, *args).outputs
            for rank, (a, b) in enumerate(zip(real, simulated)):
                assert (a is None) == (b is None), f"{name}, rank {rank}"
                if a is not None:
                    # sums in another order (the simulator's ring, gloo's own) differ in the last bits only
                    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6, err_msg=f"{name}, rank {rank}")
                    assert a.dtype == b.dtype and a.shape == b.shape
