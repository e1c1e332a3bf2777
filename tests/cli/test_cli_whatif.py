"""``python -m simulator whatif`` and ``validate``: a step planned from flags, and the planner checked."""

import json
import re
from dataclasses import replace

import pytest

import simulator.parallel.whatif.validate as validate_module
from simulator.cli.main import main
from simulator.parallel.whatif.outside import LLAMA3, outside_rows
from simulator.parallel.whatif.tables import published_rows
from simulator.parallel.whatif.validate import layer_checks

TINY = ["--layers", "4", "--hidden", "512", "--heads", "8", "--seq-len", "512", "--vocab", "1024"]


def test_whatif_prints_where_the_time_goes(capsys):
    assert main(["whatif", *TINY, "--tp", "2", "--pp", "2", "--dp", "2", "--global-batch", "8"]) == 0
    out = capsys.readouterr().out
    assert "TFLOP/s per GPU, MFU" in out and "where the time goes" in out and "matrix products" in out
    assert "pipeline rank   0:" in out and "DOES NOT FIT" not in out
    assert "communication only where no computation hides it" in out  # why an overlapped all-reduce reads 0.000


def test_whatif_says_its_band_and_the_knobs_that_move_it(capsys):
    flags = ["--model", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "2", "--global-batch", "16"]
    assert main(["whatif", *flags]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "uncertainty: published runs of layouts it was not built on ran" in out and "TFLOP/s per GPU" in out
    assert "interleaving depth:" in out and "microbatch:" in out and "recompute:" in out
    assert main(["whatif", *flags, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["band_tflops_per_gpu"]["low"] < data["tflops_per_gpu"] < data["band_tflops_per_gpu"]["high"] * 1.1
    assert {k["knob"] for k in data["knobs"]} == {"interleaving depth", "microbatch", "recompute"}
    assert main(["whatif", *flags, "--no-knobs"]) == 0
    assert "unpublished knobs" not in capsys.readouterr().out


def test_a_step_of_a_few_tokens_prints_its_fraction_of_a_tflop_not_zero(capsys):
    """One token a microbatch runs at a third of a TFLOP/s a GPU: the report said "0 TFLOP/s" and "MFU 0.0%"."""
    assert main(["whatif", "--model", "llama2-7b", "--seq-len", "1", "--dp", "8", "--zero", "1"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    step = re.search(r"step [0-9.]+ s: ([0-9.]+) TFLOP/s per GPU, MFU ([0-9.]+)%", out)
    assert step is not None and 0.1 < float(step[1]) < 10 and 0 < float(step[2]) < 1
    band = re.search(r"expect ([0-9.]+) to ([0-9.]+) TFLOP/s per GPU", out)
    assert band is not None and 0 < float(band[1]) < float(step[1]) < float(band[2])


def test_uneven_layers_and_a_network_by_flags(capsys):
    flags = ["--model", "llama3-8b", "--tp", "8", "--pp", "4", "--dp", "2", "--global-batch", "8", "--json"]
    assert main(["whatif", *flags, "--first-stage-layers", "6", "--last-stage-layers", "6", "--nics-per-node", "4",
                 "--nic-gbps", "100", "--no-knobs"]) == 0  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert data["layout"]["first_stage_layers"] == 6 and "4 ports a node of 100 Gb/s" in data["system"]
    assert main(["whatif", *flags, "--gpu-memory", "40", "--no-knobs"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["memory_gib"][0]["capacity"] == 40 and "(40 GB)" in data["system"]  # a GPU's GB: 2^30 bytes
    assert main(["whatif", *flags, "--launch-blocking", "--no-knobs"]) == 0
    assert json.loads(capsys.readouterr().out)["breakdown"]["step"]["launch"] > 0
    assert main(["whatif", *flags, "--no-knobs"]) == 0
    plain = json.loads(capsys.readouterr().out)["breakdown"]["step"]
    fused, fused_elementwise = plain["optimizer"], plain["elementwise"]
    assert main(["whatif", *flags, "--optimizer", "unfused", "--no-knobs"]) == 0
    assert json.loads(capsys.readouterr().out)["breakdown"]["step"]["optimizer"] > fused  # 92 bytes a parameter, not 42
    assert main(["whatif", *flags, "--cross-entropy", "fused", "--no-knobs"]) == 0
    assert json.loads(capsys.readouterr().out)["layout"]["cross_entropy"] == "fused"
    assert main(["whatif", *flags, "--train-metrics", "2", "--no-knobs"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["layout"]["train_metrics"] == 2
    assert metrics["breakdown"]["step"]["elementwise"] > fused_elementwise
    assert main(["whatif", *flags, "--attention", "triton", "--no-knobs"]) == 0
    triton = json.loads(capsys.readouterr().out)["breakdown"]["step"]["attention"]
    assert main(["whatif", *flags, "--no-knobs"]) == 0
    # a first-generation kernel: on H100 at 8,192 tokens and heads of 128 FlashAttention ran 135 TFLOP/s, causal,
    # where FlashAttention-2 ran 308 (the FlashAttention-2 release's forward + backward figures)
    flash = json.loads(capsys.readouterr().out)["breakdown"]["step"]["attention"]
    assert triton == pytest.approx(flash * 308 / 135)
    assert main(["whatif", *flags, "--stage-layers", "8,8,8,7"]) == 2
    assert "summing to the model's layers" in capsys.readouterr().err
    assert main(["whatif", *flags, "--stage-layers", "8,x"]) == 2
    assert "whole numbers of layers separated by commas" in capsys.readouterr().err


def test_whatif_json_has_the_report_keys(capsys):
    flags = ["--model", "llama2-7b", "--tp", "2", "--pp", "2", "--dp", "2", "--global-batch", "16"]
    assert main(["whatif", *flags, "--schedule", "interleaved-1f1b", "--virtual-stages", "2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("step_seconds", "tflops_per_gpu", "mfu", "memory_gib", "breakdown"):
        assert key in data
    assert data["model"] == "llama2-7b" and data["devices"] == 8 and data["layout"]["virtual_stages"] == 2
    assert 0 < data["mfu"] < 1 and len(data["memory_gib"]) == 2


def test_shape_flags_change_a_named_model(capsys):
    assert main(["whatif", "--model", "gpt3-175b", "--layers", "8", "--tp", "8", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "gpt3-175b" and data["memory_gib"][0]["params"] < 5  # 8 layers, not 96


def test_a_layout_that_does_not_fit_exits_1_and_says_by_how_much(capsys):
    assert main(["whatif", "--model", "gpt3-175b", "--tp", "8"]) == 1
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "GiB more than their 79.6 GiB" in out


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--layers", "4"], "--hidden, --heads missing"),
        ([*TINY, "--tp", "3"], "--tp 3 does not split 8 attention heads"),
        ([*TINY, "--dp", "2", "--global-batch", "3"], "use a multiple of 2"),
        ([*TINY, "--pp", "2", "--schedule", "dualpipe-v"], "DualPipeV needs at least"),
        ([*TINY, "--pp", "2", "--schedule", "interleaved-1f1b"], "needs --virtual-stages 2 or more"),
        ([*TINY, "--top-k", "2"], "--top-k 2 needs experts"),
    ],
)
def test_bad_flags_exit_2_with_the_reason(capsys, flags, words):
    assert main(["whatif", *flags]) == 2
    assert words in capsys.readouterr().err


def test_help_explains_the_flags(capsys):
    with pytest.raises(SystemExit):
        main(["whatif", "--help"])
    out = capsys.readouterr().out
    for flag in ("--model", "--hardware", "--cp", "--ep", "--global-batch", "--virtual-stages", "--recompute",
                 "--sequence-parallel", "--zero", "--json"):  # fmt: skip
        assert flag in out
    out = " ".join(out.split())  # argparse wraps the help
    for default in ("(default selective)", "0 (the default)", "the default), fp16", "flash, the default",
                    "(default gelu", "(default 0: dense)", "(default 1; needs --experts)", "as many as --heads"):  # fmt: skip
        assert default in out


def test_validate_prints_published_predicted_and_ratio(capsys, monkeypatch):
    two = [published_rows()[4], published_rows()[11]]  # one row of each table: the full run is in test_whatif_validate
    monkeypatch.setattr(validate_module, "published_rows", lambda: two)
    outside = [r for r in outside_rows() if r.table == LLAMA3][1:2]  # one out-of-sample row: all in test_whatif_outside
    monkeypatch.setattr(validate_module, "outside_rows", lambda: outside)
    assert main(["validate"]) == 0
    out = capsys.readouterr().out
    assert "published  predicted   ratio" in out and "39B (t8 p2 d32)" in out and "22B seq. par. + selective" in out
    assert out.index("Out of sample") > out.index("22B seq. par. + selective") and outside[0].label in out
    assert main(["validate", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data[-1]["set"] == "out of sample" and data[-1]["row"] == outside[0].label
    assert data[-1]["layout"]["first_stage_layers"] == 0 and data[-1]["speed_ratio"] > 0
    data = [r for r in data if r["set"] == "in sample"]
    assert [r["row"] for r in data] == [
        "39B (t8 p2 d32)",
        "22B seq. par. + selective",
        *[label for label, _, _ in layer_checks()],
        "22B none",
        "22B seq. par. + selective",
    ]
    assert data[2]["metric"] == "layer_ms" and data[2]["published"] == 7.7  # Table 4's rows, as in the text
    assert data[12]["metric"] == "activation_gib" and data[12]["published"] == 59.25  # and Figure 1's
    assert all(0.85 <= r["ratio"] <= 1.15 for r in data)


def test_validate_fails_and_marks_a_row_outside_the_band(capsys, monkeypatch):
    far = replace(published_rows()[0], published=100)  # 1.7B as if it had measured 100 TFLOP/s: ratio above 1.5
    monkeypatch.setattr(validate_module, "published_rows", lambda: [far])
    monkeypatch.setattr(validate_module, "outside_rows", lambda: [])
    assert main(["validate"]) == 1
    assert "1.7B (t1 p1 d32)" in (out := capsys.readouterr().out) and "outside 0.85-1.15" in out


def test_distributed_saved_activations_need_full_recomputation(capsys):
    flags = ["whatif", "--model", "gpt3-175b", "--tp", "8", "--pp", "8", "--no-knobs"]
    assert main([*flags, "--recompute", "full", "--distribute-saved-activations"]) == 0
    assert main([*flags, "--distribute-saved-activations"]) != 0
    assert "add --recompute full" in capsys.readouterr().err


def test_the_frameworks_software_flags_reach_the_layout_and_the_memory_shows_the_framework_s_share(capsys):
    flags = ["--model", "llama3-8b", "--tp", "2", "--pp", "2", "--dp", "2", "--cp", "2", "--global-batch", "8",
             "--json", "--no-knobs", "--zero", "2", "--cp-comm", "allgather", "--no-grad-fusion"]  # fmt: skip
    assert main(["whatif", *flags, "--grad-accumulation", "cast-add"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["layout"]["zero"], data["layout"]["cp_comm"], data["layout"]["grad_accumulation"]) == (
        2, "allgather", "cast-add")  # fmt: skip
    memory = data["memory_gib"][0]
    assert (
        memory["needed"] == pytest.approx(memory["total"] + memory["framework"], abs=2e-3) and memory["framework"] > 2
    )
    assert main(["whatif", *flags, "--grad-reduce", "all-reduce"]) == 2  # ZeRO-2 keeps a shard: refused
    assert "use --grad-reduce reduce-scatter or --zero 1" in capsys.readouterr().err


def test_where_the_time_goes_keeps_its_columns(capsys):
    # the longest label ("products slowed by overlapped comm.", with tp overlap) pushed its numbers one column right
    assert main(["whatif", "--model", "llama3-8b", "--tp", "2", "--dp", "4", "--no-knobs"]) == 1
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.strip().startswith("average"))
    rows = lines[header + 1 : lines.index("", header)]
    assert any("overlapped comm." in row for row in rows) and len(rows) >= 5
    ends = {lines[header].index("average") + len("average")} | {re.search(r"\d\.\d{3}", row).end() for row in rows}
    assert len(ends) == 1, "\n".join(lines[header : header + len(rows) + 1])


@pytest.mark.parametrize("hardware", ["dgx-a100", "dgx-h100"])
def test_every_rate_says_its_source_in_full(hardware, capsys):
    flags = ["whatif", *TINY, "--tp", "2", "--hardware", hardware, "--no-knobs"]
    assert main(flags) == 0
    assert "--sources lists them" in capsys.readouterr().out  # the plain report says where to look
    assert main([*flags, "--sources"]) == 0
    out = capsys.readouterr().out
    rates, full = out.split("\npriced with:\n")[1].split("\nsources:\n")
    cited = set(re.findall(r"\[([A-Z0-9-]+)\]", rates))
    listed = set(re.findall(r"^  \[([A-Z0-9-]+)\] ", full, re.M))
    assert "NCCL-412" in cited and cited <= listed  # each cited source is given in full, and what it cites
    assert max(map(len, out.split("\npriced with:\n")[1].splitlines())) <= 120
    assert main([*flags, "--json", "--nic-gbps", "400"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sources"]["nic_bandwidth"].startswith("given: ")
    assert set(data["references"]) >= {
        key for where in data["sources"].values() for key in re.findall(r"\[([A-Z0-9-]+)\]", where)
    }


def test_bad_layer_counts_and_metrics_are_said_in_the_flags_typed(capsys):
    assert main(["whatif", "--model", "llama3-8b", "--pp", "2", "--first-stage-layers", "40", "--no-knobs"]) == 2
    err = capsys.readouterr().err
    assert "--first-stage-layers 40 put 40 layers in one end of the pipeline, and the model has 32" in err
    assert "None" not in err and "-8" not in err
    with pytest.raises(SystemExit):
        main(["whatif", "--model", "llama3-8b", "--train-metrics", "-3"])
    assert "argument --train-metrics: -3 is out of range" in capsys.readouterr().err


def test_the_band_gives_the_step_time_too(capsys):
    # someone renting GPUs reads the time a step takes: the band says it, as the throughput's band does
    flags = ["whatif", "--model", "llama2-7b", "--tp", "2", "--dp", "2", "--no-knobs"]
    assert main([*flags, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    step, band = data["step_seconds"], data["band_step_seconds"]
    tflops = data["band_tflops_per_gpu"]
    assert band["low"] < step < band["high"]
    assert band["low"] * tflops["high"] == pytest.approx(step * data["tflops_per_gpu"])  # the same ratios
    assert main(flags) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"TFLOP/s per GPU, a step of {band['low']:.3g} to {band['high']:.3g} s" in out


def test_a_layout_that_does_not_fit_is_told_only_what_it_does_not_do_yet(capsys):
    base = ["whatif", "--model", "llama3-70b", "--tp", "8", "--no-knobs"]
    assert main([*base, "--recompute", "full", "--sequence-parallel", "--zero", "3"]) == 1
    advice = capsys.readouterr().out.split("DOES NOT FIT: ")[1].split("\n")[0]
    assert advice.endswith("try --dp > 1 with --zero (ZeRO shards over the data-parallel ranks) or a larger tp or pp")
    assert main([*base, "--pp", "2", "--dp", "2", "--microbatch", "2"]) == 1
    advice = capsys.readouterr().out.split("DOES NOT FIT: ")[1].split("\n")[0]
    for way in ("--recompute full", "a higher --zero", "--sequence-parallel", "a larger tp or pp", "--microbatch"):
        assert way in advice, way


def test_tensor_parallelism_across_nodes_is_pointed_out(capsys):
    assert main(["whatif", *TINY, "--tp", "16", "--heads", "16", "--no-knobs"]) == 0
    out = capsys.readouterr().out
    assert "(tp 16 spans 2 nodes of 8 GPUs: its all-reduces cross the network between nodes" in out
    assert main(["whatif", *TINY, "--tp", "8", "--no-knobs"]) == 0
    assert "spans" not in capsys.readouterr().out


def test_mfu_names_the_peak_it_divides_by(capsys):
    for hardware, peak in (("dgx-a100", 312), ("dgx-h100", 989)):
        assert main(["whatif", *TINY, "--tp", "2", "--hardware", hardware, "--no-knobs"]) == 0
        out = capsys.readouterr().out
        assert f"% of the {peak} TFLOP/s peak (" in out, out.splitlines()[1]


def test_the_planners_refusals_name_the_flags_to_type(capsys):
    assert main(["whatif", *TINY, "--cp", "2", "--attention", "unfused", "--no-knobs"]) == 2
    assert capsys.readouterr().err.strip().endswith("use --attention flash")
    assert main(["whatif", *TINY, "--grad-accumulation", "fsdp", "--no-knobs"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("whatif: --grad-accumulation fsdp, --zero 0: ") and "use --zero 2 or 3" in err
    assert "TrainingSetup" not in err and "='" not in err
    assert main(["whatif", "--model", "llama3-8b", "--kv-heads", "5", "--no-knobs"]) == 2
    assert capsys.readouterr().err.strip() == "whatif: --kv-heads 5 must divide --heads 32"
    assert main(["whatif", *TINY, "--pp", "2", "--virtual-stages", "2", "--no-knobs"]) == 2
    assert "drop --virtual-stages 2 or use one of interleaved-1f1b" in capsys.readouterr().err
    assert main(["whatif", *TINY, "--hardware", "dgx-a100", "--precision", "fp8", "--no-knobs"]) == 2
    assert (
        capsys.readouterr().err.strip().endswith("no FP8 tensor cores (no FP8 rate was measured): use --precision bf16")
    )
