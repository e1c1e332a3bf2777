"""A small Llama-style model laid out as torchtitan lays out its Llama (the same module names and the same
parallel plan), and the training program that runs it with FSDP2 and tensor parallelism on a 2-D mesh.

Model (``Llama``): token embeddings ``tok_embeddings``; ``layers.0``, ``layers.1``, ... each a ``Block`` of
``attention_norm`` (RMSNorm), ``attention`` (``wq``, ``wk``, ``wv``, ``wo``; rotary position embeddings on
the queries and keys; causal softmax attention), ``ffn_norm`` (RMSNorm), ``feed_forward`` (SwiGLU: ``w2(silu(w1
x) * w3 x)``); a final ``norm`` and the ``output`` projection to the vocabulary. Shapes are in the comments:
b batch, s sequence, d model dim, h heads, k head dim, f feed-forward dim, v vocabulary.

Training (``train``): the mesh ("dp", "tp"); tensor parallelism over "tp" with torchtitan's plan (sequence
parallel norms, column-wise wq, wk, wv, w1, w3, row-wise wo, w2, the embeddings row-wise out to sequence
shards, the output column-wise); FSDP2 (``fully_shard``) over "dp" for each block and the whole model; each
"dp" coordinate its rows of the batch; ``steps`` AdamW steps of the cross-entropy loss. ``train_one`` is its
single-device twin, for ``Reference.of_torch``.

With pipeline parallelism (``train_pipelined``): the 3-D mesh ("pp", "dp", "tp") on 8 ranks; each "pp" coordinate
a stage, a copy of the model keeping its own layers (``stage_of``), given tensor parallelism and FSDP2 over its
("dp", "tp") submesh, run by a ``torch.distributed.pipelining`` schedule; ``train_one_pipelined`` is its twin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    dim: int = 16
    n_layers: int = 2
    n_heads: int = 4
    vocab_size: int = 32
    ffn_dim: int = 32
    max_seq_len: int = 16
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0


def rope_tables(head_dim: int, seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of each position's angle for each pair of a head's features: (s, k / 2) each."""
    freqs = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), freqs)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair of features (x[..., 2i], x[..., 2i + 1]) of x (b, s, h, k) by its position's angle (real
    arithmetic: torchtitan's complex multiply, written without complex tensors)."""
    s = x.shape[1]
    c, n = cos[:s].view(1, s, 1, -1), sin[:s].view(1, s, 1, -1)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * c - odd * n, even * n + odd * c), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.head_dim = cfg.dim // cfg.n_heads
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        # -1 heads: all of them on one device, a tensor-parallel rank's share of them under wq's column split
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.w2 = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    def __init__(self, cfg: Config = Config()) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleDict({str(i): Block(cfg) for i in range(cfg.n_layers)})
        self.norm = nn.RMSNorm(cfg.dim, eps=cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.dim // cfg.n_heads, cfg.max_seq_len, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        # a pipeline stage is a copy with the parts it does not run set to None (torchtitan's way): the first
        # stage has no norm and output, the last no embeddings; then the input is the previous stage's h
        h = self.tok_embeddings(tokens) if self.tok_embeddings is not None else tokens
        # h: (b, s, d); under sequence parallelism a rank's tokens of it
        for layer in self.layers.values():
            h = layer(h, self.rope_cos, self.rope_sin)
        h = self.norm(h) if self.norm is not None else h
        return self.output(h) if self.output is not None else h  # (b, s, v) after the last stage


def llama(seed: int = 0, cfg: Config = Config()) -> Llama:
    """A ``Llama`` whose weights depend only on ``seed``."""
    torch.manual_seed(seed)
    return Llama(cfg)


def batch(cfg: Config = Config(), rows: int = 4, seq: int = 8, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and their next-token labels, depending only on ``seed``."""
    ids = torch.randint(0, cfg.vocab_size, (rows, seq + 1), generator=torch.Generator().manual_seed(seed))
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def _loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten())


def train_one(model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor, steps: int = 3) -> torch.Tensor:
    """The single-device run: ``steps`` AdamW steps on the whole batch; the losses, one per step."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = _loss(model(tokens), labels)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return torch.stack(losses)


def tensor_parallel(model: Llama, tp: Any) -> None:
    """torchtitan's tensor-parallel plan for its Llama, with sequence parallelism, over the mesh ``tp``."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    top = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }  # a pipeline stage's plan names only the parts the stage kept
    parallelize_module(model, tp, {name: style for name, style in top.items() if getattr(model, name) is not None})
    for block in model.layers.values():
        plan = {
            "attention_norm": SequenceParallel(),
            "attention": PrepareModuleInput(
                input_layouts=(Shard(1), None, None), desired_input_layouts=(Replicate(), None, None)
            ),
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
            "ffn_norm": SequenceParallel(),
            "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
            "feed_forward.w3": ColwiseParallel(),
        }
        parallelize_module(block, tp, plan)


def train(
    state: dict[str, torch.Tensor],
    tokens: torch.Tensor,
    labels: torch.Tensor,
    steps: int = 3,
    shape: tuple[int, int] = (2, 2),
    cfg: Config = Config(),
    bug: str | None = None,
) -> torch.Tensor:
    """FSDP2 over "dp" and tensor parallelism over "tp" (see the module docstring); the losses, one per step,
    averaged over the data-parallel replicas. bug "same rows": every replica takes the first rows."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
    model = Llama(cfg)
    model.load_state_dict(state)
    tensor_parallel(model, mesh["tp"])
    for block in model.layers.values():
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    dp = mesh["dp"]
    take = 0 if bug == "same rows" else dp.get_local_rank()
    mine, my_labels = tokens.chunk(dp.size())[take], labels.chunk(dp.size())[take]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = _loss(model(mine), my_labels)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    out = torch.stack(losses)
    dist.all_reduce(out, op=dist.ReduceOp.AVG, group=dp.get_group())
    return out


MICROBATCHES = 2  # each replica's rows, cut in two for the pipeline


def stage_of(state: dict[str, torch.Tensor], stage: int, stages: int, cfg: Config, bug: str | None = None) -> Llama:
    """Pipeline stage ``stage`` of ``stages`` as torchtitan cuts a model: a whole copy loaded with ``state``, then
    the layers the stage does not run deleted and the embeddings (all but the first stage), the norm and the
    output (all but the last) set to None, so every kept module keeps its name. bug "stages swapped": the first
    two stages hold each other's layers."""
    model = Llama(cfg)
    model.load_state_dict(state)
    per = cfg.n_layers // stages
    held = stage ^ 1 if bug == "stages swapped" and stage < 2 else stage
    for i in range(cfg.n_layers):
        if i // per != held:
            del model.layers[str(i)]
    if stage > 0:
        model.tok_embeddings = None
    if stage < stages - 1:
        model.norm = model.output = None
    return model


def train_pipelined(
    state: dict[str, torch.Tensor],
    tokens: torch.Tensor,
    labels: torch.Tensor,
    steps: int = 3,
    schedule: str = "Schedule1F1B",
    cfg: Config = Config(),
    bug: str | None = None,
) -> torch.Tensor | None:
    """FSDP2 + tensor parallelism + pipeline parallelism on the mesh ("pp", "dp", "tp") of shape (2, 2, 2): each
    "pp" coordinate a stage (``stage_of``), tensor parallelism over "tp" and FSDP2 over "dp" applied to it as
    ``train`` applies them to the whole model, run by torch's ``schedule`` on ``MICROBATCHES`` microbatches with
    the cross-entropy loss, ``steps`` AdamW steps. Replica d takes rows d, d + 2, ... (``DistributedSampler``'s
    order), so that its microbatch k is its share of the batch's microbatch k. Between stages each tensor-parallel
    rank sends its own tokens of h (sequence parallelism). The last stage returns the losses, one per step,
    averaged over microbatches and replicas; the others None. bug "stages swapped" (see ``stage_of``), "same
    rows": every replica takes replica 0's rows."""
    from torch.distributed import pipelining
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("pp", "dp", "tp"))
    pp, dp = mesh["pp"], mesh["dp"]
    stage, stages = pp.get_local_rank(), pp.size()
    model = stage_of(state, stage, stages, cfg, bug)
    tensor_parallel(model, mesh["tp"])
    for block in model.layers.values():
        fully_shard(block, mesh=dp)
    fully_shard(model, mesh=dp)
    pipe = pipelining.PipelineStage(model, stage, stages, torch.device("cpu"), group=pp.get_group())
    runner = getattr(pipelining, schedule)(pipe, n_microbatches=MICROBATCHES, loss_fn=_loss)
    take = 0 if bug == "same rows" else dp.get_local_rank()
    mine, my_labels = tokens[take :: dp.size()], labels[take :: dp.size()]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    first, last = stage == 0, stage == stages - 1
    per_step = []
    for _ in range(steps):
        opt.zero_grad()
        losses: list[torch.Tensor] = []
        if first:
            runner.step(mine)
        elif last:
            runner.step(target=my_labels, losses=losses)
        else:
            runner.step()
        opt.step()
        if last:
            per_step.append(torch.stack(losses).mean())
    if not last:
        return None
    out = torch.stack(per_step)
    dist.all_reduce(out, op=dist.ReduceOp.AVG, group=dp.get_group())
    return out


def train_one_pipelined(
    model: nn.Module, tokens: torch.Tensor, labels: torch.Tensor, steps: int = 3, replicas: int = 2
) -> torch.Tensor:
    """The single-device twin of ``train_pipelined``: each step the model on each of the ``MICROBATCHES``
    microbatches in turn, its backward as the pipeline runs it: each replica's backward starts from its own
    microbatch loss, unscaled, so the twin's microbatch loss is the replicas' summed (``replicas`` times the
    mean); the gradients divided at the end by the microbatches (the schedule's ``scale_grads``) and the
    replicas (FSDP2's average). The losses, one per step, averaged over the microbatches."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    per_step = []
    for _ in range(steps):
        opt.zero_grad()
        losses = []
        for t, y in zip(tokens.chunk(MICROBATCHES), labels.chunk(MICROBATCHES)):
            loss = _loss(model(t), y)
            (loss * replicas).backward()
            losses.append(loss.detach())
        with torch.no_grad():
            for p in model.parameters():
                p.grad /= MICROBATCHES * replicas
        opt.step()
        per_step.append(torch.stack(losses).mean())
    return torch.stack(per_step)
