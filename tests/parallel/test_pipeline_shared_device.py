"""Adjacent stages on one device: the boundary activation is handed over in memory and freed after both uses.

A stage boundary's activation h[b] is used twice on the device that holds both stages: by the lower
stage's I (the derivative of its activation) and the upper stage's W (the input of its first layer).
Before the fix, whichever ran first freed it and the other failed with "needs h2.mb0, which it does
not hold" although the schedule passed ``validate()``.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.checker import check
from simulator.parallel.measure import memory_over_time
from simulator.parallel.mlp import MLP
from simulator.parallel.pipeline import Pipeline
from simulator.parallel.schedules import Schedule, interleaved_1f1b, make_schedule

MLP3 = MLP((3, 4, 4, 2))
PARAMS = MLP3.init(seed=0)
X, T = MLP3.data(4, seed=1)


def checked(pipe: Pipeline):
    result = pipe.run(PARAMS, X, T)
    report = check(result, pipe.reference(PARAMS, X, T))
    assert report.ok, str(report)
    return result


def test_interleaved_on_one_rank_runs():
    """The issue's case: interleaved_1f1b(1, 1, 2) holds both stages on device 0."""
    sched = interleaved_1f1b(1, 1, 2)
    sched.validate()
    checked(Pipeline(MLP3, sched))  # layers 1-2 and layer 3, both stages on device 0


@pytest.mark.parametrize(
    "rows",
    [
        ["0F0 1F0 1B0 0B0", "2F0 2B0"],  # the upper stage's W first (B = I then W), then the lower stage's I
        ["0F0 1F0 1I0 0I0 1W0 0W0", "2F0 2I0 2W0"],  # the lower stage's I first, the upper stage's W after
        ["0F0 1F0 0F1 1F1 1I0 1I1 0I0 0I1 0W0 0W1 1W1 1W0", "2F0 2I0 2W0 2F1 2I1 2W1"],  # two microbatches
    ],
)
def test_both_uses_of_the_boundary_activation_run_in_either_order(rows):
    sched = Schedule.from_text(rows, microbatches=len({a[-1] for a in rows[1].split()}), placement=(0, 0, 1))
    sched.validate()
    result = checked(Pipeline(MLP3, sched))
    # h1.mb0 crosses no link and is freed once, after its last use; nothing is left but gradients
    assert not any(m.name and m.name.startswith("h1.") for m in result.trace.messages)
    frees = [rec.name for kind, rec in result.trace.events if kind == "free" and rec.rank == 0]
    assert frees.count("h1.mb0") == 1
    assert memory_over_time(result.trace, 0)[-1].activation_bytes == 0


def test_the_v_turn_hands_the_activation_over_in_memory():
    sched = make_schedule("zbv", 2, 3)
    mlp = MLP((2,) * 5)
    params = mlp.init(seed=3)
    x, t = mlp.data(3, seed=4)
    pipe = Pipeline(mlp, sched)
    result = pipe.run(params, x, t)
    assert check(result, pipe.reference(params, x, t)).ok
    crossing = {m.name.split(".")[0] for m in result.trace.messages if m.name}
    assert crossing == {"h1", "h3", "dh1", "dh3"}  # h2 and dh2 stay on device 1, at the turn of the V
    np.testing.assert_allclose(Pipeline.gathered(result)["dW3"], mlp.gradients(params, x, t)["dW3"], rtol=1e-12)
