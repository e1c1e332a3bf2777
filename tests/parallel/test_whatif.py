"""The GPT what-if: a 1F1B step of transformer layer shapes on dp x pp x tp, metadata only."""

import numpy as np
import pytest

from simulator import World
from simulator.parallel.whatif import Step3D, Transformer, gpt3_step
from simulator.views.memory_columns import peaks

TINY = Transformer(layers=4, hidden=64, heads=4, seq=32, vocab=100)


def test_the_step_is_the_same_message_by_message_and_booked_whole():
    job = Step3D(TINY, dp=2, pp=2, tp=2, microbatches=3)
    booked = World(job.devices, cost="dgx-h100", keep_payloads=False).run(job)
    messages = World(job.devices, cost="dgx-h100", keep_payloads=True).run(job)  # payloads kept: no booking
    assert booked.trace.signature() == messages.trace.signature()
    assert booked.outputs == messages.outputs


def test_counts_and_memory_follow_the_model():
    job = Step3D(TINY, dp=2, pp=2, tp=2, microbatches=3)
    run = World(job.devices, cost="dgx-h100", keep_payloads=False).run(job)
    layers = TINY.layers // job.pp
    tp_messages = 2 * (job.tp - 1)  # a ring all-reduce's messages per member
    per_device = job.microbatches * layers * 4 * tp_messages  # 2 all-reduces a layer forward, 2 backward
    pipeline = job.microbatches * (job.pp - 1) * 2 * job.tp * job.dp  # activations forward, gradients back
    dp_ring = job.devices * 2 * (job.dp - 1)
    assert len(run.trace.messages) == job.devices * per_device + pipeline + dp_ring
    held = peaks(run.trace).reshape(job.dp, job.pp, job.tp)
    states = [job.local_params(s) * (2 + 2 + 12) for s in range(job.pp)]
    stash = layers * TINY.activation_bytes(TINY.seq, job.tp)
    for s in range(job.pp):  # 1F1B: stage s holds at most pp - s microbatches' activations
        assert np.all(held[:, s, :] == states[s] + min(job.pp - s, job.microbatches) * stash)


def test_shapes_must_split():
    with pytest.raises(ValueError, match="pipeline stages"):
        Step3D(TINY, dp=1, pp=3, tp=2, microbatches=2)
    with pytest.raises(ValueError, match="tp=3"):
        Step3D(TINY, dp=1, pp=2, tp=3, microbatches=2)


def test_gpt3_shapes_on_a_few_devices():
    run = gpt3_step(dp=1, pp=2, tp=2, microbatches=2)
    assert run.world.cost.name == "DGX H100" and not run.trace.payloads
    assert 0.5 < run.time < 20  # seconds: a GPT-3 step on four GPUs is slow, not absurd
