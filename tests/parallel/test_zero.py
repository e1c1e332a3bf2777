"""ZeRO stages 0-3: the same Adam step as one device, and the paper's per-device memory accounting."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.checker import check
from simulator.parallel.mlp import MLP
from simulator.parallel.optim import Adam
from simulator.parallel.zero import ZeRO, category, flatten, model_state_bytes, paper_bytes

MLP3 = MLP((8, 8, 8, 8))  # 72 parameters per layer: divisible by 1, 2, 4 and 8 replicas
PARAMS = MLP3.init(seed=7)
X, T = MLP3.data(16, seed=8)
PSI = sum(v.size for v in PARAMS.values())


def one_device_update() -> dict[str, np.ndarray]:
    """Whole-batch gradients and one Adam step, in plain NumPy."""
    grads = MLP3.gradients(PARAMS, X, T)
    adam, out = Adam(), {}
    for k in range(1, MLP3.layers + 1):
        g = flatten(grads[f"dW{k}"], grads[f"db{k}"])
        p = flatten(PARAMS[f"W{k}"], PARAMS[f"b{k}"])
        m = adam.first_moment(np.zeros_like(p), g)
        v = adam.second_moment(np.zeros_like(p), g)
        out[f"p{k}.new"] = adam.update(1, p, m, v)
    return out


EXPECTED = one_device_update()


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("replicas", [1, 2, 4, 8])
def test_every_stage_takes_the_one_device_step_and_holds_the_paper_bytes(stage, replicas):
    job = ZeRO(MLP3, replicas, stage, microbatches=2)
    result = job.run(PARAMS, X, T)
    report = check(result, job.reference(PARAMS, X, T))
    assert report.ok, str(report)
    assert not report.unknown
    expect = paper_bytes(PSI, replicas, stage)
    for dev, out in enumerate(result.outputs):
        assert model_state_bytes(result.trace, dev) == expect
        for k in range(1, MLP3.layers + 1):
            new = EXPECTED[f"p{k}.new"]
            if stage == 3:  # each replica keeps only its chunk
                n = new.size // replicas
                new = new[dev * n : (dev + 1) * n]
            np.testing.assert_allclose(out[f"p{k}.new"], new, rtol=1e-12)


def test_the_paper_table_for_psi_parameters():
    # 7.5B parameters on 64 devices, K = 12 (the paper's Figure 1): 120 GB, 31.4 GB, 16.6 GB, 1.9 GB
    psi, n = 7.5e9, 64
    totals = [sum(paper_bytes(psi, n, s).values()) / 1e9 for s in range(4)]
    assert totals == pytest.approx([120, 31.4, 16.6, 1.875], abs=0.05)


def test_stage_3_gathers_each_layer_around_each_use():
    result = ZeRO(MLP3, 4, 3, microbatches=2).run(PARAMS, X, T)
    gathered = [op for op in result.trace.ops if op.rank == 0 and op.name.endswith(".gathered")]
    # per microbatch: 3 forwards and 2 backwards (layer 1's input gradient is not needed)
    assert len(gathered) == 2 * (3 + 2)
    # the gathered layers never stay: at the end the device holds only its chunks and its state
    live = {}
    for kind, rec in result.trace.events:
        if kind in ("hold", "op") and rec.rank == 0 and (kind == "hold" or rec.keep):
            live[rec.name] = True
        elif kind == "free" and rec.rank == 0:
            live.pop(rec.name, None)
    assert not [n for n in live if n.endswith(".gathered") or n[0] in "Wb"]


def test_uneven_chunks_still_give_the_one_device_step():
    x, t = X[:15], T[:15]  # 5 replicas of 3 rows; each layer's 72 numbers split 15, 15, 14, 14, 14
    for stage in (1, 2, 3):
        job = ZeRO(MLP3, 5, stage)
        assert check(job.run(PARAMS, x, t), job.reference(PARAMS, x, t)).ok


def test_names_are_classified_into_model_states():
    assert [category(n) for n in ("W1", "p2", "p2.gathered", "dW3", "db1.replica[0]", "g2", "m1", "master3")] == [
        "parameters",
        "parameters",
        "parameters",
        "gradients",
        "gradients",
        "gradients",
        "optimizer",
        "optimizer",
    ]
    assert category("h1.mb0") is None


def test_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="choose a stage in"):
        ZeRO(MLP3, 2, 4)
