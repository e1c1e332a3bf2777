"""Calibration: the alpha-beta fit, the cost file, and the command on real gloo ranks."""

import json

import numpy as np
import pytest

from simulator import World
from simulator.calibration.costfile import load_cost, save_cost
from simulator.cost.model import CostModel
from simulator.teach.examples import seeds
from tests.report_words import words


def test_fit_recovers_alpha_and_bandwidth_from_exact_times():
    pytest.importorskip("torch.distributed")
    from simulator.calibration.calibrate import fit_alpha_beta

    sizes = [8, 1 << 10, 1 << 16, 1 << 20, 1 << 22]
    alpha, bandwidth = fit_alpha_beta(sizes, [50e-6 + n / 2e9 for n in sizes])
    assert alpha == pytest.approx(50e-6, rel=1e-9) and bandwidth == pytest.approx(2e9, rel=1e-9)
    alpha, bandwidth = fit_alpha_beta(sizes, [n / 1e9 for n in sizes])  # no latency at all
    assert alpha == pytest.approx(0, abs=1e-12) and bandwidth == pytest.approx(1e9, rel=1e-6)
    with pytest.raises(ValueError, match="the message times do not grow with the size"):
        fit_alpha_beta(sizes, [1e-3 - n * 1e-10 for n in sizes])


def test_cost_file_round_trip_and_clear_errors(tmp_path):
    cost = CostModel(latency=3e-5, bandwidth=2e9, flops=4e9)
    path = save_cost(tmp_path / "cost.json", cost, {"ranks": 2}, name="measured here")
    assert json.loads(path.read_text())["measured"] == {"ranks": 2}
    loaded = load_cost(path)
    assert (loaded.latency, loaded.bandwidth, loaded.flops) == (3e-5, 2e9, 4e9)
    # a simulation runs under it: one 8-byte message costs alpha + 8 / B
    msg = World(2, cost=loaded).run(seeds.split, np.array([3.0])).trace.messages[0]
    assert msg.t_arrive - msg.t_send == pytest.approx(3e-5 + 8 / 2e9)
    (tmp_path / "bad.json").write_text('{"latency": 1e-6}')
    with pytest.raises(ValueError, match="lacks bandwidth, flops"):
        load_cost(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="cannot read a cost model"):
        load_cost(tmp_path / "missing.json")


@pytest.mark.slow
@pytest.mark.gloo
def test_calibrate_command_writes_a_cost_model_the_simulator_loads(tmp_path, capsys):
    pytest.importorskip("torch.distributed")
    from simulator.calibration.calibrate import ADD_SIZES, MATMUL_SHAPES, SIZES
    from simulator.cli.main import main

    out = tmp_path / "cost.json"
    assert main(["calibrate", "--ranks", "2", "--repeats", "5", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "calibrated on 2 gloo ranks (pingpong):" in printed and f"wrote {out}" in printed
    assert "regime 0:" in printed and "memory bandwidth" in words(printed) and "GFLOP/s" in printed
    cost = load_cost(out)
    assert cost.latency >= 0 and cost.bandwidth > 0 and cost.flops > 0
    assert cost.op_latency >= 0 and cost.memory_bandwidth > 0 and cost.roofline == "sum"
    assert cost.spread is None  # a smooth model unless asked for the measured spread
    measured = json.loads(out.read_text())["measured"]
    assert sorted(map(int, measured["one_way_seconds"])) == list(SIZES)
    assert all(t > 0 for t in measured["one_way_seconds"].values())
    # the residual of the fit at every size, and one entry per message regime
    assert sorted(map(int, measured["fit_relative_error"])) == list(SIZES)
    assert len(measured["message_regimes"]) == len(cost.regimes) + 1
    assert sorted(map(int, measured["reduce_relative_error"])) == list(ADD_SIZES)
    assert len(measured["matmul_relative_error"]) == len(MATMUL_SHAPES)
    # --spread keeps every repeat of every size (one duration per repeat, over the pair), drawn from in a simulation
    spread_out = tmp_path / "spread.json"
    assert main(["calibrate", "--ranks", "2", "--repeats", "3", "--spread", "--out", str(spread_out)]) == 0
    spread = load_cost(spread_out).spread
    # 3 repeats, or 6 or 12 where a busy machine's noise made calibrate measure again with twice the repeats
    assert spread.sizes == SIZES and len({len(row) for row in spread.extra}) == 1 and len(spread.extra[0]) in (3, 6, 12)
    assert "message times drawn from" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.gloo
def test_times_hidden_by_noise_are_measured_again_with_more_repeats(monkeypatch, capsys):
    """A busy machine's scheduler can make small messages as slow as large ones: the fit finds no trend, and
    calibration measures again with twice the repeats. The fits are stood in for (the measurements are real, and
    as noisy as the machine is): the first finds no trend, the second fits exact times."""
    pytest.importorskip("torch.distributed")
    from simulator.calibration import calibrate as cal
    from simulator.calibration.fit import NoisyMeasurement, OpFit

    real_fit, calls = cal.fit_pieces, []
    sizes = (8, 1 << 16, 1 << 20)

    def noisy_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise NoisyMeasurement("the message times do not grow with the size: {8.0: 0.004, 1024.0: 0.002}")
        return real_fit(list(sizes), [1e-5 + n / 1e9 for n in sizes], max_pieces=1)

    monkeypatch.setattr(cal, "fit_pieces", noisy_once)
    monkeypatch.setattr(cal, "fit_ops", lambda *args: OpFit(1e-6, 1e9, 1e10))
    result = cal.calibrate(2, repeats=2, sizes=sizes, add_sizes=(1 << 12, 1 << 16), max_regimes=1)
    assert len(calls) == 2 and result.cost.bandwidth == pytest.approx(1e9)
    assert "measuring again with 4 repeats" in capsys.readouterr().err

    def always_noisy(*args, **kwargs):
        raise NoisyMeasurement("the message times do not grow with the size: {}")

    monkeypatch.setattr(cal, "fit_pieces", always_noisy)
    with pytest.raises(NoisyMeasurement, match="do not grow"):
        cal.calibrate(2, repeats=1, sizes=(8, 1 << 16), add_sizes=(1 << 12, 1 << 16), max_regimes=1)
