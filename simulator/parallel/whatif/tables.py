"""Published training measurements to hold the what-if against: every row's configuration and number, sourced.

Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
(SC'21, arXiv:2104.04473), Table 1: GPT models of 1.7 B to 1 T parameters on up to 3,072 A100s of Selene
(DGX A100 80 GB nodes), weak scaling, "achieved teraFLOP/s per GPU" counted with their formula
96 B s l h^2 (1 + s / 6h + V / 16 l h), which includes full recomputation's extra forward (our
``hardware_tflops_per_gpu``). Hidden sizes, layers, GPUs, batch sizes and throughput: the table as the
NVIDIA/Megatron-LM README showed it (images/cases_april2021.png, commit 306eb24e27, May 2021); the tensor /
pipeline split of the README's "model-parallel size": "for numbers larger than 8, typically tensor parallel of
size 8 was used" (README, commit 2e90a342f5) and the paper's table; attention heads: the paper's table.
Vocabulary 51,200 and 2,048 tokens (README). Not in the table but in the paper's artifact, NVIDIA/Megatron-LM
examples/sc21/run_table_1.sh (commit 79a3bb6bf2): each row's microbatch size (16 for 1.7 B to 7.5 B, 8, 4, 2,
2, then 1) and the interleaved schedule's layers per model chunk for 76 B to 530 B (3, 2, 2 and 3 chunks per
rank; the 1 T row runs plain 1F1B), and which data-parallel implementation each row used (``DDP``).

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (arXiv:2205.05198),
Table 5: iteration time of 22 B to 1 T models on Selene, with full recomputation and with sequence
parallelism plus selective recomputation. Models and layouts: the paper's Table 3; microbatch sizes (4 for
22 B, else 1) and interleaving (3 model chunks per rank for 175 B and 530 B): calculon-ai/calculon,
validation/seqsel/tab5/*.json (Isaev et al. 2023, who validated their model on this table).

Software settings each row runs under are what Megatron-LM did at the time (see ``layout.py`` for the commits):
the 2021 runs fp16, full recomputation, unfused attention, no overlap of tensor-parallel communication, no
fused gradient accumulation, the data-parallel all-reduce after the backward (overlapped with it where the
script chose PyTorch's DDP); the 2022 runs add gradient
accumulation fusion and the backward's asynchronous tensor-parallel collectives.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...cost.systems import System
from .model import Transformer, named_model
from .training_setup import TrainingSetup

NARAYANAN = "Narayanan et al. 2021, Table 1"
KORTHIKANTI = "Korthikanti et al. 2022, Table 5"
KORTHIKANTI_FIGURE_1 = "Korthikanti et al. 2022, Figure 1"
KORTHIKANTI_TABLE_4 = "Korthikanti et al. 2022, Table 4"


@dataclass(frozen=True)
class Row:
    """One published measurement: what ran, on what, and the number (``metric``: what it measures)."""

    table: str
    label: str
    model: Transformer
    layout: TrainingSetup
    published: float
    metric: str  # "tflops_per_gpu" (with recomputation, as Narayanan et al. count), "model_tflops_per_gpu"
    # (without: the MFU count), "tokens_per_second_per_gpu" or "step_seconds"
    system: str | System = "dgx-a100"


NARAYANAN_2021 = dict(
    recompute="full", attention="unfused", tp_overlap="none", dp_overlap=False, grad_fusion=False, precision="fp16"
)
KORTHIKANTI_2022 = dict(
    attention="unfused", tp_overlap="backward", dp_overlap=False, grad_fusion=True, precision="bf16"
)

# name, tp, pp, GPUs, batch, microbatch, model chunks per rank, data-parallel implementation, published TFLOP/s
# per GPU. The scripts ran PyTorch's DistributedDataParallel (``--DDP-impl torch``: gradients reduced in buckets
# during the backward) up to 18B and Megatron-LM's own (``local``: reduced after the backward) from 39B.
_TABLE_1 = [
    ("megatron-1.7b", 1, 1, 32, 512, 16, 1, "torch", 137),
    ("megatron-3.6b", 2, 1, 64, 512, 16, 1, "torch", 138),
    ("megatron-7.5b", 4, 1, 128, 512, 16, 1, "torch", 142),
    ("megatron-18b", 8, 1, 256, 1024, 8, 1, "torch", 135),
    ("megatron-39b", 8, 2, 512, 1536, 4, 1, "local", 138),
    ("megatron-76b", 8, 4, 1024, 1792, 2, 3, "local", 140),
    ("megatron-145b", 8, 8, 1536, 2304, 2, 2, "local", 148),
    ("megatron-310b", 8, 16, 1920, 2160, 1, 2, "local", 155),
    ("megatron-530b", 8, 35, 2520, 2520, 1, 3, "local", 163),
    ("megatron-1t", 8, 64, 3072, 3072, 1, 1, "local", 163),
]

# name, tp, pp, GPUs, batch, microbatch, model chunks per rank, seconds (full recomputation, sequence
# parallelism + selective recomputation)
_TABLE_5 = [
    ("megatron-22b", 8, 1, 8, 4, 4, 1, 1.42, 1.10),
    ("gpt3-175b", 8, 8, 64, 64, 1, 3, 18.13, 13.75),
    ("megatron-530b", 8, 35, 280, 280, 1, 3, 49.05, 37.83),
    ("megatron-1t", 8, 64, 512, 512, 1, 1, 94.42, 71.49),
]


def _narayanan() -> list[Row]:
    rows = []
    for name, tp, pp, gpus, batch, mb, chunks, ddp, tflops in _TABLE_1:
        looped = dict(schedule="interleaved-1f1b", virtual_stages=chunks) if chunks > 1 else {}
        settings = dict(NARAYANAN_2021, dp_overlap=ddp == "torch")
        layout = TrainingSetup(
            tp=tp, pp=pp, dp=gpus // (tp * pp), global_batch=batch, microbatch=mb, **looped, **settings
        )
        rows.append(Row(NARAYANAN, f"{name[9:].upper()} (t{tp} p{pp} d{layout.dp})", named_model(name), layout, tflops,
                        "tflops_per_gpu"))  # fmt: skip
    return rows


def _korthikanti() -> list[Row]:
    rows = []
    for name, tp, pp, gpus, batch, mb, chunks, full, seqsel in _TABLE_5:
        model = replace(named_model(name), vocab=51200)  # Megatron-LM pads GPT-3's 50,257 tokens to 51,200
        looped = dict(schedule="interleaved-1f1b", virtual_stages=chunks) if chunks > 1 else {}
        common = dict(
            tp=tp, pp=pp, dp=gpus // (tp * pp), global_batch=batch, microbatch=mb, **looped, **KORTHIKANTI_2022
        )
        short = name.split("-")[1].upper()
        rows.append(Row(KORTHIKANTI, f"{short} full recompute", model, TrainingSetup(recompute="full", **common), full,
                        "step_seconds"))  # fmt: skip
        rows.append(Row(KORTHIKANTI, f"{short} seq. par. + selective", model,
                        TrainingSetup(recompute="selective", sequence_parallel=True, **common), seqsel, "step_seconds"))  # fmt: skip
    return rows


# Korthikanti et al. 2022, Figure 1: activation memory of the first pipeline rank's GPUs (GiB) without
# recomputation and with sequence parallelism + selective recomputation, as calculon-ai/calculon transcribed
# the figure (calculon/llm/validation.py, seqsel_fig1), for the Table 5 layouts
FIGURE_1 = {"22B": (59.25, 9.5625), "175B": (66.84375, 12.3515625), "530B": (114.0234375, 23.076171875),
            "1T": (131.25, 26.5625)}  # fmt: skip


# Korthikanti et al. 2022, Table 4: milliseconds for the forward and the backward pass of one transformer layer
# of the 22B model (Table 5's layout: tensor parallelism 8, microbatches of 4), per experiment: (recompute,
# sequence parallelism, forward, backward). Measured, like Table 5, on Selene.
TABLE_4 = [
    ("none", False, 7.7, 11.9),
    ("none", True, 7.2, 11.8),
    ("full", False, 7.7, 19.5),
    ("selective", False, 7.7, 13.2),
    ("selective", True, 7.2, 13.1),
]


def table_4_row() -> Row:
    """The row whose model and layout Table 4 measured a layer of: Table 5's 22B with full recomputation."""
    return _korthikanti()[0]


def published_rows() -> list[Row]:
    """Every row of both tables, in the tables' order."""
    return _narayanan() + _korthikanti()
