"""Measured spread of message times: each simulated message draws its time from calibration's measurements."""

import numpy as np
import pytest

from simulator import World
from simulator.calibration.costfile import load_cost, save_cost
from simulator.calibration.prediction import predicted_seconds, ring_all_reduces
from simulator.cost.model import CostModel
from simulator.cost.spread import MessageSpread
from tests.costfiles import assert_refused

LINE = CostModel(latency=100e-6, bandwidth=1e9)


def ping(dev, n=1000, rounds=40):
    x = np.ones(n)
    for _ in range(rounds):
        if dev.rank == 0:
            dev.send(x, 1)
            dev.recv(1)
        else:
            dev.recv(0)
            dev.send(x, 0)


def message_times(cost, **world):
    trace = World(2, cost=cost, **world).run(ping).trace
    return np.array([m.t_arrive - m.t_start for m in trace.messages])


def test_a_message_takes_the_line_plus_a_measured_difference():
    line = LINE.message_time(8000)
    spread = MessageSpread((1024, 8192), ((0.0,), (0.0, 3e-3)))
    times = message_times(CostModel(latency=100e-6, bandwidth=1e9, spread=spread))
    assert set(np.round((times - line) * 1e6, 6)) == {0.0, 3000.0}  # only the measured differences
    assert 0.25 < np.mean(times > line + 1e-3) < 0.75  # about as often as they were measured
    same = MessageSpread((1024, 8192), ((0.0,), (2e-3,)))
    assert message_times(CostModel(latency=100e-6, bandwidth=1e9, spread=same)) == pytest.approx(line + 2e-3)


def test_draws_are_reproducible_and_do_not_depend_on_payloads_or_scheduling():
    cost = CostModel(latency=100e-6, bandwidth=1e9, spread=MessageSpread((8000,), ((0.0, 1e-3, 5e-3),), seed=3))
    full = message_times(cost)
    assert np.array_equal(full, message_times(cost))
    assert np.array_equal(full, message_times(cost, keep_payloads=False))
    other = CostModel(latency=100e-6, bandwidth=1e9, spread=MessageSpread((8000,), ((0.0, 1e-3, 5e-3),), seed=4))
    assert not np.array_equal(full, message_times(other))


def test_messages_on_one_link_still_arrive_in_the_order_they_were_sent():
    spread = MessageSpread((8000,), ((0.0, 4e-3),), seed=1)

    def burst(dev):
        if dev.rank == 0:
            for _ in range(20):
                dev.send(np.ones(1000), 1)
        else:
            for _ in range(20):
                dev.recv(0)

    msgs = World(2, cost=CostModel(latency=1e-4, bandwidth=1e9, spread=spread)).run(burst).trace.messages
    arrivals = [m.t_arrive for m in msgs]
    assert arrivals == sorted(arrivals)


def test_a_message_uses_the_nearest_measured_size_on_a_log_scale():
    spread = MessageSpread((1024, 1 << 20), ((1.0,), (2.0,)))
    assert [spread.extra[spread.nearest(n)][0] for n in (8, 1024, 30000, 40000, 1 << 20, 1 << 30)] == [
        1.0,
        1.0,
        1.0,
        2.0,
        2.0,
        2.0,
    ]


def test_bad_spreads_are_refused_with_what_is_wrong():
    with pytest.raises(ValueError, match="increasing sizes"):
        MessageSpread((2048, 1024), ((0.0,), (0.0,)))
    with pytest.raises(ValueError, match="one non-empty tuple"):
        MessageSpread((1024,), ((),))
    with pytest.raises(ValueError, match="finite"):
        MessageSpread((1024,), ((float("nan"),),))
    with pytest.raises(ValueError, match="MessageSpread or None"):
        CostModel(spread=[0.0])


def test_measured_spread_reproduces_the_samples_at_each_size():
    samples = {1024: [1e-4, 2e-4, 9e-4], 4096: [3e-4, 3e-4]}
    spread = MessageSpread.measured(samples, LINE.message_time)
    for n, row in zip(spread.sizes, spread.extra):
        assert sorted(LINE.message_time(n) + e for e in row) == pytest.approx(sorted(samples[n]))


def test_cost_file_keeps_the_spread(tmp_path):
    cost = CostModel(latency=1e-4, bandwidth=1e9, spread=MessageSpread((1024, 4096), ((0.0, 1e-3), (2e-3,)), seed=7))
    assert load_cost(save_cost(tmp_path / "c.json", cost)).spread == cost.spread
    assert_refused(tmp_path, '"spread": {"sizes": [8]}', '"spread" must be an object like')
    assert_refused(
        tmp_path, '"spread": {"sizes": [8, 4], "extra": [[0], [0]]}', '"spread": MessageSpread.sizes must be increasing'
    )


def test_a_prediction_is_the_mean_over_simulated_repeats():
    """Without a spread every repeat takes the same time; with one, the mean over many draws."""
    n = 1 << 16
    line = predicted_seconds(2, LINE, ring_all_reduces, n, program_time=False)
    assert predicted_seconds(2, LINE, ring_all_reduces, n, repeats=9, program_time=False) == pytest.approx(line)
    slow = CostModel(latency=100e-6, bandwidth=1e9, spread=MessageSpread((n // 2,), ((0.0, 0.0, 0.0, 5e-3),)))
    typical = predicted_seconds(2, slow, ring_all_reduces, n, repeats=41, program_time=False)
    assert line < typical < line + 5e-3  # some repeats meet a stall, most do not: the mean is between
    stalled = CostModel(latency=100e-6, bandwidth=1e9, spread=MessageSpread((n // 2,), ((5e-3, 5e-3, 5e-3, 0.0),)))
    assert predicted_seconds(2, stalled, ring_all_reduces, n, repeats=41, program_time=False) >= line + 5e-3
