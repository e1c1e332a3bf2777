"""``python -m simulator whatif`` and ``python -m simulator validate``: plan a training step, and check the planner.

``whatif`` builds a model (a named one, ``--model``, or its shapes) and a layout from the flags, simulates one
step (``simulator.parallel.whatif``) and prints where the time goes, TFLOP/s per GPU, MFU and memory per
device, or the same as JSON. ``validate`` runs every row of the published tables and prints published,
predicted and their ratio.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
from dataclasses import replace

from ..cost.systems import SYSTEMS, references, system, with_memory, with_network
from ..parallel.schedules import SCHEDULES
from ..parallel.whatif import MODELS, SetupError, TrainingSetup, Transformer, whatif
from ..parallel.whatif.band import OUT_OF_SAMPLE, Knob, band, knobs
from ..parallel.whatif.report import tflops_text
from ..parallel.whatif.training_setup import (
    ATTENTION,
    CP_COMM,
    CROSS_ENTROPY,
    GRAD_ACCUMULATION,
    GRAD_REDUCE,
    OPTIMIZER,
    PRECISION,
    RECOMPUTE,
    TP_OVERLAP,
)
from .types import bounded_int

SHAPE_FLAGS = {
    "layers": "layers",
    "hidden": "hidden",
    "heads": "heads",
    "seq_len": "seq",
    "vocab": "vocab",
    "kv_heads": "kv_heads",
    "ffn": "ffn",
    "experts": "experts",
    "top_k": "top_k",
}


def cmd_whatif(args: argparse.Namespace) -> int:
    """Plan one training step on a GPU system: where the time goes, TFLOP/s per GPU, MFU, memory per device.

    Every data-parallel replica and tensor-parallel rank of a pipeline stage runs the same timeline, so one
    device per pipeline rank is simulated and its timeline stands for the others. Products, element-wise
    kernels and collectives are priced with measured rates (see docs/whatif.md); `python -m simulator
    validate` holds the result against published measurements. Exit status 1: the layout does not fit.
    """
    try:
        model = build_model(args)
        layout = build_layout(args)
        machine = with_memory(with_network(system(args.hardware), args.nics_per_node, args.nic_gbps), args.gpu_memory)
        report = whatif(model, layout, machine)
        turned = [] if args.no_knobs else knobs(model, layout, machine, report)
    except (SetupError, ValueError) as exc:
        print(f"whatif: {in_flags(str(exc), args.command_parser)}", file=sys.stderr)
        return 2
    low, high = band(report.tflops_per_gpu)
    if args.json:
        data = report.to_json()
        data["band_tflops_per_gpu"] = {"low": low, "high": high, "out_of_sample_speed_ratios": list(OUT_OF_SAMPLE)}
        data["band_step_seconds"] = dict(zip(("low", "high"), step_band(report.step_seconds)))
        data["knobs"] = [k.to_json() for k in turned]
        data["sources"] = dict(machine.achieved.sources)
        data["references"] = cited(machine.achieved.sources)
        print(json.dumps(data, indent=2))
    else:
        print(report.text())
        print(uncertainty(report.tflops_per_gpu, low, high, turned, report.step_seconds))
        print(sources(machine.achieved.sources) if args.sources else SOURCES_HINT)
    return 0 if report.fits else 1


SOURCES_HINT = "rates: measured, each from a named source: --sources lists them and the sources in full"


def sources(measured: dict[str, str]) -> str:
    """Where each rate the step was priced with comes from, one line each, then each source cited, in full."""
    width = max(map(len, measured))
    lines = ["", "priced with:"]
    for what, where in measured.items():
        lines += textwrap.wrap(f"{what:<{width}}  {where}", 116, initial_indent="  ", subsequent_indent=" " * (width + 4),
                               break_on_hyphens=False)  # fmt: skip
    lines += ["", "sources:"]
    for key, text in cited(measured).items():
        lines += textwrap.wrap(f"[{key}] {text}", 116, initial_indent="  ", subsequent_indent="    ",
                               break_on_hyphens=False)  # fmt: skip
    return "\n".join(lines)


def cited(measured: dict[str, str]) -> dict[str, str]:
    """The sources the rates cite (``[NCCL-412]``), in the order first cited, each in full."""
    full = references()
    keys = dict.fromkeys(key for where in measured.values() for key in re.findall(r"\[([A-Z0-9-]+)\]", where))
    for key in list(keys):  # and the sources those cite ([TPT-79] checks itself against [MAMF])
        keys.update(dict.fromkeys(re.findall(r"\[([A-Z0-9-]+)\]", full[key])))
    return {key: full[key] for key in keys}


def in_flags(message: str, parser: argparse.ArgumentParser) -> str:
    """The planner's words for a setting (``attention='flash'``, ``top_k=2``) as the flag a command line gives it
    (``--attention flash``, ``--top-k 2``), where the command has that flag."""
    flags = {flag for action in parser._actions for flag in action.option_strings}

    def flag(m: re.Match) -> str:
        name = "--" + m[1].replace("_", "-")
        return f"{name} {m[2] or m[3]}" if name in flags else m[0]

    message = re.sub(r"^(TrainingSetup\((.*?)\)|Transformer): ", lambda m: f"{m[2]}: " if m[2] else "", message)
    # the per-chunk counts as typed (stage_layers=(4, -4, 8) is --stage-layers 4,-4,8), and the settings named bare
    message = re.sub(r"\bstage_layers=\(([^)]*)\)", lambda m: f"--stage-layers {m[1].replace(' ', '')}", message)
    message = message.replace("first/last_stage_layers", "--first-stage-layers/--last-stage-layers")
    message = re.sub(
        r"(?<![-\w])(stage_layers|virtual_stages)\b(?!=)", lambda m: "--" + m[1].replace("_", "-"), message
    )
    # a setting and its value, quoted or a whole number; not a factor of a product (pp=2 x 1 per rank)
    return re.sub(r"\b([a-z_]+)=(?:'([\w.-]+)'|(\d+)\b(?! x ))", flag, message)


def step_band(seconds: float) -> tuple[float, float]:
    """(low, high) step time the out-of-sample runs' speed ratios put around a predicted ``seconds``."""
    lo, _, hi = OUT_OF_SAMPLE
    return seconds * lo, seconds * hi


def uncertainty(tflops: float, low: float, high: float, turned: list[Knob], step: float | None = None) -> str:
    """The band (of throughput, and of the step's time where given) and the knobs, as the report's last lines."""
    lo, mid, hi = OUT_OF_SAMPLE
    steps = "" if step is None else f", a step of {step_band(step)[0]:.3g} to {step_band(step)[1]:.3g} s"
    lines = [
        "",
        f"uncertainty: published runs of layouts it was not built on ran {1 / hi:.0%} to {1 / lo:.0%} of the predicted "
        f"speed (median {1 / mid:.0%}; `python -m simulator validate`): expect {tflops_text(low)} to {tflops_text(high)} TFLOP/s per GPU"
        f"{steps}",
    ]
    if turned:
        lines.append("unpublished knobs, re-asked (model TFLOP/s per GPU), largest swing first:")
        ordered = sorted(turned, key=lambda k: -(k.swing(tflops)[1] - k.swing(tflops)[0]))
        lines += [f"  {k.text(tflops)}" for k in ordered]
    return "\n".join(lines)


def cmd_validate(args: argparse.Namespace) -> int:
    """Predict every row of Narayanan et al. 2021 Table 1 and Korthikanti et al. 2022 Tables 4 and 5 (in sample),
    then the out-of-sample rows apart; print published, predicted and their ratio (exit status 1 if any in-sample
    ratio is outside 0.85-1.15; the out-of-sample rows are reported, with their summary, not gated)."""
    from ..parallel.whatif.tables import KORTHIKANTI_FIGURE_1, KORTHIKANTI_TABLE_4
    from ..parallel.whatif.validate import (
        activation_checks,
        layer_checks,
        outside,
        outside_table,
        rated,
        speed_ratio,
        table,
        validate,
        within,
    )

    checked = validate()
    layers = layer_checks()
    out_of_sample = outside()
    if args.json:
        rows = [
            {"set": "in sample", "table": c.row.table, "row": c.row.label, "metric": c.row.metric,
             "published": c.row.published, "predicted": c.predicted, "ratio": c.ratio, "within": c.within}
            for c in checked
        ]  # fmt: skip
        for name, metric, extra in ((KORTHIKANTI_TABLE_4, "layer_ms", layers),
                                    (KORTHIKANTI_FIGURE_1, "activation_gib", activation_checks())):  # fmt: skip
            rows += [
                {"set": "in sample", "table": name, "row": label, "metric": metric, "published": published, "predicted": predicted,
                 "ratio": predicted / published,
                 "within": within(predicted / published) if metric == "layer_ms" else None}
                for label, published, predicted in extra
            ]  # fmt: skip
        rows += [
            {"set": "out of sample", "table": c.row.table, "row": c.row.label, "metric": c.row.metric,
             "published": c.row.published, "predicted": c.predicted, "ratio": c.ratio, "speed_ratio": speed_ratio(c),
             "within": abs(speed_ratio(c) - 1) <= 0.15, "layout": layout_json(c.row.layout)}
            for c in out_of_sample
        ]  # fmt: skip
        print(json.dumps(rows, indent=2))
    else:
        print(table(checked, layers))
        print()
        print(outside_table(out_of_sample))
    return 0 if all(within(r) for _, r in rated(checked, layers)) else 1


def layout_json(layout: TrainingSetup) -> dict:
    """A layout's fields as JSON values (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in vars(layout).items()}


def build_model(args: argparse.Namespace) -> Transformer:
    """The named model with any shape flags applied, or a model from the shape flags alone."""
    given = {field: getattr(args, flag) for flag, field in SHAPE_FLAGS.items() if getattr(args, flag) is not None}
    if args.mlp:
        given["mlp"] = args.mlp
    if args.model:
        return replace(MODELS[args.model], **given) if given else MODELS[args.model]
    missing = [f"--{f.replace('_', '-')}" for f in ("layers", "hidden", "heads") if getattr(args, f) is None]
    if missing:
        raise ValueError(f"give --model NAME (one of {', '.join(MODELS)}) or the shapes: {', '.join(missing)} missing")
    return Transformer(**{"seq": 2048, "vocab": 51200, **given, "name": "custom"})


def build_layout(args: argparse.Namespace) -> TrainingSetup:
    if args.distribute_saved_activations and args.recompute != "full":
        raise ValueError(
            f"--distribute-saved-activations splits the layer inputs full recomputation keeps, but --recompute is "
            f"{args.recompute}: add --recompute full or drop --distribute-saved-activations"
        )
    return TrainingSetup(
        tp=args.tp, pp=args.pp, dp=args.dp, cp=args.cp, ep=args.ep, microbatch=args.microbatch,
        global_batch=args.global_batch, schedule=args.schedule, virtual_stages=args.virtual_stages,
        recompute=args.recompute, sequence_parallel=args.sequence_parallel, zero=args.zero,
        tp_overlap=args.tp_overlap, dp_overlap=not args.no_dp_overlap, grad_fusion=not args.no_grad_fusion,
        precision=args.precision, attention=args.attention, first_stage_layers=args.first_stage_layers,
        last_stage_layers=args.last_stage_layers, stage_layers=stage_counts(args.stage_layers),
        launch_blocking=args.launch_blocking, distribute_saved=args.distribute_saved_activations,
        optimizer=args.optimizer, cross_entropy=args.cross_entropy, cp_comm=args.cp_comm,
        grad_accumulation=args.grad_accumulation, grad_reduce=args.grad_reduce, train_metrics=args.train_metrics,
    )  # fmt: skip


def stage_counts(text: str | None) -> tuple[int, ...] | None:
    """``--stage-layers 7,8,8,7``: every model chunk's layers, in pipeline order."""
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(
            f"--stage-layers {text!r}: give whole numbers of layers separated by commas, e.g. 7,8,8,7"
        ) from None


def add_whatif_args(p: argparse.ArgumentParser) -> None:
    size = bounded_int(1, 1 << 20)
    model = p.add_argument_group("model (a named one, or its shapes; shape flags also change a named one)")
    model.add_argument("--model", choices=list(MODELS), metavar="NAME", help="a named model: " + ", ".join(MODELS))
    model.add_argument("--layers", type=size, help="transformer layers")
    model.add_argument("--hidden", type=size, help="hidden width")
    model.add_argument("--heads", type=size, help="attention heads")
    model.add_argument("--seq-len", type=size, help="tokens per sequence (default 2048, or the named model's)")
    model.add_argument("--vocab", type=size, help="vocabulary size (default 51200, or the named model's)")
    model.add_argument(
        "--kv-heads", type=size, help="key/value heads, for grouped-query attention (default: as many as --heads)"
    )
    model.add_argument("--ffn", type=size, help="MLP width (default 4 x hidden, or the named model's)")
    model.add_argument("--mlp", choices=("gelu", "swiglu"), help="MLP kind (default gelu, or the named model's)")
    model.add_argument(
        "--experts", type=bounded_int(0, 1 << 12), help="experts per layer, a mixture of experts (default 0: dense)"
    )
    model.add_argument("--top-k", type=size, help="experts each token visits (default 1; needs --experts)")
    lay = p.add_argument_group("layout (ranks are numbered tp, cp, ep/dp, pp, as Megatron-LM does)")
    lay.add_argument("--hardware", choices=list(SYSTEMS), default="dgx-h100", help="GPU system (default dgx-h100)")
    for flag, what in (("tp", "tensor"), ("pp", "pipeline"), ("dp", "data"), ("cp", "context"), ("ep", "expert")):
        lay.add_argument(f"--{flag}", type=size, default=1, help=f"{what}-parallel size (default 1)")
    lay.add_argument("--first-stage-layers", type=bounded_int(0, 1 << 20),
                     help="layers of the first model chunk, the rest split evenly (Megatron-LM's "
                          "--decoder-first-pipeline-num-layers)")  # fmt: skip
    lay.add_argument("--last-stage-layers", type=bounded_int(0, 1 << 20),
                     help="layers of the last model chunk (--decoder-last-pipeline-num-layers)")  # fmt: skip
    lay.add_argument("--stage-layers", metavar="N,N,...",
                     help="every model chunk's layers in pipeline order (pp x virtual stages counts)")  # fmt: skip
    lay.add_argument("--nics-per-node", type=bounded_int(1, 64),
                     help="network ports per node between nodes (default: one per GPU, as in DGX nodes)")  # fmt: skip
    lay.add_argument("--nic-gbps", type=float, help="each port's line rate in Gb/s (default: the system's)")
    lay.add_argument("--gpu-memory", type=float, metavar="GB",
                     help="memory per GPU as the product names it, in GB of 2^30 bytes, e.g. 40 for A100 40GB "
                          "(default: the system's, what nvidia-smi reports: 80 GiB on A100 80GB, 79.6 on H100)")  # fmt: skip
    lay.add_argument("--microbatch", type=size, default=1, help="sequences per microbatch (default 1)")
    lay.add_argument("--global-batch", type=size, help="sequences per step (default dp x microbatch x pp)")
    priced = [name for name, record in SCHEDULES.items() if record.whatif]
    looped = ", ".join(name for name in priced if SCHEDULES[name].looped)
    lay.add_argument("--schedule", choices=priced, default="1f1b", help="pipeline schedule (default 1f1b)")
    lay.add_argument(
        "--virtual-stages",
        type=size,
        default=1,
        help=f"model chunks per rank: 2 or more for {looped} (default 1)",
    )
    lay.add_argument(
        "--recompute",
        choices=RECOMPUTE,
        default="selective",
        help="activation recomputation (default selective); op: torchtitan's op-level policy",
    )
    lay.add_argument("--sequence-parallel", action="store_true", help="split norms and dropout over tp ranks")
    lay.add_argument("--distribute-saved-activations", action="store_true",
                     help="with --recompute full: each tp rank keeps 1/tp of a layer's input (all-gathered to recompute)")  # fmt: skip
    lay.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=0,
                     help="0 (the default): replicated optimizer; 1: distributed optimizer; 2: and gradients; 3: and weights")  # fmt: skip
    soft = p.add_argument_group("software (defaults: Megatron-LM today; the papers' settings in docs/whatif.md)")
    soft.add_argument("--tp-overlap", choices=TP_OVERLAP, default="backward",
                      help="which tensor-parallel collectives run behind products (default backward)")  # fmt: skip
    soft.add_argument("--launch-blocking", action="store_true",
                      help="CUDA_LAUNCH_BLOCKING=1: the CPU waits for every kernel before issuing the next")  # fmt: skip
    soft.add_argument("--optimizer", choices=OPTIMIZER, default="fused",
                      help="fused (apex's FusedAdam, Megatron-LM; the default) or unfused (PyTorch's Adam op by op)")  # fmt: skip
    soft.add_argument("--cross-entropy", choices=CROSS_ENTROPY, default="fp32",
                      help="fp32 (Megatron-LM's passes on fp32 logits; the default) or fused (one kernel, 16-bit logits)")  # fmt: skip
    soft.add_argument("--train-metrics", type=bounded_int(0, 64), default=0, metavar="N",
                      help="training metrics that recompute the loss from the logits after each backward (composer's "
                           "LanguageCrossEntropy and LanguagePerplexity: 2; default 0)")  # fmt: skip
    soft.add_argument("--cp-comm", choices=CP_COMM, default="ring",
                      help="ring (ring attention, exchanges hidden; the default) or allgather (Llama 3: keys and "
                           "values all-gathered before attention, in the critical path)")  # fmt: skip
    soft.add_argument("--no-dp-overlap", action="store_true", help="reduce gradients after the backward")
    soft.add_argument("--no-grad-fusion", action="store_true", help="accumulate weight gradients in a separate kernel")
    soft.add_argument("--grad-accumulation", choices=GRAD_ACCUMULATION, default="add",
                      help="with --no-grad-fusion: add (Megatron-LM; the default) or cast-add (DeepSpeed's BF16 "
                           "optimizer: a cast to a new fp32 tensor, then the add); with --zero 2 or 3: fsdp "
                           "(PyTorch's or fairscale's FSDP: the flat gradient copied from its views, divided before "
                           "and after the reduce-scatter, its shard cast to fp32 and added)")  # fmt: skip
    soft.add_argument("--grad-reduce", choices=GRAD_REDUCE, default="reduce-scatter",
                      help="with --zero 1: reduce-scatter (Megatron-LM; the default) or all-reduce (DeepSpeed's BF16 "
                           "optimizer: every rank gets the whole sum)")  # fmt: skip
    soft.add_argument(
        "--precision",
        choices=tuple(PRECISION),
        default="bf16",
        help="bf16 (18 B a parameter; the default), fp16 (20 B) or fp8 (Transformer Engine's FP8 products, H100)",
    )
    soft.add_argument(
        "--attention",
        choices=ATTENTION,
        default="flash",
        help="fused (flash, the default: FlashAttention-2; triton: a first-generation fused kernel) or unfused",
    )
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument(
        "--sources", action="store_true", help="list every measured rate the step is priced with, and its source"
    )
    p.add_argument("--no-knobs", action="store_true",
                   help="skip re-asking the layout at other interleaving depths, microbatches and recomputation")  # fmt: skip
