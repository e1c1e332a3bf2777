"""Memory per device by kind: weights, gradients, optimizer state, activations, against its capacity.

Weights, gradients and optimizer state take ``TrainingSetup.bytes_per_param`` bytes a parameter (18 for bf16 weights
with fp32 main gradients and Adam's fp32 weights, m and v; 20 for fp16), split as Megatron-LM's
distributed-optimizer guide counts them; ZeRO-1 (the distributed optimizer) shards the optimizer state over
the data-parallel (and context-parallel) ranks, ZeRO-2 the gradients too, ZeRO-3 the weights too, which under
PyTorch's FSDP (``grad_accumulation="fsdp"``) are the optimizer's fp32 weights: 16 bytes a sharded parameter,
not DeepSpeed's 18.

Activations per layer and microbatch are the tensors the backward reads (Korthikanti et al. 2022, section 4,
whose Table 2 this reproduces for GPT: s b h (34 + 5 a s / h) bytes without parallelism, s b h (10 + 24 / t +
5 a s / (h t)) under tensor parallelism, 34 s b h / t with sequence parallelism and selective recomputation,
2 s b h under full recomputation), generalised to grouped-query attention, SwiGLU and mixtures of experts;
under torchtitan's op-level policy a layer keeps what that policy saves (``op_kept``). A
fused attention kernel keeps no score matrix, only its fp32 softmax statistics and its output, and that output is
the projection's input: flash-attn saves ``out_padded`` and returns a view of it (flash_attn_interface.py,
``FlashAttnFunc``), and Megatron-LM hands that view to ``linear_proj`` (megatron/core/transformer/attention.py),
so the two are one storage, counted once (until 2026-12-06 they were counted twice: 32 MiB a layer and
microbatch on Llama 3 405B's layouts).
How many microbatches each rank holds at once comes from walking its schedule: a forward adds its chunk's
activations, a backward frees them (a split backward frees all but the weight-gradient products' inputs
at I, and those at W). Sharded gradients (ZeRO-2 and -3) add, while a layer's backward ends, that layer's whole
gradient until it is reduce-scattered (``reduced_gradient``). Under FSDP a step of one microbatch holds its sharded
gradients only once its backward has made them, when its activations are gone: the fuller of the two moments counts.

Besides the tensors a device holds what the framework keeps outside PyTorch's allocator, counted from
measurements (``framework_bytes``): the CUDA context with lazy module loading, 287,047,680 bytes
(pytorch/pytorch PR 86509, PyTorch 1.13, against 666,632,192 loading every module), and NCCL's buffers for
each communicator the rank joins, 544 MB for a two-rank group and 688 MB for a larger one (NVIDIA/nccl issue
964: 4 A100s over NVLink, one all-reduce each; NCCL's maintainer, issues 864 and 986: the buffers grow with the
channels, H100's NVLink uses more, and past two nodes a communicator's needs stop growing; groups across nodes
were not measured and take the same sizes). The caching
allocator's fragmentation is not counted: no measurement for these workloads was found.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..schedules import B, F, I, Schedule, W
from .layer import PerRank, layer_params_per_rank
from .model import Transformer
from .training_setup import FUSED_ATTENTION, TrainingSetup

GIB = 2**30
CUDA_CONTEXT = 287_047_680.0  # bytes, lazy module loading (pytorch/pytorch PR 86509)
NCCL_PAIR, NCCL_GROUP = 544e6, 688e6  # bytes a communicator of two ranks, of more (NVIDIA/nccl issue 964)


@dataclass(frozen=True)
class Memory:
    """Bytes one device holds at its fullest, by kind."""

    params: float
    grads: float
    optimizer: float
    activations: float
    capacity: float
    framework: float = 0.0  # the CUDA context and NCCL's buffers, outside the tensors (``framework_bytes``)

    @property
    def total(self) -> float:
        """The tensors' bytes."""
        return self.params + self.grads + self.optimizer + self.activations

    @property
    def needed(self) -> float:
        """The tensors and what the framework keeps besides them."""
        return self.total + self.framework

    @property
    def over(self) -> float:
        """Bytes beyond the capacity (0 when it fits)."""
        return max(0.0, self.needed - self.capacity)

    def gib(self) -> dict[str, float]:
        kinds = ("params", "grads", "optimizer", "activations", "total", "framework", "needed", "capacity")
        return {k: round(getattr(self, k) / GIB, 3) for k in kinds}


def framework_bytes(layout: TrainingSetup) -> float:
    """The CUDA context and one NCCL communicator for each parallel group of more than one rank (tensor,
    context, pipeline, data and expert parallelism, and an expert's replicas), at the sizes measured (see the
    module docstring)."""
    groups = (layout.tp, layout.cp, layout.pp, layout.dp, layout.ep, layout.dp // layout.ep if layout.ep > 1 else 1)
    return CUDA_CONTEXT + sum(NCCL_PAIR if n == 2 else NCCL_GROUP for n in groups if n > 1)


def layer_activations(model: Transformer, layout: TrainingSetup) -> tuple[float, float]:
    """(bytes one layer keeps for one microbatch's backward, the part its weight-gradient products read)."""
    z = PerRank.of(model, layout)
    T, Tn, h, e = z.T, z.Tn, z.h, z.e
    s, b, A = model.seq, layout.microbatch, z.A
    x_in = e * (Tn if layout.sequence_parallel else T) * h  # a column-parallel product's input, as kept
    mask = Tn * h if model.dropout else 0.0
    routed = model.top_k if model.experts else 1
    mlp_in = e * T * routed * z.f
    gemm_inputs = 2 * x_in + e * T * A * z.d + mlp_in  # QKV, projection, FC1 and FC2 inputs
    if layout.recompute == "full":  # only the layer's input, split over tp when distributed
        kept = e * Tn * h / (layout.tp if layout.distribute_saved and not layout.sequence_parallel else 1)
        return kept, kept
    if layout.recompute == "op":  # torchtitan's policy (price.op_recomputed): what it saves, and the layer input
        kept = op_kept(model, layout)
        return kept, kept
    qkv = e * T * (A + 2 * z.G) * z.d
    if layout.attention in FUSED_ATTENTION:
        # the softmax statistics (fp32); the output the kernel saves is the projection's input, one storage, counted
        # in gemm_inputs (see the module docstring)
        core = 4 * b * A * s / layout.cp
    elif layout.recompute == "selective":
        core = 0.0
    else:
        core = b * A * s * s * ((2 + 1 + 2) if model.dropout else 2)  # softmax output, dropout mask and output
    act = mlp_in * (2 if model.mlp == "swiglu" else 1)
    total = 2 * e * Tn * h + qkv + core + 2 * mask + gemm_inputs + act
    return total, gemm_inputs


def op_kept(model: Transformer, layout: TrainingSetup) -> float:
    """Bytes one layer keeps for one microbatch under torchtitan's op-level selective checkpointing: the block's
    input (the checkpoint's own), the outputs its policy saves (wq's and wv's; the attention kernel's output and
    fp32 statistics; w1's, and with SwiGLU w2's; under sequence parallelism the two reduce-scatters')."""
    z = PerRank.of(model, layout)
    T, Tn, e = z.T, z.Tn, z.e
    saved = T * (z.A * z.d + z.G * z.d + z.A * z.d + z.f) + (T * z.h if model.mlp == "swiglu" else 0.0)
    scattered = 2 * Tn * z.h if layout.sequence_parallel else 0.0
    return e * (Tn * z.h + saved + scattered) + 4 * layout.microbatch * z.A * model.seq / layout.cp


def chunk_activations(model: Transformer, layout: TrainingSetup) -> list[tuple[float, float]]:
    """Per model chunk: (bytes, weight-gradient part) it keeps per microbatch."""
    total, kept = layer_activations(model, layout)
    return [(n * total, n * kept) for n in layout.chunk_layers(model)]


def peak_activations(schedule: Schedule, rank: int, chunks: list[tuple[float, float]]) -> float:
    """The most activation bytes ``rank`` holds at once running ``schedule`` (see the module docstring)."""
    held = peak = 0.0
    for a in schedule.actions[rank]:
        total, kept = chunks[a.stage]
        if a.kind == F:
            held += total
        elif a.kind == B:
            held -= total
        elif a.kind == I:
            held -= total - kept
        elif a.kind == W:
            held -= kept
        peak = max(peak, held)
    return peak


def transient(model: Transformer, layout: TrainingSetup, last: bool) -> float:
    """Bytes alive only while one microbatch is processed, beyond what the schedule holds: on the last stage the
    logits (bf16, then fp32 for the cross-entropy); and while a layer's backward runs, the larger of what it
    recomputes and what a sharded gradient needs (``reduced_gradient``). Recomputation holds one layer's
    activations under full recomputation (but its input, which the schedule holds already; until 2026-12-06 it
    was counted twice), and under selective recomputation its attention core's score-matrix tensors, which a
    fused kernel never keeps (so with one nothing is recomputed); both are freed by the time the layer's whole
    gradient exists, hence the larger of the two, not their sum."""
    z = PerRank.of(model, layout)
    extra = 6 * z.T * model.padded_vocab(layout.tp) / layout.tp if last else 0.0
    recomputed = 0.0
    if layout.recompute == "full":
        # the recomputed forward keeps what a layer keeps without recomputation, its input among them: the input
        # kept for it, already held by the schedule, unless split over tp (then the all-gather makes a whole copy)
        split = layout.distribute_saved and not layout.sequence_parallel and layout.tp > 1
        kept = 0.0 if split else layer_activations(model, layout)[0]
        recomputed = layer_activations(model, replace(layout, recompute="none"))[0] - kept
    elif layout.recompute == "op":  # what it re-makes, at most what the layer keeps without recomputation
        recomputed = max(0.0, layer_activations(model, replace(layout, recompute="none"))[0] - op_kept(model, layout))
    elif layout.recompute == "selective" and layout.attention not in FUSED_ATTENTION:
        scores = layout.microbatch * z.A * model.seq * model.seq
        recomputed = scores * ((2 + 1 + 2) if model.dropout else 2)  # softmax output, dropout mask and output
    return extra + max(recomputed, reduced_gradient(model, layout))


def reduced_gradient(model: Transformer, layout: TrainingSetup) -> float:
    """What sharded gradients (ZeRO-2 and -3) hold beyond the schedule's activations: one layer's whole gradient
    while it is reduce-scattered, less that layer's own activations, which its backward has freed by then.

    FSDP reduce-scatters a unit's gradient once the unit's backward has made all of it (PyTorch's FSDP: the
    post-backward hook of a ``FlatParameter``, ``_reduce_grad``; FSDP2: ``post_backward`` of the module's group),
    and the frameworks that train these models wrap one transformer block a unit (torchtitan's
    ``apply_fsdp``, llm-foundry's ``fsdp_wrap_fn``). The gradient is in the weights' 16 bits where FSDP reduces
    in them (``grad_accumulation="fsdp"``, MosaicML's DEFAULT mode) and in fp32 otherwise (Llama 3 section
    3.3.2: "reduce-scatter gradients in FP32"; the fp32 product of ``grad_fusion``). The schedule's other
    microbatches stay held throughout, so this is a floor: a reduce-scatter that outlasts the next forward keeps
    the gradient while that forward's activations grow (not counted)."""
    if layout.zero < 2:
        return 0.0  # the gradients live in the whole main-gradient buffer, counted with the gradients
    wb, gb, _ = layout.bytes_per_param
    per_param = wb if layout.grad_accumulation == "fsdp" else gb
    return max(0.0, per_param * layer_params_per_rank(model, layout) - layer_activations(model, layout)[0])


def rank_params(
    model: Transformer, layout: TrainingSetup, rank: int, placement: tuple[int, ...]
) -> tuple[float, float]:
    """(dense, expert) parameters pipeline rank ``rank`` holds, per tensor-parallel rank."""
    stages = len(placement)
    chunks = [s for s in range(stages) if placement[s] == rank]
    counts = layout.chunk_layers(model)
    layers = sum(counts[s] for s in chunks)
    experts = model.experts * model.mlp_params / layout.ep / layout.tp if model.experts else 0.0
    dense = layers * (layer_params_per_rank(model, layout) - experts)
    embedding = model.padded_vocab(layout.tp) * model.hidden / layout.tp
    if 0 in chunks:
        dense += embedding
    if stages - 1 in chunks:
        dense += model.norm_params + (embedding if layout.pp > 1 or not model.tied else 0)
    return dense, layers * experts


def device_memory(model: Transformer, layout: TrainingSetup, schedule: Schedule, rank: int, capacity: float) -> Memory:
    """What pipeline rank ``rank``'s devices hold at their fullest (every replica and tp rank alike)."""
    dense, experts = rank_params(model, layout, rank, schedule.placement)
    wb, gb, ob = layout.bytes_per_param
    shards = layout.dp * layout.cp
    expert_shards = max(1, shards // layout.ep)
    params = dense + experts
    sharded = dense / shards + experts / expert_shards  # one data-parallel rank's share
    weights = wb * (sharded if layout.zero >= 3 else params)
    grads = gb * (sharded if layout.zero >= 2 else params)
    optimizer = ob * (sharded if layout.zero >= 1 else params)
    if layout.zero >= 3 and layout.grad_accumulation == "fsdp":
        # FSDP keeps no 16-bit shard: its sharded weights are the fp32 ones the optimizer steps (counted there),
        # cast to 16 bits into a shard freed once gathered (FlatParamHandle.post_unshard frees _mp_shard)
        weights = 0.0
    if layout.zero >= 3:  # a layer's gathered weights while it runs, and the next one's prefetched
        weights += 2 * wb * layer_params_per_rank(model, layout)
    last = schedule.placement[-1] == rank
    acts = peak_activations(schedule, rank, chunk_activations(model, layout)) + transient(model, layout, last)
    if layout.zero >= 2 and layout.grad_accumulation == "fsdp" and layout.microbatches == 1:
        # FSDP frees the sharded gradients between steps (zero_grad sets them to None, PyTorch's default since 2.0)
        # and makes them layer by layer in the step's one backward: the activations' peak, at its start, holds none
        # of them, its end all of them and no activations. The fullest of the two moments.
        grads, acts = (0.0, acts) if acts >= grads else (grads, 0.0)
    return Memory(weights, grads, optimizer, acts, capacity, framework_bytes(layout))
