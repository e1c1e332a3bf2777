"""Published runs the what-if was not built against: its out-of-sample set, each row as its source gives it.

``tables.py`` holds the rows the what-if's costs were found with (in sample). The rows here came later, from
other teams, frameworks and machines; nothing in ``simulator.cost`` or in the what-if was set by looking at
them. Each row runs the configuration its source publishes. Where a source leaves a knob out, the row takes
a rule stated here before its number was looked at (never a value fitted to the row), and ``band.py`` says how
far the answer moves over that knob's plausible values.

Sources:

- [MT-NLG] Smith et al. 2022, "Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B"
  (arXiv:2201.11990), section 2.4: 105 layers of width 20,480, 128 heads, 2,048 tokens, GPT-2's 50,257-token
  vocabulary padded (50,272 in the released configs); tensor parallelism 8, pipeline 35, batch 1,920, on
  280, 350 and 420 DGX A100 nodes (data parallelism 8, 10 and 12): 60.1, 50.2 and 44.4 seconds an iteration
  (126, 121 and 113 TFLOP/s per GPU). Microbatch 1, full recomputation, DeepSpeed's pipeline engine (1F1B,
  no interleaving), 2021 Megatron kernels (unfused attention, no tensor-parallel overlap, gradients reduced
  after the pipeline's flush): as Narayanan et al. 2021 ran in the same year (``tables.NARAYANAN_2021``).
- [BLOOM] BigScience, bigscience-workshop/bigscience, train/tr11-176B-ml/README.md and tr11-176B-ml.slurm
  (2022): 70 layers of width 14,336, 112 heads, 2,048 tokens, vocabulary padded to 250,880; tensor 4,
  pipeline 12, data 8 on 48 nodes of 8 A100 80GB with four 100 Gb/s Omni-Path ports a node; microbatch 2,
  batch 2,048; bf16 with DeepSpeed's BF16 optimizer (its own ZeRO-1); ``--checkpoint-activations``; the
  embedding counted as a layer when splitting (``--pp-partition-method 'type:transformer|embedding'``: 5
  layers on the first and last stage, 6 on the others); ``CUDA_LAUNCH_BLOCKING=1`` (the slurm script: "do not
  remove or the training will hang"), so the CPU waits for every kernel before issuing the next; DeepSpeed's
  BF16 optimizer from its ``olruwase/bf16-updates`` branch (the README's Packages; the chronicles: commit
  5ea1c60f8 from 2022-04-04), which adds every microbatch's gradients to the fp32 ones through a cast to a new
  fp32 tensor (``grad_accumulation="cast-add"``) and all-reduces the fp32 gradients before each rank updates
  its shard ("ZERO_STAGE=0 # important: bf16 must use z0! it implements its own zero stage 1 equivalent", the
  slurm script; ``_bf16_reduce_grads``, ``grad_reduce="all-reduce"``). Throughput "about 150 TFLOPs" counting the
  recomputation (the README's Throughput section; BigScience's model page, bigscience.notion.site).
- [LLAMA3] The Llama 3 Herd of Models (Grattafiori et al. 2024, arXiv:2407.21783), Table 4 and section 3.3.2:
  405B (126 layers, ``model.MODELS``) on H100 80GB (700 W) with 400 Gb/s per GPU between nodes; tensor 8,
  pipeline 16, data 64 or 128 at 8,192 tokens and 16 M tokens a batch (32 or 16 sequences per data-parallel
  rank), 430 and 400 TFLOP/s per GPU (43% and 41% BF16 MFU); and context 16 at 131,072 tokens, data 8:
  380 (38%). BF16; interleaved 1F1B with one layer fewer on the first and the last stage, so that "the first
  model chunk on the first stage has only the embedding, and the last model chunk on the last stage has only
  output projection and loss calculation": a chunk holds one layer, 8 chunks a rank (the 126 layers and the two
  ends over 16 x 8 chunks); "FSDP ... shards optimizer states and gradients, but for model shards we do not
  reshard after forward" (ZeRO-2: gradients reduce-scattered every microbatch, "in FP32" and accumulated "in
  FP32 ... over multiple micro-batches" (numerical stability) into the fp32 shard, the weights gathered once a
  step); "pre-train Llama 3 on sequences of 8K tokens without activation checkpointing" (no recomputation);
  context parallelism that "first all-gather[s] the key (K) and value (V) tensors" (``cp_comm="allgather"``);
  sequence parallelism (Megatron-style tensor parallelism). Unpublished: the microbatch (rule: 1, the only one
  the sequences per rank allow at 16 microbatches with pp 16).
- [OPT] Zhang et al. 2022, "OPT: Open Pre-trained Transformer Language Models" (arXiv:2205.01068), section 2.4:
  OPT-175B on 992 A100 80GB GPUs, "Fully Sharded Data Parallel with Megatron-LM Tensor Parallelism", fp16
  weights with the fp32 Adam state sharded, "up to 147 TFLOP/s per GPU"; 96 layers of width 12,288, 96 heads,
  2,048 tokens, a 2M-token batch (Table 1). The launcher, facebookresearch/metaseq
  metaseq/launcher/opt_baselines.py and opt_job_constants.py (2022): tensor parallelism 8 (so data parallelism
  124), ``--batch-size`` = 2M tokens / 124 / 2,048 = 8 sequences a rank with ``--update-freq 1`` (microbatch
  8, batch 992), ``--ddp-backend fully_sharded --no-reshard-after-forward`` (weights gathered once a step and
  kept through the backward, gradients reduce-scattered: ZeRO-2's traffic and memory),
  ``--memory-efficient-fp16``, ``--checkpoint-activations --distribute-checkpointed-activations``, dropout
  0.1, ReLU, learned positions, the GPT-2 vocabulary (50,272 padded). 2021 software as for MT-NLG (unfused
  attention, no tensor-parallel overlap, a separate gradient add). Rule for the unpublished count: TFLOP/s
  as Megatron-LM, whose tensor parallelism the run used, counts them (with the recomputation).
- [MEGASCALE] Jiang et al. 2024, "MegaScale: Scaling Large Language Model Training to More Than 10,000 GPUs"
  (NSDI '24, arXiv:2402.15627), Table 2's Megatron-LM rows (MegaScale's own rows run a different model:
  parallel blocks, sliding-window attention, LAMB): a 175B model of 96 layers, width 12,288, 128 heads
  (Table 1), 2,048 tokens and a 64,000-token vocabulary, tensor 8 and pipeline 8 with the interleaved schedule
  at six model chunks a rank (section 6.1), Megatron-LM commit 285068c8, on nodes of 8 Ampere GPUs with eight
  200 Gb/s NICs each (section 3.6, as DGX A100); batch 768 on 256 to 1,024 GPUs and 6,144 on 3,072 to 12,288,
  iteration times 40.0, 21.2, 15.2, 11.9 and 29.02, 14.78, 12.24, 8.57 s. Data parallelism gathers weights and
  reduce-scatters gradients (section 3.2: Megatron-LM's distributed optimizer) without overlap, and the
  pipeline's sends block (overlapping both is MegaScale's, Table 3), as does Megatron-LM's attention
  (FlashAttention-2 is among MegaScale's operators). Rule for what the paper leaves out: Megatron-LM's own
  published setup for this model size (Korthikanti et al. 2022, ``tables.KORTHIKANTI_2022``: sequence
  parallelism, selective recomputation, microbatch 1, bf16).
- [MOSAIC] MosaicML, mosaicml/llm-foundry, scripts/train/benchmarking/README.md ("MPT Training Benchmarks",
  the "A100 80GB" and "H100 80GB BF16" tables): MPT models as the benchmark's yamls (scripts/train/yamls/pretrain/
  mpt-*.yaml, which set neither ``no_bias`` nor ``alibi``) and configuration_mpt.py's defaults build them at
  that commit: biases in every linear layer and norm (``no_bias: False``), learned position embeddings
  (``learned_pos_emb: True``; their add and gradient, one pass over the tokens, are not priced), no ALiBi, no
  dropout, LayerNorm, a GeLU MLP of 4 x the width, tied embeddings, a 50,368-token vocabulary (with the position
  embedding these add up to the table's NumParams exactly, biases included); trained with PyTorch FSDP
  (``FULL_SHARD``: ZeRO-3), bf16 mixed precision, activation checkpointing where the table says so, composer's
  DecoupledAdamW with weight decay 0 and gradient clipping (scripts/train/yamls/pretrain/mpt-*.yaml), and the
  model's default loss, flash-attn's fused cross-entropy on 16-bit logits (``loss_fn: fused_crossentropy``,
  llmfoundry/models/mpt/modeling_mpt.py), beside which the trainer recomputes the loss for its two training
  metrics after every microbatch's backward (modeling_mpt.py: ``LanguageCrossEntropy`` and
  ``LanguagePerplexity``, always in v0.3.0, which the runs installed, and by default at b2a43a147, whose
  ``use_train_metrics`` switch neither the yamls nor the sweep set;
  composer 0.16's ``_train_microbatch`` runs ``_eval_train_metrics`` each microbatch: ``train_metrics=2``,
  ``layer.TRAIN_METRIC``). The rows used here were measured for commit b2a43a147 (October 2023):
  its sweep.sh runs every one on the image ``mosaicml/pytorch:2.1.0_cu121`` (PyTorch 2.1.0, CUDA 12.1) with
  composer 0.16 and submit_benchmarks.py's default ``attn_impl: triton`` (llm-foundry's copy of flash-attn's
  Triton kernel, compiled by ``triton_pre_mlir``, a fork of Triton's pre-MLIR compiler that setup.py installs;
  priced at the share of FlashAttention-2's speed FlashAttention's kernels were measured at on each GPU:
  ``--attention triton``, ``Achieved.first_gen_attention_share``); each
  row's microbatch, gradient accumulation and global batch as published, and the measured tokens per second
  per GPU. Rule for which rows: every row at 2,048 tokens on one node of 8 GPUs in those two tables (the
  network between nodes plays no part, and every model size the tables hold at that length appears).
"""

from __future__ import annotations

from dataclasses import replace

from ...cost.systems import dgx_a100_system, with_network
from .model import Transformer, named_model
from .tables import KORTHIKANTI_2022, NARAYANAN_2021, Row
from .training_setup import TrainingSetup

MT_NLG = "Smith et al. 2022 (MT-NLG), section 2.4"
MOSAIC = "MosaicML llm-foundry benchmarks (FSDP, 8 GPUs)"
BLOOM = "BigScience 2022 (BLOOM), tr11-176B-ml"
LLAMA3 = "Grattafiori et al. 2024 (Llama 3), Table 4"
OPT = "Zhang et al. 2022 (OPT-175B), section 2.4"
MEGASCALE = "Jiang et al. 2024 (MegaScale), Table 2, Megatron-LM"

BLOOM_176B = Transformer(70, 14336, 112, 2048, 250880, alibi=True, name="bloom-176b")

# DeepSpeed's pipeline engine and Megatron-DeepSpeed in 2021-2022: 1F1B, the kernels of Narayanan et al. 2021
DEEPSPEED_2021 = dict(NARAYANAN_2021, schedule="1f1b")


def _mt_nlg() -> list[Row]:
    model = replace(named_model("megatron-530b"), vocab=50257, name="mt-nlg-530b")
    rows = []
    for nodes, dp, seconds in ((280, 8, 60.1), (350, 10, 50.2), (420, 12, 44.4)):
        layout = TrainingSetup(tp=8, pp=35, dp=dp, global_batch=1920, microbatch=1, **DEEPSPEED_2021)
        rows.append(Row(MT_NLG, f"530B on {nodes} nodes (t8 p35 d{dp})", model, layout, seconds, "step_seconds"))
    return rows


def _bloom() -> list[Row]:
    layout = TrainingSetup(
        tp=4, pp=12, dp=8, global_batch=2048, microbatch=2, first_stage_layers=5, last_stage_layers=5, zero=1,
        launch_blocking=True, grad_accumulation="cast-add", grad_reduce="all-reduce",
        **dict(DEEPSPEED_2021, precision="bf16"),
    )  # fmt: skip
    jean_zay = with_network(dgx_a100_system(), nics_per_node=4, nic_gbps=100)
    return [Row(BLOOM, "176B (t4 p12 d8, 4 x 100 Gb/s a node)", BLOOM_176B, layout, 150.0, "tflops_per_gpu", jean_zay)]


def _opt() -> list[Row]:
    model = Transformer(96, 12288, 96, 2048, 50272, name="opt-175b")
    metaseq = dict(NARAYANAN_2021, dp_overlap=True)  # FSDP reduce-scatters each layer's gradients in the backward
    layout = TrainingSetup(tp=8, dp=124, zero=2, microbatch=8, global_batch=992, distribute_saved=True,
                           grad_accumulation="fsdp", **metaseq)  # fmt: skip
    return [Row(OPT, "175B on 992 A100 (t8 d124, FSDP)", model, layout, 147.0, "tflops_per_gpu")]


def _megascale() -> list[Row]:
    model = Transformer(96, 12288, 128, 2048, 64000, name="megascale-175b")
    rows = []
    for batch, gpus, seconds in (
        (768, 256, 40.0), (768, 512, 21.2), (768, 768, 15.2), (768, 1024, 11.9),
        (6144, 3072, 29.02), (6144, 6144, 14.78), (6144, 8192, 12.24), (6144, 12288, 8.57),
    ):  # fmt: skip
        layout = TrainingSetup(
            tp=8, pp=8, dp=gpus // 64, global_batch=batch, microbatch=1, schedule="interleaved-1f1b",
            virtual_stages=6, sequence_parallel=True, recompute="selective", zero=1, **KORTHIKANTI_2022,
        )  # fmt: skip
        rows.append(Row(MEGASCALE, f"175B on {gpus:,} GPUs (t8 p8 d{gpus // 64}, batch {batch})", model, layout,
                        seconds, "step_seconds"))  # fmt: skip
    return rows


def _llama3() -> list[Row]:
    base = named_model("llama3-405b")
    # one layer a chunk: the first chunk only the embedding, the last only the output layer and the loss
    common = dict(tp=8, pp=16, microbatch=1, sequence_parallel=True, zero=2, schedule="interleaved-1f1b",
                  virtual_stages=8, first_stage_layers=0, last_stage_layers=0, recompute="none",
                  cp_comm="allgather")  # fmt: skip
    rows = []
    for gpus, cp, dp, seq, per_rank, tflops in (
        (8192, 1, 64, 8192, 32, 430.0),
        (16384, 1, 128, 8192, 16, 400.0),
        (16384, 16, 8, 131072, 16, 380.0),
    ):
        model = replace(base, seq=seq)
        layout = TrainingSetup(cp=cp, dp=dp, global_batch=dp * per_rank, **common)
        label = f"405B {gpus:,} GPUs (t8 c{cp} p16 d{dp}, {seq // 1024}K)"
        rows.append(Row(LLAMA3, label, model, layout, tflops, "model_tflops_per_gpu", "dgx-h100"))
    return rows


# MPT sizes (layers, width, heads) as llm-foundry's yamls give them; their parameter counts match the
# table's NumParams column to within 2% (the table also counts a learned position embedding)
MPT = {"125m": (12, 768, 12), "350m": (24, 1024, 16), "760m": (24, 1536, 12), "1b": (24, 2048, 16),
       "3b": (32, 2560, 20), "7b": (32, 4096, 32), "13b": (40, 5120, 40), "30b": (48, 7168, 64)}  # fmt: skip

# system, model, microbatch, gradient accumulation, global batch, activation checkpointing, tokens/s per GPU
_MOSAIC = [
    ("dgx-a100", "30b", 3, 21, 504, True, 916),
    ("dgx-a100", "13b", 2, 3, 48, False, 2262),
    ("dgx-a100", "7b", 6, 2, 96, False, 4641),
    ("dgx-a100", "3b", 10, 2, 160, False, 10811),
    ("dgx-a100", "1b", 14, 4, 448, False, 20513),
    ("dgx-a100", "760m", 24, 2, 384, False, 32434),
    ("dgx-a100", "350m", 32, 2, 512, False, 58782),
    ("dgx-a100", "125m", 40, 2, 640, False, 142830),
    ("dgx-a100", "125m", 32, 2, 512, False, 141737),
    ("dgx-h100", "30b", 3, 21, 504, True, 2002),
    ("dgx-h100", "13b", 2, 1, 16, False, 4792),
    ("dgx-h100", "7b", 6, 1, 48, False, 10643),
    ("dgx-h100", "1b", 14, 1, 112, False, 45455),
    ("dgx-h100", "760m", 24, 2, 384, False, 63147),
]


def mpt(size: str, seq: int = 2048) -> Transformer:
    """An MPT model of llm-foundry's benchmarks (see [MOSAIC] above)."""
    layers, hidden, heads = MPT[size]
    return Transformer(layers, hidden, heads, seq, 50368, bias=True, dropout=False, name=f"mpt-{size}")


def _mosaic() -> list[Row]:
    rows = []
    for machine, size, mb, accum, batch, ckpt, tokens in _MOSAIC:
        layout = TrainingSetup(dp=8, zero=3, microbatch=mb, global_batch=batch, recompute="full" if ckpt else "none",
                               optimizer="unfused", cross_entropy="fused", attention="triton",
                               grad_accumulation="fsdp", train_metrics=2)  # fmt: skip
        assert layout.microbatches == accum, (size, machine)  # the table's gradient accumulation
        gpu = "A100" if machine == "dgx-a100" else "H100"
        rows.append(Row(MOSAIC, f"MPT-{size} on 8 {gpu} (mb {mb}, batch {batch})", mpt(size), layout, tokens,
                        "tokens_per_second_per_gpu", machine))  # fmt: skip
    return rows


def outside_rows() -> list[Row]:
    """The out-of-sample rows, source by source."""
    return _mt_nlg() + _bloom() + _opt() + _megascale() + _llama3() + _mosaic()
