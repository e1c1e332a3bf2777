"""Closed forms for a tensor-parallel transformer step: messages, bytes, and activation memory per device.

Notation: t devices in the tensor-parallel group, a microbatch of b sequences of S tokens, width D,
MLP width F, H heads; N = b S D elements, the size of one activation. Ring collectives (the
simulator's default) over t devices, with every size divisible by t:

    all-reduce of n elements       each device sends 2(t - 1) messages, 2 (t - 1) / t * n elements
    all-gather / reduce-scatter    each device sends   t - 1  messages,   (t - 1) / t * n elements

Per block and microbatch, plain tensor parallelism all-reduces N elements four times (the attention and
MLP outputs forward, the two input gradients backward); sequence parallelism replaces each all-reduce
by a reduce-scatter and an all-gather of N, the same messages and bytes (Korthikanti et al. 2022), and
with ``regather`` gathers both regions' inputs again in the backward (two more all-gathers). Once per
step it also all-reduces the six D-element gradients of the layer norms and output biases of every block
(summed over the devices' tokens) and the loss.

Activation memory (elements per device at the end of a microbatch's forward, one block): what stays for
the backward. Outside the regions x, ln1, h, ln2, y and the two dropout masks (without dropout: no masks),
plus the targets; inside them q, k, v, the attention output (4 N / t), the probabilities (b H S^2 / t),
u and gelu(u) (2 b S F / t). Plain TP keeps the outside values whole on every device; sequence
parallelism keeps 1/t of each, except ln1 and ln2, which it keeps gathered unless ``regather``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...core.trace import Trace
from .model import Transformer

BYTES = 8  # float64


@dataclass(frozen=True)
class Volume:
    """Messages and bytes sent, per device (``per_device``) and over all devices (``total``)."""

    messages: int
    bytes: int
    devices: int

    @property
    def total_messages(self) -> int:
        return self.messages * self.devices

    @property
    def total_bytes(self) -> int:
        return self.bytes * self.devices

    def __add__(self, other: Volume) -> Volume:
        return Volume(self.messages + other.messages, self.bytes + other.bytes, self.devices)


def _ring(t: int, elements: int, reduce_and_gather: int) -> Volume:
    """``reduce_and_gather`` ring phases (1: all-gather or reduce-scatter, 2: all-reduce) of ``elements``."""
    if elements % t:
        raise ValueError(f"the closed forms assume sizes divisible by t = {t}; {elements} elements are not")
    return Volume(reduce_and_gather * (t - 1), reduce_and_gather * (t - 1) * elements // t * BYTES, t)


def activation_volume(
    model: Transformer,
    batch: int,
    seq: int,
    t: int,
    microbatches: int = 1,
    sequence_parallel: bool = False,
    regather: bool = False,
) -> Volume:
    """What the activation collectives (the f, g operators and their backwards) send in one step."""
    n = batch // microbatches * seq * model.d_model
    phases = 8 + (2 if sequence_parallel and regather else 0)  # 4 all-reduces = 8 ring phases
    if t == 1:
        return Volume(0, 0, 1)
    per = _ring(t, n, phases)
    return Volume(per.messages * model.blocks * microbatches, per.bytes * model.blocks * microbatches, t)


def step_volume(
    model: Transformer,
    batch: int,
    seq: int,
    t: int,
    microbatches: int = 1,
    sequence_parallel: bool = False,
    regather: bool = False,
) -> tuple[Volume, int, int]:
    """The whole step: (the activations' volume, total messages, total bytes over all devices).

    Sequence parallelism adds, per step, an all-reduce of each of the 6 D-element parameter gradients of
    every block and one of the (scalar) loss; with a ring, every chunk of an all-reduce crosses t - 1
    links twice, so their totals are 2 (t - 1) t messages and 2 (t - 1) n elements each.
    """
    acts = activation_volume(model, batch, seq, t, microbatches, sequence_parallel, regather)
    messages, nbytes = acts.total_messages, acts.total_bytes
    if sequence_parallel and t > 1:
        for n in [model.d_model] * (6 * model.blocks) + [1]:
            messages += 2 * (t - 1) * t
            nbytes += 2 * (t - 1) * n * BYTES
    return acts, messages, nbytes


def activation_elements(
    model: Transformer,
    batch: int,
    seq: int,
    t: int = 1,
    sequence_parallel: bool = False,
    regather: bool = False,
) -> int:
    """Elements a device holds for the backward when a microbatch of ``batch`` sequences ends its forward.

    Per block: its input x, h and the masks outside the regions, ln1 and ln2, and inside the regions
    4 N / t + b H S^2 / t + 2 b S F / t; once: the last block's output and the targets.
    """
    n = batch * seq * model.d_model
    masks = 2 if model.dropout > 0 else 0
    inside = 4 * n // t + batch * model.heads * seq * seq // t + 2 * batch * seq * model.d_ff // t
    shard = t if sequence_parallel else 1  # the outside values: whole, or this device's chunk of the sequence
    lns = 2 * n // (t if sequence_parallel and regather else 1)  # ln1 and ln2: kept gathered unless regather
    per_block = inside + (2 + masks) * n // shard + lns
    return model.blocks * per_block + 2 * n // shard


# ---- the same numbers read off a run ----------------------------------------------------------------
_FORWARD = re.compile(r"^(x|t|L\d+\.(?!d)[a-z_0-9]+)\.mb\d+$")  # forward values and masks, not gradients


def is_forward_activation(name: str) -> bool:
    """``x.mb0``, ``L0.q.mb0``, ``L0.mask1.mb0``: values kept for the backward (gradients start with ``d``)."""
    return bool(_FORWARD.match(name))


def forward_bytes(trace: Trace, device: int, until: str | None = None) -> int:
    """The most bytes of forward activations ``device`` held at once (replayed from the trace's memory
    events), or, with ``until``, the bytes it holds when it runs the op of that name (e.g. ``loss.mb0``:
    what the backward will need, the closed form of ``activation_elements``)."""
    live: dict[str, int] = {}
    held = peak = 0
    for kind, rec in trace.events:
        if until is not None and kind == "op" and rec.rank == device and rec.name == until:
            return held
        if kind == "recv":
            if rec.dst == device and rec.name is not None and is_forward_activation(rec.name):
                held += rec.nbytes - live.get(rec.name, 0)
                live[rec.name] = rec.nbytes
        elif kind in ("op", "hold", "free") and rec.rank == device and is_forward_activation(rec.name):
            if kind == "free":
                held -= live.pop(rec.name, 0)
            elif kind == "hold" or rec.keep:
                held += rec.nbytes - live.get(rec.name, 0)
                live[rec.name] = rec.nbytes
        peak = max(peak, held)
    if until is not None:
        raise ValueError(f"device {device} runs no op named {until!r}")
    return peak


_REGIONS = (
    (re.compile(r"\.(ln[12]|h|y|attn_out|mlp_out|attn_drop|mlp_drop|mask[12])\.mb"), "norm, residual"),
    (re.compile(r"\.(q|k|v|scores|probs|attn|proj|ring_state|attn_lse\d)\.mb"), "attention"),
    (re.compile(r"\.(u|act|down)\.mb"), "MLP"),
    (
        re.compile(r"\.(dln[12]|dh|dmlp_out|dattn_out|dy|dgamma[12]|dbeta[12]|dbo|db2)\.mb|^dx\.mb"),
        "bwd norm",
    ),
    (re.compile(r"\.(dq|dk|dv|dprobs|dscores|dattn|dW[qkvo]|ring_dq|ring_d[kv]_term|ring_d[kv])\.mb"), "bwd attention"),
    (re.compile(r"\.(dact|du|dW[12]|db1)\.mb"), "bwd MLP"),
)


def op_region(name: str) -> str:
    """Which part of the block an op of a transformer step belongs to, in words (a timeline's colour key)."""
    for pattern, words in _REGIONS:
        if pattern.search(name):
            return words
    return "loss, sums"


def context_volume(model: Transformer, batch: int, seq: int, c: int, microbatches: int = 1) -> tuple[int, int]:
    """Messages and bytes of a context-parallel step over c devices, summed over the devices.

    Per block and microbatch each device sends its neighbour c - 1 key blocks and c - 1 value blocks in
    the forward, the same again in the backward, and c pairs of travelling dK and dV sums (the last pair
    home to the block's owner): 6c - 4 messages of b S / c x D elements. Once per step, every parameter's
    gradient and the loss are all-reduced (ring: 2 (c - 1) messages per device each).
    """
    if c == 1:
        return 0, 0
    block = batch // microbatches * (seq // c) * model.d_model
    per_device = (6 * c - 4) * model.blocks * microbatches
    messages, nbytes = per_device * c, per_device * c * block * BYTES
    d, f = model.d_model, model.d_ff
    params = [d * d] * 4 + [d * f] * 2 + [d] * 6 + [f]  # Wq Wk Wv Wo, W1 W2, six D-wide vectors, b1
    for n in params * model.blocks + [1]:  # ... and the loss
        messages += 2 * (c - 1) * c  # a ring all-reduce: every chunk crosses c - 1 links, twice
        nbytes += 2 * (c - 1) * n * BYTES
    return messages, nbytes
