"""The programs engineers write (``engineers.py``, ``engineers_tp.py``) on real gloo ranks through ``run_real``: the
same verdict as simulated, for right programs and planted bugs. One TorchWorld per world size."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from simulator import Reference, check, simulate_torch  # noqa: E402
from simulator.torchsim import programs as tp  # noqa: E402
from simulator.torchsim.simulate import run_real  # noqa: E402
from tests.torchsim import engineers as en  # noqa: E402
from tests.torchsim import engineers_tp as et  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.gloo]

MODEL = tp.mlp(0)
STATE = MODEL.state_dict()
X, Y = tp.batch(1, rows=8), tp.batch(2, rows=8)
STAGES = en.Stages()
XS = torch.randn(4, 8, generator=torch.Generator().manual_seed(5))

CASES = {  # name -> (world size, program, arguments, reference, verdict)
    "DDP": (2, en.ddp, (STATE, X, Y), lambda: Reference.of_torch(en.sgd_steps, MODEL, X, Y), "passed"),
    "DDP, same rows": (
        2, en.ddp, (STATE, X, Y, 2, "same rows"), lambda: Reference.of_torch(en.sgd_steps, MODEL, X, Y), "FAILED"
    ),
    "manual DP, not averaged": (
        2, en.manual_dp, (STATE, X, Y, 2, "not averaged"), lambda: Reference.of_torch(en.sgd_steps, MODEL, X, Y),
        "FAILED",
    ),
    "Megatron bias after": (2, et.megatron_bias_after, (STATE, X), lambda: Reference.of_torch(MODEL, X), "passed"),
    "from_local Partial": (2, et.from_local_partial, (STATE, X), lambda: Reference.of_torch(MODEL, X), "passed"),
    "2-D mesh": (4, et.mesh_mlp, (STATE, X, (2, 2), ("dp", "tp")), lambda: Reference.of_torch(MODEL, X), "passed"),
    "2-D mesh, wrong dim": (
        4, et.mesh_mlp, (STATE, X, (2, 2), ("dp", "tp"), "wrong mesh dim"), lambda: Reference.of_torch(MODEL, X),
        "FAILED",
    ),
    "pipeline fwd+bwd": (
        2, en.pipeline_fwd_bwd, (STAGES.state_dict(), XS, 2), lambda: Reference.of_torch(en.stages_step, STAGES, XS, 2),
        "passed",
    ),
    "ring by hand": (4, et.ring_tp_mlp, (STATE, X), lambda: Reference.of_torch(MODEL, X), "passed"),
    "ring, half way": (4, et.ring_tp_mlp, (STATE, X, "half a ring"), lambda: Reference.of_torch(MODEL, X), "FAILED"),
    "FSDP2": (2, en.fsdp2, (STATE, X, Y), lambda: Reference.of_torch(en.sgd_steps, MODEL, X, Y), "passed"),
    "FSDP2, same rows": (
        2, en.fsdp2, (STATE, X, Y, 2, "same rows"), lambda: Reference.of_torch(en.sgd_steps, MODEL, X, Y), "FAILED",
    ),
    "Megatron MLP": (2, et.megatron_mlp, (STATE, X), lambda: Reference.of_torch(MODEL, X), "passed"),
    "reduce-scatter rows": (2, et.reduce_scatter_rows, (STATE, X), lambda: Reference.of_torch(MODEL, X), "passed"),
    "redistribute rows": (2, et.redistribute_rows, (STATE, X), lambda: Reference.of_torch(MODEL, X), "passed"),
    "AdamW after TP, local norm": (
        2, et.adamw_tp, (STATE, X, Y, 2, "local norm"), lambda: Reference.of_torch(et.adamw_steps, MODEL, X, Y),
        "FAILED",
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_one_verdict_simulated_and_on_gloo(name, gloo_worlds):
    n, program, args, make_ref, verdict = CASES[name]
    ref = make_ref()
    simulated = simulate_torch(program, n, *args)
    real = run_real(gloo_worlds(n), program, *args)
    for a, b in zip(real.outputs, simulated.outputs):
        assert (a is None and b is None) or np.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert check(simulated, ref).verdict == verdict
    report = check(real, ref)
    assert report.verdict == verdict, str(report)
