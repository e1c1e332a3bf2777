"""Bubbles of every schedule against their closed forms (simulator.parallel.schedules.bubbles), and real runs of each.

On the idealised machine (``execute``) for every p in 2..8 and m in 1..16 the schedule accepts; in the
simulation, with real arithmetic, for a sample of cases: every rank's idle time over its busy time is
the closed form, and the gradients are one device's.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from simulator.checker import check
from simulator.parallel.measure import bubble
from simulator.parallel.mlp import MLP
from simulator.parallel.pipeline import ActionCosts, Pipeline
from simulator.parallel.schedules import SCHEDULES, bubble_ratio, execute, make_schedule

CASES = [(name, v) for name, record in SCHEDULES.items() for v in ((1, 2, 3, 4) if record.looped else (1,))]


def schedule(name: str, p: int, m: int, v: int = 1):
    return make_schedule(name, p, m, virtual=v) if SCHEDULES[name].looped else make_schedule(name, p, m)


@pytest.mark.parametrize(("name", "v"), CASES)
def test_idealised_bubbles_equal_the_closed_forms(name, v):
    stated = 0
    for p in range(2, 9):
        for m in range(1, 17):
            try:
                sched = schedule(name, p, m, v)
            except ValueError:
                continue
            want = bubble_ratio(name, p, m, v)
            if want is None:
                continue
            spans = execute(sched)
            step = max(end for rows in spans.values() for _, end, _ in rows)
            for r, rows in spans.items():
                busy = sum(end - start for start, end, _ in rows)
                assert Fraction(step - busy) / Fraction(busy) == want, f"{name} v={v} p={p} m={m} rank {r}"
            stated += 1
    assert stated >= 49


def test_closed_forms_quoted_in_the_papers():
    assert bubble_ratio("1f1b", 4, 8) == Fraction(3, 8)  # (p - 1) / m
    assert bubble_ratio("interleaved-1f1b", 4, 8, 2) == Fraction(3, 16)  # (p - 1) / (v m), Megatron-LM
    assert bubble_ratio("zb-h1", 4, 8) == Fraction(3, 24)  # (p - 1) F over 3 m F, ZB-H1
    assert bubble_ratio("interleaved-1f1b", 4, 2, 2) == Fraction(3 + 2, 4)  # m < p: an empty ramp slot per extra stage
    assert bubble_ratio("zbv", 4, 5) is None  # ZB-V's form holds from m = 2p - 1
    with pytest.raises(KeyError, match="no schedule named 'pipedream'"):
        bubble_ratio("pipedream", 2, 2)


def run(name: str, p: int, m: int, v: int = 1, width: int = 2):
    sched = schedule(name, p, m, v)
    mlp = MLP((width,) * (sched.stages + 1))
    params = mlp.init(seed=p)
    x, t = mlp.data(m, seed=m)
    pipe = Pipeline(mlp, sched, costs=ActionCosts(1.0, 1.0, 1.0))  # F = I = W = 1: schedules.UNIT_COSTS
    return pipe, pipe.run(params, x, t), (params, x, t)


# m = 2p and 3p are in every form's regime; m = 4 on p = 3 is no multiple of p (below the V schedules' regimes)
SIMULATED = [(name, v, p, m) for name, v in CASES if v <= 2 for p in (2, 3, 5) for m in (2 * p, 3 * p)]
SIMULATED += [(name, v, 3, 4) for name, v in CASES if v <= 2 and name not in ("zbv", "dualpipe-v")]


@pytest.mark.parametrize(("name", "v", "p", "m"), SIMULATED)
def test_simulated_bubbles_equal_the_closed_forms(name, v, p, m):
    _, result, _ = run(name, p, m, v)
    want = bubble_ratio(name, p, m, v)
    np.testing.assert_allclose(bubble(result.trace).ratio, [float(want)] * p, rtol=1e-12)


@pytest.mark.parametrize(("name", "v"), [c for c in CASES if c[1] <= 3])
def test_every_schedule_computes_one_devices_gradients(name, v):
    p, m = (2, 4) if name == "dualpipe-v" else (3, 4)  # m not a multiple of p where the schedule allows it
    pipe, result, (params, x, t) = run(name, p, m, v)
    report = check(result, pipe.reference(params, x, t))
    assert report.ok, str(report)
    whole = pipe.mlp.gradients(params, x, t)
    grads = Pipeline.gathered(result)
    for key, value in whole.items():
        np.testing.assert_allclose(grads[key], value, rtol=1e-9, atol=1e-15)
