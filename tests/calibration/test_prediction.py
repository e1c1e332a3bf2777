"""The prediction harness on the simulator alone: timing rules, the spread table, the GPU script without a GPU."""

import subprocess
import sys
from pathlib import Path

import pytest

from simulator import World
from simulator.calibration.prediction import (
    Row,
    predicted_seconds,
    repeat_seconds,
    ring_all_reduces,
    ring_all_reduces_by_size,
    spread_table,
)
from simulator.cost.model import CostModel, LinkRegime

ROOT = Path(__file__).resolve().parents[2]


def test_a_repeat_lasts_from_the_last_start_to_the_last_end():
    # rank 1 starts late in the first repeat; rank 0 ends last in the second
    outputs = [[(0.0, 5.0), (10.0, 16.0)], [(2.0, 6.0), (10.5, 15.0)]]
    assert repeat_seconds(outputs) == [4.0, 5.5]


@pytest.mark.parametrize("p", [2, 3, 4])
def test_predicted_ring_all_reduce_is_the_closed_form(p):
    alpha, bw, flops, op = 30e-6, 2e9, 1e9, 2e-6
    cost = CostModel(latency=alpha, bandwidth=bw, flops=flops, op_latency=op)
    n = 3 * 4 * 8 * 1024  # divisible by 2, 3 and 4 float64 chunks
    chunk = n / p
    steps = 2 * (p - 1)
    closed = steps * (alpha + chunk / bw) + (p - 1) * (op + chunk / 8 / flops)
    assert predicted_seconds(p, cost, ring_all_reduces, n, program_time=False) == pytest.approx(closed, rel=1e-9)


def test_predicted_ring_uses_the_regime_of_its_chunk_and_the_memory_traffic_of_its_additions():
    cost = CostModel(
        latency=10e-6, bandwidth=4e9, flops=1e12, memory_bandwidth=5e9, regimes=(LinkRegime(256 << 10, 200e-6, 1e9),)
    )
    n = 1 << 20  # chunks of 512 KiB on 2 ranks: the second regime; the addition moves 3 x 512 KiB
    closed = 2 * (200e-6 + (n / 2) / 1e9) + 3 * (n / 2) / 5e9
    assert predicted_seconds(2, cost, ring_all_reduces, n, program_time=False) == pytest.approx(closed, rel=1e-9)


def test_sizes_taken_in_turn_time_each_all_reduce_as_alone():
    """The interleaved program gives every size its own repeats, each lasting what that size alone lasts
    (to within the tens of nanoseconds by which the ranks leave a three-member barrier apart)."""
    cost = CostModel(latency=30e-6, bandwidth=2e9, flops=1e9, op_latency=2e-6)
    sizes = (8 << 10, 64 << 10)
    outputs = World(3, cost=cost, keep_payloads=False).run(ring_all_reduces_by_size, sizes, 4).outputs
    for n in sizes:
        assert repeat_seconds([o[n] for o in outputs]) == pytest.approx(
            [predicted_seconds(3, cost, ring_all_reduces, n, program_time=False)] * 4, rel=1e-3
        )


def test_spread_table_gives_each_run_and_flags_any_run_out_of_range():
    runs = [[Row("a", 2, 1.0, 1.0), Row("b", 4, 1.0, 2.0)], [Row("a", 2, 1.1, 1.0), Row("b", 4, 1.0, 1.0)]]
    lines = spread_table(runs).splitlines()
    assert "1.00 1.10" in lines[1] and lines[1].endswith("1.00-1.10  ok")
    assert "0.50 1.00" in lines[2] and lines[2].endswith("0.50-1.00  OUT")
    assert max(len(line) for line in lines) <= 120


def test_a_row_compares_the_prediction_with_the_measured_mean_and_shows_the_median():
    # one repeat in three meets a 4 ms stall: the mean (what a run of many repeats pays) keeps a third of it
    row = Row.of("ring all-reduce 64 KiB", 3, 0.004, [0.002, 0.002, 0.006] * 5)
    assert row.measured == pytest.approx(0.002 + 0.004 / 3) and row.measured_median == 0.002
    assert row.ratio == pytest.approx(0.004 / (0.002 + 0.004 / 3))
    line = spread_table([[row]] * 3).splitlines()[1]
    assert "4.00 ms     3.33 ms     2.00 ms" in line and "1.20 1.20 1.20" in line and line.endswith("ok")
    assert len(line) <= 120


def test_gpu_check_says_no_gpu_and_exits_cleanly_without_one(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script measures instead")
    out = tmp_path / "gpu.md"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and done.stdout.startswith("no GPU:") and not out.exists()


def test_native_all_reduce_pieces_double_from_the_first_to_the_largest():
    pytest.importorskip("torch.distributed")
    from simulator.real.native import piece_bounds

    mib = 1 << 20
    assert piece_bounds(64 * mib, 1, mib, 32 * mib) == [
        0,
        mib,
        3 * mib,
        7 * mib,
        15 * mib,
        31 * mib,
        63 * mib,
        64 * mib,
    ]
    assert piece_bounds(10, 8, 64, 64) == [0, 8, 10]  # elements, not bytes
    assert piece_bounds(0, 8) == [0]


def test_a_far_out_repeat_is_left_out_of_the_mean_on_both_sides_and_counted():
    # forty repeats of 1 ms, six with a 4 ms tick (kept: a run pays for them), and one of 80 ms (left out)
    from simulator.calibration.probes import STATISTICS, far_out, usual_mean

    durations = [0.001] * 34 + [0.005] * 6 + [0.080]
    assert list(far_out(durations)) == [False] * 40 + [True]
    assert usual_mean(durations) == pytest.approx((34 * 0.001 + 6 * 0.005) / 40)
    assert STATISTICS["mean"](durations) == usual_mean(durations)  # calibration's figure per size
    row = Row.of("ring all-reduce 64 KiB", 2, 0.0016, durations)
    assert row.measured == usual_mean(durations) and row.left_out == 1 and row.ratio == pytest.approx(1.0)
    line = spread_table([[row]] * 3).splitlines()[1]
    assert "  3  " in line and line.endswith("1.00-1.00  ok")
    # at large sizes the fence grows with the median: 30 % slower repeats of a 180 ms all-reduce all stay
    assert not far_out([0.180] * 20 + [0.240] * 5).any()


def test_a_prediction_charges_the_program_s_own_time_unless_told_not_to(monkeypatch):
    """Predicting a real run, each simulated rank also pays its program's Python between its calls (the
    ring's own bookkeeping here): more than the closed form. The wall clock is a fake one that moves 1 us
    each time it is read, so the figures do not depend on how busy the machine is."""
    import simulator.core.program_time as program_time

    class Ticking:
        now = 0.0

        def __call__(self) -> float:
            self.now += 1e-6
            return self.now

    monkeypatch.setattr(program_time, "perf_counter", Ticking())
    cost = CostModel(latency=30e-6, bandwidth=2e9, flops=1e9, op_latency=2e-6)
    n = 2 << 20  # 1.1 ms of messages and additions
    closed = predicted_seconds(2, cost, ring_all_reduces, n, program_time=False)
    timed = predicted_seconds(2, cost, ring_all_reduces, n, repeats=5)
    assert closed < timed < 1.1 * closed  # a few reads of the clock per call, 1 us each
