"""What each pipeline action costs: a model chunk's ops priced on a system, by where the time goes.

``action_costs`` gives, for every stage (model chunk) and every action kind a schedule has (``F``, ``B``, and
``I``/``W`` when the backward is split), the seconds in each category of ``CATEGORIES``:

- ``matmul``, ``attention``, ``elementwise``: compute (``simulator.cost.achieved`` prices each op);
- ``recompute``: the forward ops a backward re-runs first (all of them under full recomputation, with their
  collectives; the attention core's under selective recomputation, Korthikanti et al. 2022 section 5; under
  torchtitan's op-level policy every second product of the layer and every element-wise op, ``op_recomputed``);
- ``tp``, ``sp_cp``, ``ep``: the part of each collective that no product hides. A collective with a ``hide``
  product is hidden up to that product's time when the product runs in the same action and the layout's
  ``tp_overlap`` allows it (``layout.py``); when a schedule splits the backward, a collective waiting for
  the weight-gradient product (which runs later, in W) is not hidden;
- ``launch``: the GPU waiting for the CPU to issue kernels (``launch_gap``);
- ``contention``: what hiding costs: the product runs slower while the collective beside it holds SMs
  (``Achieved.overlapped``, with the slowdown the system measured).
"""

from __future__ import annotations

from collections import defaultdict

from ...cost.achieved import Achieved
from .layer import Op, PerRank, embedding_ops, head_ops, layer_ops, tp_collective
from .model import Transformer
from .training_setup import TrainingSetup

COMPUTE = ("matmul", "attention", "elementwise", "recompute", "contention", "launch")
EXPOSED = ("tp", "sp_cp", "ep")
CATEGORIES = COMPUTE + EXPOSED
OVERLAPS = {"none": ("always",), "backward": ("always", "backward"), "full": ("always", "backward", "full")}
Costs = dict[str, float]


def op_seconds(op: Op, achieved: Achieved, itemsize: int, fp8: bool = False) -> float:
    """Seconds one op takes on its own (a collective: with no compute beside it). Under FP8 the linear layers'
    products run on FP8 tensor cores (Transformer Engine); the attention core stays in 16 bits."""
    if op.kind == "matmul":
        return achieved.matmul_time(*op.shape, itemsize=itemsize, fp8=fp8 and not op.core)
    if op.kind == "attention":
        return achieved.attention_time(op.flops, op.causal_seq, op.causal_part, op.rate_share, op.first_gen_head_dim)
    if op.kind == "memory":
        return achieved.memory_time(op.nbytes)
    if op.collective == "p2p":  # a ring: ranks - 1 steps, each rank sending one share to its neighbour
        step = op.nbytes / (op.ranks - 1)
        return (op.ranks - 1) * achieved.p2p_time(step, same_node=op.per_node >= op.ranks)
    return achieved.collective_time(op.collective, op.nbytes, op.ranks, op.per_node)


def price(ops: list[Op], recomputed: list[Op], layout: TrainingSetup, achieved: Achieved, itemsize: int) -> Costs:
    """Seconds by category for ``ops`` run together (``recomputed`` first, as the backward's recomputation)."""
    out: Costs = defaultdict(float)
    allowed = OVERLAPS[layout.tp_overlap]
    for group, is_recompute in ((recomputed, True), (ops, False)):
        fp8 = layout.precision == "fp8"
        times = {op.name: op_seconds(op, achieved, itemsize, fp8) for op in group if op.kind in ("matmul", "attention")}
        for op in group:
            seconds = op_seconds(op, achieved, itemsize, fp8)
            if seconds > 0:
                out["launch"] += launch_gap(op, seconds, layout, achieved)
            if op.kind in EXPOSED:
                if op.hide in times and op.overlap in allowed:
                    product = times[op.hide]
                    slowed, seconds = achieved.overlapped(product, seconds)
                    out["contention"] += slowed - product
                out[op.kind] += seconds
            elif is_recompute:
                out["recompute"] += seconds
            else:
                out[{"matmul": "matmul", "attention": "attention", "memory": "elementwise"}[op.kind]] += seconds
    return out


def launch_gap(op: Op, seconds: float, layout: TrainingSetup, achieved: Achieved) -> float:
    """Seconds the GPU waits for the CPU around one kernel. The CPU issues kernels ahead of the GPU, so a kernel
    shorter than the CPU's time to issue one (``Achieved.launch_seconds``) leaves the GPU idle for the rest;
    under ``CUDA_LAUNCH_BLOCKING=1`` (``layout.launch_blocking``) the CPU waits for every kernel, collectives
    included, and its issue time adds to each."""
    if layout.launch_blocking:
        return achieved.launch_seconds
    if op.kind in EXPOSED:
        return 0.0
    return max(0.0, achieved.launch_seconds - seconds)


def recomputed_ops(forward: list[Op], layout: TrainingSetup, model: Transformer) -> list[Op]:
    """What a backward re-runs first: every forward op (full), the attention core's (selective), or nothing.

    Flash attention keeps no score matrix, so selective recomputation has nothing left to recompute. Under
    full recomputation with ``distribute_saved`` the tensor-parallel group first all-gathers the layer input
    each rank kept a 1 / tp share of (Megatron-LM's ``gather_split_1d_tensor`` in its checkpoint's backward)."""
    if layout.recompute == "full":
        if not layout.distribute_saved or layout.sequence_parallel or layout.tp == 1:
            return forward
        z = PerRank.of(model, layout)
        gather = tp_collective(layout, "saved input gather", "F", "all_gather", z.e * z.T * z.h, "", "")
        return [gather, *forward]
    if layout.recompute == "selective" and layout.attention == "unfused":
        return [op for op in forward if op.core]
    if layout.recompute == "op":
        return op_recomputed(forward, model, layout)
    return []


def op_recomputed(forward: list[Op], model: Transformer, layout: TrainingSetup) -> list[Op]:
    """What torchtitan's op-level selective checkpointing re-runs (``selective_ac_option = 'op'``,
    torchtitan/parallelisms/parallelize_llama.py, December 2024): its policy keeps the output of every odd
    ``aten.mm`` a block's forward makes, of the attention kernel and of reduce-scatters, and recomputes the rest.
    torchtitan's Llama calls its products one module each, wq, wk, wv, wo, then w1, w3, w2
    (``self.w2(F.silu(self.w1(x)) * self.w3(x))``), so the second, fourth and sixth are recomputed: the key
    product, the output projection and the up product w3 (with a GeLU MLP, fc1 then fc2: fc2). Every norm,
    residual add and activation is recomputed too, and sequence parallelism's all-gathers (not in the policy's
    list). The products here fuse q, k and v, and SwiGLU's w1 and w3, so the recomputed share is cut out of them."""
    z = PerRank.of(model, layout)
    out = []
    for op in forward:
        if op.kind == "memory" or op.collective == "all_gather":
            out.append(op)
        elif op.name == "qkv":  # wk alone: G d of the (A + 2 G) d columns
            share = z.G / (z.A + 2 * z.G)
            rows, cols, inner, count = op.shape
            out.append(op._replace(name="qkv (k)", flops=op.flops * share, shape=(rows, cols * share, inner, count)))
        elif op.name == "proj" or (op.name == "fc2" and model.mlp != "swiglu"):
            out.append(op)
        elif op.name == "fc1" and model.mlp == "swiglu":  # w3, one of the two halves
            rows, cols, inner, count = op.shape
            out.append(op._replace(name="fc1 (w3)", flops=op.flops / 2, shape=(rows, cols / 2, inner, count)))
    return out


def action_costs(model: Transformer, layout: TrainingSetup, achieved: Achieved) -> list[dict[str, Costs]]:
    """Per stage (model chunk, 0 .. pp * stages_per_rank - 1): per action kind, seconds by category."""
    e = model.itemsize
    counts = layout.chunk_layers(model)
    stages = len(counts)
    ops = layer_ops(model, layout)  # one layer's; a chunk runs counts[s] of them
    first, last = embedding_ops(model, layout), head_ops(model, layout)
    out = []
    for s in range(stages):
        extra = (first if s == 0 else []) + (last if s == stages - 1 else [])
        kinds = {}
        for kind, phases in (("F", "F"), ("B", "IW"), ("I", "I"), ("W", "W")):
            chosen = [op for op in ops if op.phase in phases]
            again = recomputed_ops([op for op in ops if op.phase == "F"], layout, model) if kind in "BI" else []
            costs = _scaled(price(chosen, again, layout, achieved, e), counts[s])
            ends_costs = price([op for op in extra if op.phase in phases], [], layout, achieved, e)
            kinds[kind] = {c: costs.get(c, 0.0) + ends_costs.get(c, 0.0) for c in CATEGORIES}
        out.append(kinds)
    return out


def _scaled(costs: Costs, factor: int) -> Costs:
    return {k: v * factor for k, v in costs.items()}


def total(costs: Costs) -> float:
    return sum(costs.values())
