"""Calibration's message probes, run on simulated ranks whose cost model is known: each must measure
exactly the model's message time, timed as a prediction times a run (after a barrier, from the last
rank's start to the last rank's end)."""

import weakref

import numpy as np
import pytest

from simulator import World
from simulator.calibration.calibrate import _durations
from simulator.calibration.probes import COLD_BYTES, _time_ops, exchange, pingpong, ring
from simulator.cost.model import CostModel

COST = CostModel(latency=40e-6, bandwidth=1.5e9)
SIZES = (1 << 10, 64 << 10, 1 << 20)


@pytest.mark.parametrize(
    "probe, ranks",
    [(ring, 2), (ring, 3), (ring, 4), (exchange, 2), (exchange, 3), (exchange, 4), (pingpong, 2), (pingpong, 3)],
)
def test_each_probe_measures_the_model_message_time_at_every_size(probe, ranks):
    outputs = World(ranks, cost=COST, keep_payloads=False).run(probe, SIZES, 3).outputs
    assert sum(o is not None for o in outputs) == {"ring": ranks, "exchange": ranks // 2 * 2}.get(
        probe.__name__, ranks // 2
    )  # only the ranks that measure report
    for n, seconds in _durations(outputs).items():
        assert seconds == pytest.approx([COST.message_time(n)] * 3, rel=1e-9)


def test_a_rank_that_starts_late_is_not_counted_against_the_message():
    # rank 2 leaves the barrier 3 ms late in the first repeat: the repeat lasts from its start
    spans = (
        {1024: [(0.0, 0.004), (1.0, 1.001)]},
        {1024: [(0.0, 0.0035), (1.0, 1.002)]},
        {1024: [(0.003, 0.0039), (1.0, 1.0)]},
    )
    assert _durations([*spans, None]) == {1024: pytest.approx([0.001, 0.002])}


def _ring_counting_settles(dev, sizes, repeats):
    settled = []
    dev.settle = lambda: settled.append(len(settled))  # as a real rank's, which holds its eager sends
    ring(dev, sizes, repeats, warmup=1)
    return len(settled)


def test_a_real_rank_lets_go_of_each_message_before_the_next():
    # a real rank holds each eager send's copy until settled: a probe that never settles copies every
    # message into fresh memory (on this machine, four 16 MiB messages took 130 ms so instead of 24)
    outputs = World(3, cost=COST, keep_payloads=False).run(_ring_counting_settles, SIZES, 2).outputs
    assert outputs == [len(SIZES) * 3] * 3  # once after every message, warm-up included


def test_an_op_probe_writes_each_output_where_no_recent_op_wrote():
    # a training step keeps what its ops write; an op probe that freed each output at once would write
    # the next into the same, still cached, memory and time ops faster than any step runs them
    nbytes = 4 << 20
    alive_before_each_call, outputs = [], []

    def op():
        alive_before_each_call.append(sum(ref() is not None for ref in outputs))
        out = np.ones(nbytes // 8)
        outputs.append(weakref.ref(out))
        return out

    times = _time_ops(op, [()], repeats=10, warmup=1)
    assert len(times) == 10
    kept = COLD_BYTES // nbytes  # the latest outputs, COLD_BYTES of them
    assert alive_before_each_call == [min(i, kept) for i in range(11)]
    assert len({id(ref) for ref in outputs}) == 11


@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_the_ring_probe_times_steps_in_trains_as_the_ring_all_reduce_runs_them(ranks):
    # a step right after a barrier costs more on real ranks than one that follows another: each train
    # is the 2(p - 1) steps of a ring all-reduce, and a repeat lasts the train's time per step
    result = World(ranks, cost=COST, keep_payloads=False).run(ring, SIZES, 2, warmup=1)
    steps = sum(m.tag == 1 for m in result.trace.messages)
    assert steps == 3 * len(SIZES) * ranks * 2 * (ranks - 1)
    for n, seconds in _durations(result.outputs).items():
        assert seconds == pytest.approx([COST.message_time(n)] * 2, rel=1e-9)
    one = World(ranks, cost=COST, keep_payloads=False).run(ring, SIZES, 2, warmup=1, steps=1)
    assert sum(m.tag == 1 for m in one.trace.messages) == 3 * len(SIZES) * ranks
