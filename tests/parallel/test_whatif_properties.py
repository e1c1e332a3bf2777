"""The what-if's answers hold together for any valid layout: property-based tests over random layouts.

Each test draws models and layouts (hypothesis), keeps the ones ``TrainingSetup.check`` accepts, and asserts a
property the what-if's own rules imply: the report adds up, its JSON and text agree, memory and time move the way
the cost model says they must when one setting changes. Models are small so that a step simulates in
milliseconds; the properties do not depend on size.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from simulator.cli.main import main
from simulator.parallel.whatif import MODELS, SetupError, TrainingSetup, Transformer, whatif
from simulator.parallel.whatif.report import KINDS, LABELS, tflops_text

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
SYSTEMS = ("dgx-a100", "dgx-h100")
LOOPED = ("interleaved-1f1b", "looped-bfs", "interleaved-zb")


@st.composite
def models(draw) -> Transformer:
    """A small decoder: GPT-like or Llama-like (grouped-query attention, SwiGLU), sometimes a mixture of experts."""
    heads = draw(st.sampled_from((4, 8)))
    hidden = heads * draw(st.sampled_from((32, 64)))
    llama = draw(st.booleans())
    experts = draw(st.sampled_from((0, 0, 4)))
    return Transformer(
        layers=draw(st.sampled_from((4, 6, 8, 12))),
        hidden=hidden,
        heads=heads,
        seq=draw(st.sampled_from((256, 512))),
        vocab=draw(st.sampled_from((1000, 1024))),
        kv_heads=draw(st.sampled_from((None, heads // 2, heads // 4))) if llama else None,
        mlp="swiglu" if llama else "gelu",
        bias=not llama,
        dropout=not llama,
        norm="rmsnorm" if llama else "layernorm",
        tied=not llama,
        experts=experts,
        top_k=draw(st.sampled_from((1, 2))) if experts else 1,
        name="",
    )


@st.composite
def layouts(draw, model: Transformer) -> TrainingSetup:
    """A layout of ``model`` that ``check`` accepts (others are rejected with ``assume``)."""
    pp = draw(st.sampled_from((1, 2, 4)))
    dp = draw(st.sampled_from((1, 2, 4)))
    schedule = draw(st.sampled_from(("1f1b", "gpipe", "zb-h1", "zbv", "dualpipe-v", *LOOPED) if pp > 1 else ("1f1b",)))
    virtual = draw(st.sampled_from((2, 3))) if schedule in LOOPED else 1
    microbatch = draw(st.sampled_from((1, 2)))
    microbatches = draw(st.sampled_from((1, 2, 3, 4, 6, 8))) * (pp if schedule == "interleaved-1f1b" else 1)
    recompute = draw(st.sampled_from(("none", "selective", "full", "op")))
    zero = draw(st.sampled_from((0, 1, 2) if pp > 1 else (0, 1, 2, 3)))
    tp = draw(st.sampled_from((1, 2, 4)))
    ends = {}
    chunks = pp * (2 if schedule in ("zbv", "dualpipe-v") else virtual)
    split = draw(st.sampled_from(("even", "even", "first", "every")))
    if pp > 1 and split == "first":
        first = draw(st.integers(0, 2))
        rest = model.layers - first
        if rest >= 0 and rest % (chunks - 1) == 0:
            ends = {"first_stage_layers": first}
    elif pp > 1 and split == "every":  # any counts summing to the layers, empty chunks included
        cuts = sorted(draw(st.lists(st.integers(0, model.layers), min_size=chunks - 1, max_size=chunks - 1)))
        ends = {"stage_layers": tuple(b - a for a, b in zip([0, *cuts], [*cuts, model.layers], strict=True))}
    try:
        layout = TrainingSetup(
            tp=tp,
            pp=pp,
            dp=dp,
            cp=draw(st.sampled_from((1, 1, 2))),
            ep=draw(st.sampled_from((1, 2))) if model.experts else 1,
            microbatch=microbatch,
            global_batch=dp * microbatch * microbatches,
            schedule=schedule,
            virtual_stages=virtual,
            recompute=recompute,
            sequence_parallel=tp > 1 and draw(st.booleans()),
            distribute_saved=recompute == "full" and draw(st.booleans()),
            zero=zero,
            tp_overlap=draw(st.sampled_from(("none", "backward", "full"))),
            dp_overlap=draw(st.booleans()),
            grad_fusion=draw(st.booleans()),
            precision=draw(st.sampled_from(("bf16", "fp16", "fp8"))),
            attention=draw(st.sampled_from(("flash", "flash", "unfused", "triton"))),
            optimizer=draw(st.sampled_from(("fused", "unfused"))),
            cross_entropy=draw(st.sampled_from(("fp32", "fused"))),
            cp_comm=draw(st.sampled_from(("ring", "allgather"))),
            grad_accumulation=draw(st.sampled_from(("add", "cast-add", "fsdp") if zero >= 2 else ("add", "cast-add"))),
            grad_reduce=draw(st.sampled_from(("reduce-scatter", "all-reduce") if zero == 1 else ("reduce-scatter",))),
            launch_blocking=draw(st.sampled_from((False, False, True))),
            train_metrics=draw(st.sampled_from((0, 0, 2))),
            **ends,
        )
        layout.check(model)
    except SetupError:
        assume(False)
    return layout


@st.composite
def cases(draw):
    """(model, layout, system name), the model sometimes a named one, whole or cut to a few layers."""
    kind = draw(st.integers(0, 5))
    if kind == 0:
        named = MODELS[draw(st.sampled_from(("megatron-1.7b", "llama2-7b", "llama3-8b", "mixtral-8x7b")))]
        model = replace(named, layers=4, seq=min(named.seq, 1024))
    elif kind == 1:  # a named model whole
        model = MODELS[draw(st.sampled_from(sorted(MODELS)))]
    else:
        model = draw(models())
    layout = draw(layouts(model))
    # A100 has no FP8 tensor cores: that pair is an invalid layout (test_invalid_...)
    return model, layout, draw(st.sampled_from(SYSTEMS[1:] if layout.precision == "fp8" else SYSTEMS))


def close(a: float, b: float, rel: float = 1e-9) -> bool:
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-15)


@SETTINGS
@given(cases())
def test_a_valid_layout_reports_finite_times_that_add_up_to_the_step(case):
    """Any valid layout: no crash; every time finite and >= 0; each pipeline rank's kinds (the time table's rows,
    idle included) add up to the step; every kind the step books is one the report shows; MFU in (0, 1]; the
    throughput is the model FLOPs over the step and the devices."""
    model, layout, on = case
    report = whatif(model, layout, on)
    assert math.isfinite(report.step_seconds) and report.step_seconds > 0
    for rank, stage in enumerate(report.stages):
        assert set(stage) <= set(KINDS), f"rank {rank} books {set(stage) - set(KINDS)}, which the report drops"
        for kind, seconds in stage.items():
            assert math.isfinite(seconds) and seconds >= -1e-12 * report.step_seconds, (rank, kind, seconds)
        assert close(sum(stage.values()), report.step_seconds, 1e-6), (rank, sum(stage.values()), report.step_seconds)
    assert close(sum(report.breakdown.values()), report.step_seconds, 1e-6)
    assert 0 < report.mfu <= 1
    assert report.hardware_tflops_per_gpu * 1e12 <= report.peak_flops  # recomputation included, under the peak
    assert close(report.tflops_per_gpu * 1e12 * report.step_seconds * layout.devices, report.model_flops)
    assert report.hardware_flops >= report.model_flops
    for m in report.memory:
        for value in (m.params, m.grads, m.optimizer, m.activations, m.framework):
            assert math.isfinite(value) and value >= 0


STEP = re.compile(
    r"step (\d+\.\d+) s: ([\d.]+) TFLOP/s per GPU, MFU (\d+\.\d+)% of the \d+ TFLOP/s peak \(([\d.]+) TFLOP/s counting"
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(cases())
def test_the_json_and_the_text_report_say_the_same_numbers(case):
    """The CLI's JSON and its text print the same step, TFLOP/s, MFU, time rows and memory (to the text's digits),
    and the JSON's layout is the one the flags asked for."""
    model, layout, on = case
    flags = cli_flags(model, layout, on)
    out_json, code_json = run_cli([*flags, "--json"])
    out_text, code_text = run_cli(flags)
    assert code_json == code_text
    data = json.loads(out_json)
    asked = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(layout).items()}
    assert data["layout"] == asked and data["devices"] == layout.devices  # the flags reached the layout whole
    found = STEP.search(out_text)
    assert found, out_text
    step, tflops, mfu, hardware = found.groups()
    assert step == f"{data['step_seconds']:.3f}" and tflops == tflops_text(data["tflops_per_gpu"])
    assert float(mfu) == pytest.approx(data["mfu"] * 100, abs=0.051) and hardware == tflops_text(
        data["hardware_tflops_per_gpu"]
    )
    assert data["fits"] == ("DOES NOT FIT" not in out_text)
    for rank in {0, len(data["memory_gib"]) - 1}:
        g = data["memory_gib"][rank]
        line = f"pipeline rank {rank:>3}: {g['params']:7.1f} {g['grads']:7.1f} {g['optimizer']:7.1f} "
        assert line in out_text, (line, out_text)
    steps, ranks = data["breakdown"]["step"], data["breakdown"]["pipeline_ranks"]
    width = max(map(len, LABELS.values()))  # (the numbers' columns start past the longest label)
    for kind, seconds in steps.items():
        row = f"  {LABELS[kind]:<{width}} {seconds:9.3f}  {seconds / data['step_seconds']:6.1%}   "
        row += f"{ranks[0][kind]:10.3f} {ranks[-1][kind]:9.3f}"
        shown = seconds > 0 or ranks[0][kind] > 0 or ranks[-1][kind] > 0
        assert (row in out_text) == shown, (row, out_text)


def cli_flags(model: Transformer, layout: TrainingSetup, on: str) -> list[str]:
    """The command line that asks for ``layout`` of ``model`` on ``on``."""
    flags = ["whatif", "--no-knobs", "--hardware", on, "--layers", str(model.layers), "--hidden", str(model.hidden),
             "--heads", str(model.heads), "--seq-len", str(model.seq), "--vocab", str(model.vocab),
             "--kv-heads", str(model.kv), "--ffn", str(model.inner), "--mlp", model.mlp]  # fmt: skip
    if model.experts:
        flags += ["--experts", str(model.experts), "--top-k", str(model.top_k)]
    for name in ("tp", "pp", "dp", "cp", "ep", "microbatch", "global_batch", "schedule", "virtual_stages",
                 "recompute", "zero", "tp_overlap", "precision", "attention", "optimizer", "cross_entropy", "cp_comm",
                 "first_stage_layers", "stage_layers", "grad_accumulation", "grad_reduce", "train_metrics"):  # fmt: skip
        value = getattr(layout, name)
        if value is not None:
            flags += [
                f"--{name.replace('_', '-')}",
                ",".join(map(str, value)) if isinstance(value, tuple) else str(value),
            ]
    flags += ["--sequence-parallel"] * layout.sequence_parallel + ["--distribute-saved-activations"] * (
        layout.distribute_saved
    )
    flags += ["--no-dp-overlap"] * (not layout.dp_overlap) + ["--no-grad-fusion"] * (not layout.grad_fusion)
    flags += ["--launch-blocking"] * layout.launch_blocking
    return flags


def run_cli(argv: list[str]) -> tuple[str, int]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code in (0, 1), err.getvalue()
    return out.getvalue(), code


TINY = ["--layers", "8", "--hidden", "256", "--heads", "4", "--seq-len", "256", "--vocab", "1000"]
# flags that cannot run, and a word the one-line error must hold (the flag or the setting it names)
INVALID = [
    (["--tp", "3"], "--tp 3"),
    (["--pp", "3"], "--stage-layers"),
    (["--dp", "2", "--global-batch", "3"], "global batch 3"),
    (["--nic-gbps", "inf"], "--nic-gbps"),
    (["--nic-gbps", "nan"], "--nic-gbps"),
    (["--nic-gbps", "-5"], "--nic-gbps"),
    (["--gpu-memory", "inf"], "--gpu-memory"),
    (["--gpu-memory", "1e300"], "--gpu-memory"),  # 2^30 times it overflowed to an infinite capacity
    (["--nic-gbps", "1e-300"], "--nic-gbps"),  # a step of 1.5e299 seconds
    (["--nic-gbps", "1e300"], "--nic-gbps"),
    (["--gpu-memory", "0"], "--gpu-memory"),
    (["--pp", "2", "--stage-layers", "4,4", "--first-stage-layers", "4"], "--stage-layers"),
    (["--pp", "2", "--stage-layers", "a,b"], "--stage-layers"),
    (["--pp", "2", "--stage-layers", "4,-4,8"], "--stage-layers"),
    (["--pp", "2", "--stage-layers", "3,4"], "--stage-layers 3,4"),
    (["--pp", "2", "--first-stage-layers", "20"], "--first-stage-layers 20 put 20 layers in one end"),
    (["--distribute-saved-activations"], "--distribute-saved-activations"),
    (["--sequence-parallel"], "sequence parallelism"),
    (["--ep", "2"], "--ep 2"),
    (["--zero", "3", "--pp", "2"], "--zero 1"),
    (["--precision", "fp8", "--hardware", "dgx-a100"], "precision"),
    (["--top-k", "2"], "--top-k 2"),
    (["--grad-accumulation", "fsdp"], "--grad-accumulation add"),
    (["--cp", "2", "--attention", "unfused"], "--attention flash"),
    (["--cp", "3"], "cp = 6"),
    (["--virtual-stages", "2"], "--virtual-stages"),
    (["--kv-heads", "3"], "--kv-heads 3"),
    (["--pp", "2", "--schedule", "dualpipe-v"], "--global-batch"),
    (["--layers", "65536", "--pp", "65536", "--global-batch", "1"], "choose a smaller --pp"),  # minutes, not a report
    (["--layers", "4096", "--pp", "4096", "--global-batch", "4096"], "choose a smaller --pp or --global-batch"),
    (["--pp", "4", "--schedule", "interleaved-zb", "--virtual-stages", "2", "--global-batch", "9"], "--global-batch"),
    (["--pp", "2", "--schedule", "interleaved-1f1b", "--virtual-stages", "2", "--global-batch", "3"], "--pp 2"),
]


@pytest.mark.parametrize(("flags", "named"), INVALID, ids=[" ".join(f) for f, _ in INVALID])
def test_invalid_flags_get_one_line_naming_what_to_change(flags, named, capsys):
    """A layout that cannot run exits with status 2 and one line on stderr naming the flag as typed (``--zero 1``, not
    the Python field ``zero=1``) and what to change, never a traceback."""
    assert main(["whatif", "--no-knobs", *TINY, *flags]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1 and lines[0].startswith("whatif: "), captured.err
    assert named in lines[0] and "TrainingSetup" not in lines[0]


@pytest.mark.parametrize(
    "flags", [["--tp", "0"], ["--microbatch", "-1"], ["--model", "gpt5"], ["--nics-per-node", "0"]]
)
def test_out_of_range_numbers_and_unknown_names_are_usage_errors(flags, capsys):
    """argparse refuses them before any work: status 2 and its error line naming the flag."""
    with pytest.raises(SystemExit) as exit_:
        main(["whatif", *TINY, *flags])
    assert exit_.value.code == 2
    assert f"argument {flags[0]}" in capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "setup",
    [
        {"pp": 2, "schedule": "dualpipe-v"},
        {"pp": 4, "schedule": "interleaved-zb", "virtual_stages": 2, "global_batch": 9},
        {"pp": 3, "stage_layers": (4, 4, 4)},
    ],
)
def test_the_python_api_refuses_what_check_refuses(setup):
    """Through ``whatif(...)`` a layout that cannot run raises ``SetupError`` from ``check``, before any step runs."""
    model = Transformer(layers=8, hidden=256, heads=4, seq=256, vocab=1000)
    layout = TrainingSetup(**setup)
    with pytest.raises(SetupError):
        layout.check(model)
    with pytest.raises(SetupError):
        whatif(model, layout)


def test_a_middle_stage_without_layers_holds_no_weights_and_the_step_runs():
    """``--stage-layers 1,0,1``: the middle rank has no layers (nor the embedding or the head): it only passes
    activations on, reduces no gradients and steps no optimizer state, under any ZeRO stage."""
    model = Transformer(layers=2, hidden=256, heads=4, seq=256, vocab=1000)
    for zero in (0, 1, 2):
        report = whatif(model, TrainingSetup(pp=3, dp=2, zero=zero, stage_layers=(1, 0, 1)))
        middle = report.memory[1]
        assert middle.params == middle.grads == middle.optimizer == 0
        assert report.stages[1]["dp"] == report.stages[1]["optimizer"] == 0
        assert math.isclose(sum(report.stages[1].values()), report.step_seconds)


NUMBERS = ("0", "-1", "1", "2", "3", "4", "8", "nan", "inf", "1e400", "2.5", "x", "")
FLAGS = {
    "--layers": NUMBERS, "--hidden": ("256", "250", "0"), "--heads": NUMBERS, "--kv-heads": NUMBERS,
    "--ffn": ("1000", "1024", "0"), "--experts": NUMBERS, "--top-k": NUMBERS, "--seq-len": ("256", "255", "0"),
    "--vocab": ("1", "1000", "0"), "--tp": NUMBERS, "--pp": NUMBERS, "--dp": NUMBERS, "--cp": NUMBERS,
    "--ep": NUMBERS, "--microbatch": NUMBERS, "--global-batch": NUMBERS, "--virtual-stages": NUMBERS,
    "--first-stage-layers": NUMBERS, "--last-stage-layers": NUMBERS, "--stage-layers": ("4,4", "8", "2,2,2,2", "a", ""),
    "--nics-per-node": NUMBERS, "--nic-gbps": NUMBERS, "--gpu-memory": NUMBERS, "--train-metrics": NUMBERS,
    "--schedule": ("1f1b", "gpipe", "zbv", "dualpipe-v", "interleaved-1f1b", "interleaved-zb", "looped-bfs", "nope"),
    "--recompute": ("none", "full", "op", "nope"), "--zero": NUMBERS, "--precision": ("fp8", "fp16", "nope"),
    "--attention": ("unfused", "triton", "nope"), "--hardware": ("dgx-a100", "dgx-h100", "nope"),
    "--grad-accumulation": ("add", "cast-add", "fsdp"), "--grad-reduce": ("all-reduce", "reduce-scatter"),
    "--cp-comm": ("ring", "allgather"), "--model": ("llama2-7b", "mixtral-8x7b", "nope"), "--mlp": ("gelu", "swiglu"),
}  # fmt: skip
SWITCHES = ("--sequence-parallel", "--distribute-saved-activations", "--no-dp-overlap", "--no-grad-fusion", "--json")


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.sampled_from(sorted(FLAGS)), st.integers(0, 7), max_size=6), st.sets(st.sampled_from(SWITCHES))
)
def test_any_flags_get_a_report_or_one_line_never_a_traceback(chosen, switches):
    """Whatever flags are typed (numbers out of range, not whole, inf or nan; names that do not exist; flags that
    contradict): a report (status 0, or 1 when it does not fit), or status 2 with one line saying what is wrong."""
    import contextlib
    import io

    argv = ["whatif", "--no-knobs", *TINY]
    for flag, pick in chosen.items():
        values = FLAGS[flag]
        argv += [flag, values[pick % len(values)]]
    argv += sorted(switches)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit_:  # argparse: its usage, then one error line naming the argument
            assert exit_.code == 2
            assert "error: argument " in err.getvalue().strip().splitlines()[-1], err.getvalue()
            event("a usage error")
            return
    event(f"status {code}")
    if code in (0, 1):
        assert err.getvalue() == "" and out.getvalue(), argv
    else:
        lines = err.getvalue().strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("whatif: "), (argv, err.getvalue())


@pytest.mark.parametrize(
    "setup",
    [
        {"global_batch": 0},
        {"global_batch": -4},
        {"global_batch": "8"},
        {"global_batch": True},
        {"zero": True},
        {"zero": 1.0},
    ],  # fmt: skip
)
def test_the_python_api_refuses_a_setting_that_is_not_a_whole_number_in_range(setup):
    """``TrainingSetup`` names the field and what to give, at once (not a TypeError, nor a run with True as 1)."""
    with pytest.raises(SetupError, match=f"TrainingSetup\\({next(iter(setup))}="):
        TrainingSetup(**setup)


@pytest.mark.parametrize("shape", [{"ffn": 0}, {"ffn": -5}, {"kv_heads": 0}, {"experts": -1}, {"top_k": 1.5}])
def test_a_model_of_an_impossible_width_is_refused_not_priced(shape):
    """A negative MLP width ran and priced a step (of negative products); a zero one silently meant 4 x hidden."""
    with pytest.raises(ValueError, match=next(iter(shape))):
        Transformer(layers=8, hidden=256, heads=4, **shape)


def test_whatif_names_what_it_was_given_instead_of_a_system():
    with pytest.raises(ValueError, match="give a System or a system's name"):
        whatif(Transformer(layers=2, hidden=256, heads=4), TrainingSetup(), None)
