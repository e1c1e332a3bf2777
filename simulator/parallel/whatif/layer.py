"""The ops of one transformer layer on one tensor-parallel rank, for one microbatch, as Megatron-LM runs them.

Each ``Op`` is a matrix product (its m, n, k and batch), a fused attention kernel (its FLOPs), an element-wise
kernel (the bytes it reads and writes) or a collective (its kind, bytes, group, and the product whose time
can hide it). Phases: ``F`` the forward, ``I`` the backward's input gradients, ``W`` its weight gradients.

Per rank, with T = b s / cp tokens, A = heads / tp query heads, G = key/value heads / tp (at least 1),
d the head dimension, f the MLP width / tp, and T' = T / tp under sequence parallelism (else T):

- forward: norm (T' h), [all-gather], QKV product (T x h -> (A + 2G) d), attention core (scores, softmax,
  dropout, context: Megatron-LM's kernels; or one flash kernel), projection ((A d) -> h), all-reduce (or
  reduce-scatter), bias-dropout-residual (T' h), norm, [all-gather], FC1 (h -> f, twice for SwiGLU's gate
  and up), activation, FC2 (f -> h), all-reduce (or reduce-scatter), bias-dropout-residual;
- backward: each product's input gradient (I) and weight gradient (W, the same FLOPs), the element-wise
  kernels' backward, the attention core's four products, and the collectives Megatron-LM's conjugate
  operators imply (Shoeybi et al. 2019 "f" and "g"; Korthikanti et al. 2022, section 4.2.2 for sequence
  parallelism, which re-gathers a column-parallel layer's input for its weight gradient).

Element-wise bytes: a norm reads and writes its rows (2 + 2 bytes an element, its backward ``NORM_BACK``: two
passes and the residual's gradient added); a bias's gradient reads its output's gradient once (2); bias-dropout-residual reads two inputs and writes the output and a
1-byte mask (its backward 2 + 1 + 2); the scaled-masked softmax 2 + 2 and its backward 2 + 2 + 2; GeLU 2 + 2
(backward 2 + 2 + 2); SwiGLU 4 + 2 (backward 4 + 2 + 4). Copies Megatron-LM's code makes (megatron/model/
transformer.py and gpt_model.py, April 2021 and June 2022 alike): the attention context permuted to [s, b, h]
(``.permute(2, 0, 1, 3).contiguous()``: 2 + 2); in the backward, autograd's concatenation of the query, key and
value gradients, which ``torch.split`` made views of (2 + 2); the cross-entropy on fp32 logits (``CROSS_ENTROPY``),
or one fused kernel on the 16-bit logits (``FUSED_CROSS_ENTROPY``).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from .model import Transformer
from .training_setup import FUSED_ATTENTION, TrainingSetup

COMM_KINDS = ("tp", "sp_cp", "ep")  # communication inside a layer; pp and dp are the step's
# FlashAttention's first-generation kernels run at the share of FlashAttention-2's speed that the FlashAttention-2
# release measured for FlashAttention's CUDA kernels on each GPU, by head dimension and sequence length
# (``Achieved.first_gen_attention_share``, [FA2-RELEASE] in simulator/cost/systems.py). flash-attn's Triton kernel,
# which llm-foundry copies (flash_attn/flash_attn_triton.py, v1.0.9), says of itself that its forward and backward
# together are "slightly slower" than those CUDA kernels, llm-foundry that it is "slightly faster". On H100
# llm-foundry's copy ran on a pre-MLIR Triton without Hopper instructions (``triton_pre_mlir``), as FlashAttention's
# CUDA kernels and FlashAttention-2 run Ampere's: no H100 measurement of the Triton kernel itself was found.


def kernel_head_dim(d: int, attention: str) -> int:
    """The head dimension a fused attention kernel computes with for heads of ``d``: its tiles hold a padded
    head. flash-attn's Triton kernel (and llm-foundry's copy) rounds up to a power of two
    (``BLOCK_HEADDIM = max(triton.next_power_of_2(d), 16)``); FlashAttention-2 to a multiple of 32 up to 192,
    else 256 (``head_size_rounded``, csrc/flash_attn/flash_api.cpp), the head sizes its kernels are built for."""
    if attention == "triton":
        return max(16, 1 << max(0, math.ceil(math.log2(d))))
    return -(-d // 32) * 32 if d <= 192 else 256


class Op(NamedTuple):
    """One kernel or collective (see the module docstring)."""

    name: str
    phase: str  # F, I or W
    kind: str  # matmul, attention, memory, or a communication kind: tp, sp_cp, ep
    flops: float = 0.0
    nbytes: float = 0.0  # memory traffic, or a collective's size (nccl-tests' "size": the whole buffer)
    shape: tuple[float, float, float, float] = (0, 0, 0, 0)  # m, n, k, batch of a product
    collective: str = ""  # all_reduce, all_gather, reduce_scatter, all_to_all, or p2p (a ring of sends)
    ranks: int = 1
    per_node: int = 1
    hide: str = ""  # the product whose time can hide this collective
    overlap: str = ""  # which tp_overlap setting lets it: "backward", "full", or "always"
    core: bool = False  # part of the attention core (what selective recomputation recomputes)
    causal_seq: float = 0.0  # a causal flash kernel's masked blocks' sequence length
    causal_part: float = 1.0  # the share of its FLOPs in masked blocks
    rate_share: float = 1.0  # a fused attention kernel's share of the measured rate its padded head leaves it
    first_gen_head_dim: int = 0  # a first-generation fused kernel's head dimension (0: FlashAttention-2's)


def matmul(name: str, phase: str, m: float, n: float, k: float, batch: float = 1, core: bool = False) -> Op:
    return Op(name, phase, "matmul", 2.0 * m * n * k * batch, shape=(m, n, k, batch), core=core)


def memory(name: str, phase: str, nbytes: float, core: bool = False) -> Op:
    return Op(name, phase, "memory", nbytes=nbytes, core=core)


class PerRank(NamedTuple):
    """A layer's per-rank sizes (see the module docstring)."""

    T: float  # tokens of one microbatch on this rank (b s / cp)
    Tn: float  # tokens the norms and dropouts see (T / tp under sequence parallelism)
    h: int
    A: float
    G: float
    d: int
    f: float
    e: int  # bytes an element

    @classmethod
    def of(cls, model: Transformer, layout: TrainingSetup) -> PerRank:
        t = layout.tp
        T = layout.microbatch * model.seq / layout.cp
        return cls(
            T, T / t if layout.sequence_parallel else T, model.hidden, model.heads / t, max(model.kv / t, 1.0),
            model.head_dim, model.inner / t, model.itemsize,
        )  # fmt: skip


# Bytes per element of a norm's backward. Apex's fused LayerNorm and RMSNorm (``HostLayerNormGradient``,
# apex/csrc/layer_norm_cuda_kernel.cu) and PyTorch's own (``LayerNormBackwardKernelImpl``) run two kernels over
# the rows: one reads the input and the output gradient for the weight's (and bias's) gradient (2 + 2), the
# other reads them again and writes the input gradient (2 + 2 + 2); the residual's gradient is added in another
# pass (2 + 2 + 2).
NORM_BACK = (2 + 2) + (2 + 2 + 2) + (2 + 2 + 2)

# Bytes per logit of Megatron-LM's vocabulary-parallel cross-entropy (megatron/mpu/cross_entropy.py) on fp32
# logits (``output.float()``, gpt_model.py): forward the cast 2 + 4, max 4, subtract 4 + 4, exp 4 + 4, sum 4,
# divide 4 + 4; backward the multiply by the loss gradient 4 + 4 and the cast back 4 + 2.
CROSS_ENTROPY = (2 + 4) + 4 + (4 + 4) + (4 + 4) + 4 + (4 + 4), (4 + 4) + (4 + 2)
# The same per logit for a fused kernel on the 16-bit logits (flash-attn's xentropy, csrc/xentropy/
# xentropy_kernel.cu, llm-foundry's default ``loss_fn: fused_crossentropy``): the forward reads them twice (the
# max with the sum, then the sum of exponentials) and writes a value per token; the backward reads them once and
# writes their gradient.
FUSED_CROSS_ENTROPY = (2 + 2), (2 + 2)

# Bytes per logit of one training metric that recomputes the loss after the backward (composer 0.16's
# ``_eval_train_metrics``, every microbatch, under the run's autocast; ``LanguageCrossEntropy.update`` calls
# ``torch.nn.CrossEntropyLoss`` on the 16-bit logits): PyTorch's cross-entropy takes ``log_softmax(x, dim,
# x.scalar_type())`` (aten/src/ATen/native/LossNLL.cpp), which autocast leaves in 16 bits since a dtype is given
# (autocast_mode.h, ``set_opt_dtype``); a row of 50k logits does not fit the kernel's shared memory, so
# ``cunn_SoftMaxForward`` (aten/src/ATen/native/cuda/SoftMax.cu) reads it for the maximum, again for the sum of
# exponentials and again to write the result (2 + 2 + 2 + 2); autocast then casts that to fp32 for ``nll_loss``,
# an fp32 op (2 + 4), which reads one value a row.
TRAIN_METRIC = (2 + 2 + 2 + 2) + (2 + 4)

# PyTorch's FSDP (torch/distributed/fsdp, 2.0-2.1: ``_post_backward_hook`` and ``default_hooks.
# reduce_scatter_hook``) and fairscale's (fully_sharded_data_parallel.py: ``_post_backward_hook`` and
# ``_post_reduction_hook``) keep no main gradient. Every microbatch, for each unit's flat parameter: autograd
# builds its gradient from the gradients of the views the layer used (the backward of ``split``: a
# concatenation, 2 + 2 bytes a parameter); the hook divides it in place by the pre-divide factor (2 + 2) and
# reduce-scatters it; the shard is divided by the post-divide factor (2 + 2), cast to the fp32 parameter's type
# (2 + 4) and added to the saved shard from the second microbatch on (4 + 4 + 4).


def fsdp_divide_factors(world: int) -> tuple[int, float]:
    """FSDP's (pre, post) gradient divide factors over ``world`` ranks, as ``_get_gradient_predivide_factor``
    computes them (PyTorch and fairscale alike): pre doubles while it divides world and stays below world / pre."""
    pre = 1
    while world % pre == 0 and world / pre > pre:
        pre *= 2
    return pre, world / pre


def fsdp_grad_ops(params: float, layout: TrainingSetup, itemsize: int) -> list[Op]:
    """The passes FSDP makes over ``params`` parameters' gradients every microbatch (see above)."""
    world = layout.dp * layout.cp
    if layout.grad_accumulation != "fsdp" or world == 1:
        return []
    pre, post = fsdp_divide_factors(world)
    gb, shard, m = layout.bytes_per_param[1], params / world, layout.microbatches
    e = itemsize
    ops = [memory("fsdp flat grad", "W", params * (e + e))]
    if pre > 1:
        ops.append(memory("fsdp grad pre-divide", "W", params * (e + e)))
    if post > 1:
        ops.append(memory("fsdp shard post-divide", "W", shard * (e + e)))
    if gb != e:
        ops.append(memory("fsdp shard cast", "W", shard * (e + gb)))
    ops.append(memory("fsdp shard accumulate", "W", shard * 3 * gb * (m - 1) / m))
    return ops


def tp_collective(
    layout: TrainingSetup, name: str, phase: str, collective: str, nbytes: float, hide: str, overlap: str
):
    """A tensor-parallel collective: an all-reduce is "tp", sequence parallelism's gathers and scatters "sp_cp"."""
    kind = "tp" if collective == "all_reduce" else "sp_cp"
    t = layout.tp
    return Op(name, phase, kind, nbytes=nbytes, collective=collective, ranks=t, per_node=layout.per_node(1, t),
              hide=hide, overlap=overlap)  # fmt: skip


def layer_ops(model: Transformer, layout: TrainingSetup) -> list[Op]:
    """Every op of one layer for one microbatch on one rank, forward then backward (see the module docstring)."""
    z = PerRank.of(model, layout)
    T, Tn, h, e = z.T, z.Tn, z.h, z.e
    sp = layout.sequence_parallel
    full = T * h * e  # an activation's bytes over the whole sequence chunk
    ops: list[Op] = []

    def gather(name: str, phase: str, hide: str, overlap: str) -> None:
        if sp:
            ops.append(tp_collective(layout, name, phase, "all_gather", full, hide, overlap))

    def reduce(name: str, phase: str, hide: str, overlap: str) -> None:
        if layout.tp > 1:
            ops.append(
                tp_collective(layout, name, phase, "reduce_scatter" if sp else "all_reduce", full, hide, overlap)
            )

    drop = (2 + 2 + 2 + 1) if model.dropout else (2 + 2 + 2)
    qkv_n = (z.A + 2 * z.G) * z.d
    ffn_n = z.f * (2 if model.mlp == "swiglu" else 1)
    act = (4 + 2) if model.mlp == "swiglu" else (2 + 2)
    act_back = (4 + 2 + 4) if model.mlp == "swiglu" else (2 + 2 + 2)
    # ---- forward
    ops.append(memory("norm1", "F", Tn * h * 4))
    gather("gather qkv input", "F", "qkv", "full")
    ops.append(matmul("qkv", "F", T, qkv_n, h))
    ops += attention_ops(model, layout, z, "F")
    ops.append(matmul("proj", "F", T, h, z.A * z.d))
    reduce("reduce proj", "F", "proj", "full")
    ops.append(memory("dropout-residual1", "F", Tn * h * drop))
    ops.append(memory("norm2", "F", Tn * h * 4))
    gather("gather fc1 input", "F", "fc1", "full")
    ops += mlp_ops(model, layout, z, "F", ffn_n, act)
    reduce("reduce fc2", "F", "fc2", "full")
    ops.append(memory("dropout-residual2", "F", Tn * h * drop))
    # ---- backward, in reverse
    ops.append(memory("dropout-residual2 back", "I", Tn * h * (5 if model.dropout else 0)))
    gather("gather fc2 output grad", "I", "fc2 dgrad", "full")  # the backward of a reduce-scatter
    ops += mlp_ops(model, layout, z, "I", ffn_n, act_back)
    gather("re-gather fc1 input", "I", "fc1 dgrad", "backward")  # for the weight gradient
    reduce("reduce fc1 input grad", "I", "fc1 wgrad", "backward")
    ops.append(memory("norm2 back", "I", Tn * h * NORM_BACK))
    ops.append(memory("dropout-residual1 back", "I", Tn * h * (5 if model.dropout else 0)))
    gather("gather proj output grad", "I", "proj dgrad", "full")
    ops.append(matmul("proj dgrad", "I", T, z.A * z.d, h))
    ops += attention_ops(model, layout, z, "I")
    ops.append(memory("qkv grad concat", "I", T * qkv_n * 4))  # the split's backward: one tensor again
    ops.append(matmul("qkv dgrad", "I", T, h, qkv_n))
    gather("re-gather qkv input", "I", "qkv dgrad", "backward")
    reduce("reduce qkv input grad", "I", "qkv wgrad", "backward")
    ops.append(memory("norm1 back", "I", Tn * h * NORM_BACK))
    # weight gradients (and, without gradient-accumulation fusion, their addition to the main gradients)
    ops.append(matmul("fc2 wgrad", "W", z.f, h, T))
    ops.append(matmul("fc1 wgrad", "W", h, ffn_n, T))
    ops.append(matmul("proj wgrad", "W", z.A * z.d, h, T))
    ops.append(matmul("qkv wgrad", "W", h, qkv_n, T))
    if model.bias:
        ops += bias_grad_ops(model, z, qkv_n, ffn_n)
    if layout.grad_accumulation == "fsdp":
        ops += fsdp_grad_ops(layer_params_per_rank(model, layout), layout, e)
    elif not layout.grad_fusion:
        grad_bytes = layout.bytes_per_param[1]
        params = layer_params_per_rank(model, layout)
        if layout.grad_accumulation == "cast-add":  # the cast writes a new tensor; the add reads it and the sum
            ops.append(memory("cast grads", "W", params * (e + grad_bytes)))
            ops.append(memory("accumulate grads", "W", params * 3 * grad_bytes))
        else:
            ops.append(memory("accumulate grads", "W", params * (2 * grad_bytes + e)))
    return ops


def bias_grad_ops(model: Transformer, z: PerRank, qkv_n: float, ffn_n: float) -> list[Op]:
    """Each bias's gradient: a sum over the tokens of its output's gradient, one pass reading it. Megatron-LM's
    column-parallel layers sum it in their backward (``grad_output.sum(dim=0)``, megatron/mpu/layers.py), and
    autograd sums the broadcast bias of the fused bias-GeLU and bias-dropout-add (the row-parallel layers' bias,
    added after the all-reduce, over the tokens each rank holds)."""
    mlp_tokens = z.T * (model.top_k if model.experts else 1)
    return [
        memory("qkv bias grad", "W", z.T * qkv_n * z.e),
        memory("proj bias grad", "I", z.Tn * z.h * z.e),
        memory("fc1 bias grad", "I", mlp_tokens * ffn_n * z.e),
        memory("fc2 bias grad", "I", z.Tn * z.h * z.e),
    ]


def mlp_ops(model: Transformer, layout: TrainingSetup, z: PerRank, phase: str, ffn_n: float, act: float) -> list[Op]:
    """The MLP's products and activation (a mixture of experts adds its router and all-to-alls)."""
    T, h = z.T, z.h
    experts = model.experts
    if not experts:
        if phase == "F":
            return [matmul("fc1", "F", T, ffn_n, h), memory("activation", "F", T * z.f * act),
                    matmul("fc2", "F", T, h, z.f)]  # fmt: skip
        return [matmul("fc2 dgrad", "I", T, z.f, h), memory("activation back", "I", T * z.f * act),
                matmul("fc1 dgrad", "I", T, h, ffn_n)]  # fmt: skip
    # tokens go to top_k experts; each of the ep ranks holds experts / ep of them and gets T * top_k tokens
    local = experts / layout.ep
    rows = T * model.top_k / local  # tokens per local expert, balanced
    moved = T * model.top_k * h * z.e
    ep = layout.ep
    a2a = Op("", phase, "ep", nbytes=moved, collective="all_to_all", ranks=ep,
             per_node=layout.per_node(layout.tp * layout.cp, ep))  # fmt: skip
    if phase == "F":
        return [
            matmul("router", "F", T, experts, h),
            a2a._replace(name="dispatch"),
            matmul("fc1", "F", rows, ffn_n, h, local),
            memory("activation", "F", T * model.top_k * z.f * act),
            matmul("fc2", "F", rows, h, z.f, local),
            a2a._replace(name="combine"),
        ]
    return [
        a2a._replace(name="combine back"),
        matmul("fc2 dgrad", "I", rows, z.f, h, local),
        memory("activation back", "I", T * model.top_k * z.f * act),
        matmul("fc1 dgrad", "I", rows, h, ffn_n, local),
        a2a._replace(name="dispatch back"),
        matmul("router dgrad", "I", T, h, experts),
    ]


def attention_ops(model: Transformer, layout: TrainingSetup, z: PerRank, phase: str) -> list[Op]:
    """The attention core: Megatron-LM's unfused kernels, or one flash kernel (with ring exchanges under cp)."""
    b, s, d, A = layout.microbatch, model.seq, z.d, z.A
    if layout.attention in FUSED_ATTENTION:
        # causal: half the score matrix; the backward 2.5 times the forward (FlashAttention-2's five products
        # against two); under context parallelism each rank's queries meet every rank's keys
        # (ring attention's steps against other ranks' keys are unmasked: one step in cp has the mask)
        flops = 4.0 * b * A * (s / layout.cp) * s * d / 2
        # a padded head computes its padding too (MPT-30b's heads of 112 run as 128)
        kernel_d = kernel_head_dim(d, layout.attention)
        first_gen = kernel_d if layout.attention == "triton" else 0
        ops = [Op("flash attention" + (" back" if phase == "I" else ""), phase, "attention",
                  flops * (2.5 if phase == "I" else 1.0), core=True, causal_seq=s / layout.cp,
                  causal_part=1.0 / layout.cp, rate_share=d / kernel_d, first_gen_head_dim=first_gen)]  # fmt: skip
        if layout.cp > 1 and layout.cp_comm == "allgather":  # Llama 3: gathered before the kernel, nothing hides it
            kv = 2 * z.T * z.G * d * z.e * layout.cp  # every rank's keys and values
            ops[:0] = [
                Op(
                    "cp kv all-gather" + (" again" if phase == "I" else ""),
                    phase,
                    "sp_cp",
                    nbytes=kv,
                    collective="all_gather",
                    ranks=layout.cp,
                    per_node=layout.per_node(layout.tp, layout.cp),
                )
            ]
            if phase == "I":  # their gradients go back to their ranks, summed
                ops.append(Op("cp kv grad reduce-scatter", phase, "sp_cp", nbytes=kv, collective="reduce_scatter",
                              ranks=layout.cp, per_node=layout.per_node(layout.tp, layout.cp)))  # fmt: skip
        elif layout.cp > 1:  # ring attention (Transformer Engine): each step's keys and values travel while it computes
            kv = 2 * z.T * z.G * d * z.e * (2 if phase == "I" else 1)  # the backward also returns their gradients
            ops.append(Op("ring kv" + (" back" if phase == "I" else ""), phase, "sp_cp", nbytes=kv * (layout.cp - 1),
                          collective="p2p", ranks=layout.cp, per_node=layout.per_node(layout.tp, layout.cp),
                          hide=ops[0].name, overlap="always"))  # fmt: skip
        return ops
    scores = b * A * s * s  # elements of the score matrix on this rank
    if phase == "F":
        # ALiBi (BigScience's Megatron-DeepSpeed, megatron/model/transformer.py): the scores product is a baddbmm
        # onto the [b * heads, 1, s] bias with beta 1, for which PyTorch first copies the bias broadcast to the
        # whole score matrix (2) and the product then reads it back (2)
        alibi = [memory("alibi bias", "F", scores * 4, core=True)] if model.alibi else []
        return alibi + [
            matmul("scores", "F", s, s, d, b * A, core=True),
            memory("softmax", "F", scores * 4, core=True),
            memory("attention dropout", "F", scores * 5 if model.dropout else 0, core=True),
            matmul("context", "F", s, d, s, b * A, core=True),
            memory("context copy", "F", z.T * A * d * 4, core=True),  # [b, heads, s, d] -> [s, b, heads * d]
        ]
    return [
        matmul("context dgrad", "I", s, s, d, b * A, core=True),
        matmul("context vgrad", "I", s, d, s, b * A, core=True),
        memory("attention dropout back", "I", scores * 5 if model.dropout else 0, core=True),
        memory("softmax back", "I", scores * 6, core=True),
        matmul("scores qgrad", "I", s, d, s, b * A, core=True),
        matmul("scores kgrad", "I", s, d, s, b * A, core=True),
    ]


def layer_params_per_rank(model: Transformer, layout: TrainingSetup) -> float:
    """One layer's parameters on one rank: split over tp, and experts over ep too."""
    dense = model.layer_params - max(model.experts, 1) * model.mlp_params
    experts = max(model.experts, 1) * model.mlp_params / (layout.ep if model.experts else 1)
    return (dense + experts) / layout.tp


def head_ops(model: Transformer, layout: TrainingSetup) -> list[Op]:
    """The last stage's final norm, vocabulary-parallel output layer and cross-entropy (fp32 logits)."""
    z = PerRank.of(model, layout)
    T, Tn, h, v = z.T, z.Tn, z.h, model.padded_vocab(layout.tp) / layout.tp
    full = T * h * z.e
    ops = [memory("final norm", "F", Tn * h * 4)]
    if layout.sequence_parallel:
        ops.append(tp_collective(layout, "gather head input", "F", "all_gather", full, "logits", "full"))
    forward, backward = FUSED_CROSS_ENTROPY if layout.cross_entropy == "fused" else CROSS_ENTROPY
    ops += [matmul("logits", "F", T, v, h), memory("cross-entropy", "F", T * v * forward)]
    ops += [memory("cross-entropy back", "I", T * v * backward), matmul("logits dgrad", "I", T, h, v)]
    if layout.tp > 1:
        collective = "reduce_scatter" if layout.sequence_parallel else "all_reduce"
        ops.append(tp_collective(layout, "reduce head input grad", "I", collective, full, "logits wgrad", "backward"))
    ops += [memory("final norm back", "I", Tn * h * NORM_BACK), matmul("logits wgrad", "W", v, h, T)]
    if layout.train_metrics:
        ops.append(memory("training metrics", "W", T * v * TRAIN_METRIC * layout.train_metrics))
    if not model.tied:
        ops += fsdp_grad_ops(v * h, layout, z.e)
    return ops


def embedding_ops(model: Transformer, layout: TrainingSetup) -> list[Op]:
    """The first stage's vocabulary-parallel embedding: a lookup, its all-reduce (or reduce-scatter), dropout."""
    z = PerRank.of(model, layout)
    ops = [memory("embedding", "F", z.T * z.h * 4)]
    if layout.tp > 1:
        collective = "reduce_scatter" if layout.sequence_parallel else "all_reduce"
        ops.append(tp_collective(layout, "reduce embedding", "F", collective, z.T * z.h * z.e, "", ""))
    if model.dropout:
        ops.append(memory("embedding dropout", "F", z.Tn * z.h * 5))
    ops.append(memory("embedding grad", "W", z.T * z.h * 6))
    return ops + fsdp_grad_ops(model.padded_vocab(layout.tp) / layout.tp * z.h, layout, z.e)
