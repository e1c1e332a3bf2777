"""Pipeline runs on the engine: gradients equal one device's, bubbles and memory follow the closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import World
from simulator.checker import check
from simulator.parallel.measure import bubble, memory_over_time, peak_activation_bytes, peak_activation_microbatches
from simulator.parallel.mlp import MLP
from simulator.parallel.pipeline import FREE_LINKS, ActionCosts, Pipeline, split_layers
from simulator.parallel.schedules import (
    ScheduleError,
    gpipe,
    interleaved_1f1b,
    make_schedule,
    one_f_one_b,
    zb_h1,
)

P_RANGE = range(2, 9)
M_RANGE = range(1, 17)


def model(stages: int, width: int = 3, rows: int = 16):
    mlp = MLP((width,) * (stages + 1))
    params = mlp.init(seed=stages)
    x, t = mlp.data(rows, seed=stages + 100)
    return mlp, params, x, t


def cases():
    """Every schedule for every p in 2..8, with m = 1, p and 16 (interleaved: m = p and 2p)."""
    for p in P_RANGE:
        for m in sorted({1, p, 16}):
            yield "gpipe", p, m
            yield "1f1b", p, m
            yield "zb-h1", p, m
        for m in (p, 2 * p):
            yield "interleaved-1f1b", p, m


# ---- item 3: every schedule computes one device's gradients ------------------------------------
@pytest.mark.parametrize(("name", "p", "m"), list(cases()))
def test_gradients_equal_one_device(name, p, m):
    sched = make_schedule(name, p, m)
    mlp, params, x, t = model(sched.stages)
    pipe = Pipeline(mlp, sched)
    result = pipe.run(params, x, t)
    report = check(result, pipe.reference(params, x, t))
    assert report.ok, str(report)
    assert not report.unknown
    # ... and the accumulated gradients are the whole batch's gradients on one device
    whole = mlp.gradients(params, x, t)
    grads = Pipeline.gathered(result)
    assert sorted(grads) == sorted(whole)
    for name_, value in whole.items():
        np.testing.assert_allclose(grads[name_], value, rtol=1e-12, atol=1e-15)


def test_the_checker_compares_every_activation_and_gradient():
    mlp, params, x, t = model(4)
    pipe = Pipeline(mlp, one_f_one_b(4, 4))
    report = check(pipe.run(params, x, t), pipe.reference(params, x, t))
    # per microbatch: x, t, 4 h, loss, dh4, 3 dz, 3 dh, 4 dW, 4 db = 22 values; 4 layers' op inputs too
    assert report.ok and report.checked > 4 * 22


def test_messages_are_the_stage_boundaries():
    mlp, params, x, t = model(3)
    result = Pipeline(mlp, one_f_one_b(3, 2)).run(params, x, t)
    got = sorted((m.src, m.dst, m.name, m.shape) for m in result.trace.messages)
    rows = (8, 3)
    expect = [(s, s + 1, f"h{s + 1}.mb{i}", rows) for s in range(2) for i in range(2)]
    expect += [(s + 1, s, f"dh{s + 1}.mb{i}", rows) for s in range(2) for i in range(2)]
    assert got == sorted(expect)


def test_flop_costs_and_rendezvous_worlds_give_the_same_gradients():
    mlp, params, x, t = model(4)
    pipe = Pipeline(mlp, one_f_one_b(4, 8))
    ref = pipe.reference(params, x, t)
    for world in (World(4), World(4, send_mode="rendezvous", strict=True)):
        assert check(world.run(pipe, params, x, t), ref).ok


def test_gradient_accumulation_costs_its_memory_traffic_under_the_cost_models_rates():
    """Adding a microbatch's weight gradient into the buffer is real work on a real rank: under the cost
    model's rates it takes its traffic's time; under fixed action costs it stays free (the bubble formulas)."""
    from simulator.cost.model import CostModel

    mlp, params, x, t = model(2, width=64)
    cost = CostModel(flops=1e9, memory_bandwidth=1e9, op_latency=1e-6, roofline="sum")
    sums = [
        o for o in World(2, cost=cost).run(Pipeline(mlp, one_f_one_b(2, 4)), params, x, t).trace.ops if "+" in o.name
    ]
    assert sums and all(o.t_end - o.t_start >= 3 * 64 * 64 * 8 / 1e9 for o in sums if o.name.startswith("dW"))
    fixed = Pipeline(mlp, one_f_one_b(2, 4), costs=ActionCosts(1, 1, 1))
    assert all(o.t_end == o.t_start for o in fixed.run(params, x, t).trace.ops if "+" in o.name)


def test_runs_are_deterministic():
    mlp, params, x, t = model(4)
    pipe = Pipeline(mlp, zb_h1(4, 6), costs=ActionCosts(1, 1, 1))
    assert pipe.run(params, x, t).trace.signature() == pipe.run(params, x, t).trace.signature()


# ---- item 3: the bubble, measured from the trace -----------------------------------------------
@pytest.mark.parametrize("p", P_RANGE)
def test_gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1(p):
    mlp, params, x, t = model(p, width=1)
    for m in M_RANGE:
        for sched in (gpipe(p, m), one_f_one_b(p, m)):
            result = Pipeline(mlp, sched, costs=ActionCosts.equal(1.0, 1.0)).run(params, x, t, keep_payloads=False)
            b = bubble(result.trace)
            assert b.step_time == pytest.approx(2 * (m + p - 1))
            assert b.fraction == pytest.approx([(p - 1) / (m + p - 1)] * p), (sched.name, m)


@pytest.mark.parametrize("p", P_RANGE)
def test_interleaving_shrinks_the_bubble_by_v(p):
    """Each stage is 1/v of the work per rank: F and B of a stage cost 1/v; the idle time is (p-1)(F+B)/v."""
    for v in (1, 2, 3):
        mlp, params, x, t = model(p * v, width=1, rows=16)
        for m in (p, 2 * p):
            sched = interleaved_1f1b(p, m, v) if v > 1 else one_f_one_b(p, m)
            result = Pipeline(mlp, sched, costs=ActionCosts.equal(1 / v, 1 / v)).run(params, x, t, keep_payloads=False)
            b = bubble(result.trace)
            assert b.idle == pytest.approx([2 * (p - 1) / v] * p)
            assert b.ratio == pytest.approx([(p - 1) / (v * m)] * p)


@pytest.mark.parametrize("p", P_RANGE)
def test_zb_h1_bubble_is_p_minus_1_over_3m(p):
    mlp, params, x, t = model(p, width=1)
    for m in range(p, 17):
        result = Pipeline(mlp, zb_h1(p, m), costs=ActionCosts(1, 1, 1)).run(params, x, t, keep_payloads=False)
        b = bubble(result.trace)
        assert b.ratio == pytest.approx([(p - 1) / (3 * m)] * p), m
        # against 1F1B with the same F, I and W: 3(p-1) idle units become p-1
        assert b.idle == pytest.approx([p - 1] * p)


# ---- item 3: activation memory -----------------------------------------------------------------
@pytest.mark.parametrize("p", P_RANGE)
def test_peak_activation_memory_in_microbatches(p):
    mlp, params, x, t = model(p, width=1)
    for m in M_RANGE:
        runs = {
            name: Pipeline(mlp, make_schedule(name, p, m)).run(params, x, t, keep_payloads=False)
            for name in ("gpipe", "1f1b", "zb-h1")
        }
        assert peak_activation_microbatches(runs["gpipe"].trace) == [m] * p
        assert peak_activation_microbatches(runs["1f1b"].trace) == [min(p - r, m) for r in range(p)]
        assert max(peak_activation_microbatches(runs["zb-h1"].trace)) <= p


def test_activation_bytes_and_memory_drain_to_the_parameters():
    mlp, params, x, t = model(2, width=4, rows=8)
    result = Pipeline(mlp, gpipe(2, 4)).run(params, x, t)
    # stage 0 keeps, per microbatch, x (2x4) and h1 (2x4) in float64: 128 bytes, for all 4 microbatches;
    # the first backward then adds the received dh1 and its dz1 (64 bytes each) before freeing any
    assert peak_activation_bytes(result.trace)[0] == 4 * 128 + 2 * 64
    for dev in range(2):
        end = memory_over_time(result.trace, dev)[-1]
        assert end.microbatches == frozenset() and end.activation_bytes == 0


# ---- bad configurations ------------------------------------------------------------------------
def test_more_stages_than_layers_is_explained():
    with pytest.raises(ValueError, match="cannot split 2 layers into 4 stages"):
        split_layers(2, 4)


def test_partition_must_cover_the_layers():
    mlp, *_ = model(4)
    with pytest.raises(ValueError, match="stage 1 must start at layer 3"):
        Pipeline(mlp, gpipe(2, 2), partition=((1, 2), (2, 4)))


def test_a_broken_schedule_is_refused_before_running():
    from simulator.parallel.schedules import Schedule

    mlp, *_ = model(2)
    bad = Schedule.from_text(["0F0 0B0", "1B0 1F0"], microbatches=1)
    with pytest.raises(ScheduleError, match="rule 3"):
        Pipeline(mlp, bad)


def test_free_links_make_messages_instant():
    assert FREE_LINKS.message_time(10**9) == 0.0
