"""Context parallelism: every device holds some tokens of every sequence, and attention runs as a ring.

With c devices in the context-parallel group the sequence is cut into 2c chunks, by torch.chunk's rule:
chunks of ceil(S / 2c) tokens, so when 2c does not divide S the last chunks are shorter or empty (S = 12 over
c = 4: six chunks of 2 and two empty ones). An empty chunk has no queries and no keys: it attends to
nothing and nothing attends to it, and a device may even hold no token at all. Everything but
attention works token by token (layer norms, projections, the MLP, residuals), so a device computes it
for its own tokens with the whole weights and no message. Attention needs every earlier key: the devices
pass their key and value blocks around a ring, c - 1 hops, each device combining its queries with one
block at a time (``ring_ops``: the online softmax) while the next block is on its way (``isend`` and
``irecv`` posted before the compute, waited for after it: the transfer hides behind the arithmetic).
The backward passes the blocks around again, with the accumulated dK and dV of each block travelling
with it and arriving back at its owner after the last hop.

The causal mask makes the work uneven. Chunk pairs whose keys all come after their queries are
skipped; with the plain order (device i holds chunks 2i and 2i + 1) device i works on 4i + 3 chunk pairs,
so the last device does almost all of it while device 0 waits. The load-balanced order (device i holds
chunks i and 2c - 1 - i, one from each end: Megatron-LM's and Llama 3's context parallelism) gives every
device 2c + 1 chunk pairs. ``positions`` says which global tokens a device holds; the masks compare
global positions, which is why a wrong offset for a chunk is a wrong value, not only a slower step.

Gradients are sums over tokens, so every parameter's gradient on a device is one term of a sum over the
group: all-reduced at the end of the step, like data parallelism's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from ...core.device import Device
from . import ring_ops as R
from .block import LocalAttention
from .model import Transformer, vname
from .sequence import ALL

RING_TAG = 1 << 28  # ring attention's tags: below the collectives' 2**30, above the pipeline's
ORDERS = ("balanced", "contiguous")


def chunks_of(index: int, cp: int, order: str = "balanced") -> tuple[int, int]:
    """The two of 2c chunks that member ``index`` of the group holds."""
    if order not in ORDERS:
        raise ValueError(f"order={order!r}: choose one of {ORDERS}")
    return (index, 2 * cp - 1 - index) if order == "balanced" else (2 * index, 2 * index + 1)


def chunk_positions(seq_len: int, cp: int, chunk: int) -> np.ndarray:
    """The global token positions of one of the 2c chunks (torch.chunk's rule when 2c does not divide S)."""
    from .sequence import chunk as cut

    sl = cut(seq_len, 2 * cp, chunk)
    return np.arange(sl.start, sl.stop)


def positions(seq_len: int, cp: int, index: int, order: str = "balanced") -> np.ndarray:
    """The global positions of member ``index``'s tokens, in the order it holds them (its two chunks)."""
    return np.concatenate([chunk_positions(seq_len, cp, ch) for ch in chunks_of(index, cp, order)])


def chunk_pairs(seq_len: int, cp: int, index: int, order: str = "balanced") -> int:
    """How many (query chunk, key chunk) pairs member ``index`` computes: the causal work of its ring."""
    mine = [chunk_positions(seq_len, cp, ch) for ch in chunks_of(index, cp, order)]
    every = [chunk_positions(seq_len, cp, ch) for j in range(cp) for ch in chunks_of(j, cp, order)]
    return sum(not R.masked_out(q, k) for q in mine for k in every)


@dataclass(frozen=True)
class ContextSplit:
    """Device ``rank``'s part of a block under context parallelism over ``group`` (whole weights, some tokens)."""

    model: Transformer
    group: tuple[int, ...]
    rank: int
    seq_len: int
    order: str = "balanced"

    sequence_parallel = False
    partial = None  # no region splits its weights: no partial sums inside a block

    def __post_init__(self) -> None:
        chunks_of(0, 1, self.order)  # the order's name is checked here
        if self.seq_len < 2 * len(self.group):
            raise ValueError(
                f"context parallelism over {len(self.group)} devices cuts the sequence into {2 * len(self.group)} "
                f"chunks: {self.seq_len} tokens are too few"
            )

    @property
    def cp(self) -> int:
        return len(self.group)

    @property
    def j(self) -> int:
        return self.group.index(self.rank)

    @property
    def seq(self) -> np.ndarray:
        return positions(self.seq_len, self.cp, self.j, self.order)

    @property
    def param_partial(self) -> tuple[int, ...] | None:
        return self.group if self.cp > 1 else None

    def grad_partial(self, what: str) -> tuple[int, ...] | None:
        """Every parameter's gradient: this device's tokens are one term of it."""
        return self.param_partial

    def index(self, kind: str) -> Any:
        """Every (B, S, ...) value a device computes holds its tokens: (ALL, positions, ALL)."""
        return None if self.cp == 1 else (ALL, self.seq, ALL)

    def param_index(self, what: str) -> Any:
        return None

    # what ring attention needs to know of a split: its ring, its place on it, and its parts of the values
    @property
    def ring(self) -> tuple[int, ...]:
        return self.group

    @property
    def cp_index(self) -> int:
        return self.j

    def block_index(self, rows: np.ndarray, cols: np.ndarray) -> tuple:
        """The block of a (B, H, S, S) value: queries at positions ``rows``, keys at ``cols``, every head."""
        return (ALL, ALL, rows[:, None], cols[None, :])

    def kv_index(self, tokens: np.ndarray) -> tuple:
        """The part of k or v a block of ``tokens`` is: those tokens, every head."""
        return (ALL, tokens, ALL)

    def attention(self, layer: int) -> RingAttention | LocalAttention:
        """The ring; on one device, plain attention (the whole sequence is there)."""
        return RingAttention(self.model, self, layer) if self.cp > 1 else LocalAttention(self.model, self, layer)

    # the tensor-parallel operators are identities: the regions are whole on every device
    def enter(self, dev: Any, name: str, local: np.ndarray) -> np.ndarray:
        return local

    enter_grad = exit = exit_grad = regathered = enter

    def sync_param_grad(self, dev: Any, name: str, value: np.ndarray) -> np.ndarray:
        """Each device summed over its own tokens: the step's gradient is the sum over the group."""
        return value if self.cp == 1 else dev.all_reduce(value, "sum", self.group, name=name)


class RingAttention:
    """Causal attention of this device's queries over every device's keys, passed around the ring.

    Checked values: every computed block of ``scores`` (and in the backward ``probs``, ``dprobs``,
    ``dscores``) under its model name with the block's rows and columns as index; every key and value
    block that arrives (``k``, ``v`` with the sender's positions); the output ``attn`` and the gradients
    ``dq``, ``dk``, ``dv`` of this device's tokens. The running online-softmax states and the travelling
    dK and dV sums are the ring's own intermediates, labelled like a collective's and checked through
    the results they add up to.
    """

    def __init__(self, model: Transformer, split: ContextSplit, layer: int) -> None:
        self.model, self.split, self.layer = model, split, layer
        self.dh = model.head_dim
        self.saved: dict[int, tuple] = {}

    # positions the masks use (a subclass can get them wrong: see the context examples)
    def mask_positions(self, member: int) -> np.ndarray:
        return positions(self.split.seq_len, self.split.cp, member, self.split.order)

    def _chunks(self, member: int) -> list[tuple[slice, np.ndarray]]:
        """(local slice, mask positions) of each of a member's two chunks."""
        pos = self.mask_positions(member)
        sizes = [
            len(chunk_positions(self.split.seq_len, self.split.cp, ch))
            for ch in chunks_of(member, self.split.cp, self.split.order)
        ]
        return [(slice(0, sizes[0]), pos[: sizes[0]]), (slice(sizes[0], sizes[0] + sizes[1]), pos[sizes[0] :])]

    def _index(self, rows: np.ndarray, cols: np.ndarray) -> tuple:
        """The block of a (B, H, S, S) value: these rows (queries) and columns (keys), true positions."""
        return self.split.block_index(rows, cols)

    def _true(self, member: int, part: slice) -> np.ndarray:
        return positions(self.split.seq_len, self.split.cp, member, self.split.order)[part]

    def _tag(self, g: int, step: int, what: int) -> int:
        return RING_TAG + ((self.layer * 1024 + g) * 64 + step) * 8 + what

    def _pass(
        self, dev: Device, g: int, step: int, values: Sequence[np.ndarray], names: Sequence[str | None], owner: int
    ):
        """Send ``values`` to the next member and post the receives of the previous member's, named as
        the model's values with the positions of block ``owner`` (or unnamed, labelled, for sums on the way)."""
        c, me = self.split.cp, self.split.cp_index
        nxt, prev = self.split.ring[(me + 1) % c], self.split.ring[(me - 1) % c]
        label = f"ring attention L{self.layer} mb{g} step {step}"
        sends = [dev.isend(v, nxt, self._tag(g, step, w), label=label) for w, v in enumerate(values)]
        theirs = positions(self.split.seq_len, c, owner, self.split.order)
        index = self.split.kv_index(theirs)
        recvs = [
            dev.irecv(
                prev,
                self._tag(g, step, w),
                shape=(v.shape[0], len(theirs), v.shape[2]),
                dtype=v.dtype,
                name=name,
                index=index if name else None,
            )  # fmt: skip
            for w, (v, name) in enumerate(zip(values, names))
        ]
        return sends, recvs

    def _score_blocks(
        self, dev: Device, n: Callable[..., str], q: np.ndarray, kc: np.ndarray, owner: int
    ) -> Iterator[tuple[int, slice, slice, Any, float, np.ndarray]]:
        """This step's score blocks, forward and backward alike: for each of this device's query chunks and each
        chunk of the visiting key block (``kc``, from device ``owner``) that the mask leaves something of, the
        scores ``q k^T / sqrt(d)``, yielded as (query chunk number, query slice, key slice, the block's index in
        the model's scores, its FLOPs, the scores)."""
        me, dh = self.split.cp_index, self.dh
        for a, (qa, qpos) in enumerate(self._chunks(me)):
            for kb, kpos in self._chunks(owner):
                if R.masked_out(qpos, kpos):
                    continue
                index = self._index(self._true(me, qa), self._true(owner, kb))
                flops = 2.0 * q[:, qa].size * (kb.stop - kb.start)
                scores = dev.compute(
                    n("scores"), partial(R.block_scores, head_dim=dh, qpos=qpos, kpos=kpos, causal=self.model.causal),
                    q[:, qa], kc[:, kb], index=index, keep=False, flops=flops,
                )  # fmt: skip
                yield a, qa, kb, index, flops, scores

    # ---- forward ---------------------------------------------------------------------------------
    def forward(self, dev: Device, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: int) -> np.ndarray:
        n = partial(vname, self.layer, g=g)
        c, me, dh = self.split.cp, self.split.cp_index, self.dh
        label = f"ring attention L{self.layer} mb{g}"
        mine = self._chunks(me)
        # an empty chunk (torch.chunk's rule leaves the last ones empty when 2c does not divide S) attends to
        # nothing: its state stays the state of no queries
        empty = R.empty_state(q.shape[0], q.shape[2] // dh, dh, q.dtype)
        states: list[Any] = [None if qa.stop > qa.start else empty for qa, _ in mine]
        kc, vc = k, v
        for step in range(c):
            owner = (me - step) % c
            if step < c - 1:  # the next block travels while this one is computed
                sends, recvs = self._pass(dev, g, step, (kc, vc), (n("k"), n("v")), (owner - 1) % c)
            for a, _, kb, _, flops, s in self._score_blocks(dev, n, q, kc, owner):
                part = dev.compute(n("ring_state"), lambda ss, vv: R.pack(R.block_state(ss, vv, dh)), s,
                                   vc[:, kb], keep=False, label=label, flops=flops)  # fmt: skip
                states[a] = part if states[a] is None else dev.compute(
                    n("ring_state"), lambda x, y: R.pack(R.merge(R.unpack(x), R.unpack(y))), states[a], part,
                    keep=False, label=label,
                )  # fmt: skip
            if step < c - 1:
                kc, vc = (dev.wait(r) for r in recvs)
                for req in sends:
                    dev.wait(req)
        if c > 1:  # the visiting blocks used the names k and v; this device's own are still what it holds
            dev.hold(n("k"), k, index=self.split.index("heads"))
            dev.hold(n("v"), v, index=self.split.index("heads"))
        attn = dev.compute(n("attn"), lambda a, b: np.concatenate([R.finish(R.unpack(a)), R.finish(R.unpack(b))], axis=1),
                           states[0], states[1], index=self.split.index("heads"))  # fmt: skip
        lse = [dev.compute(n(f"attn_lse{a}"), lambda st: R.log_sum_exp(R.unpack(st)), states[a], label=label)
               for a in range(2)]  # fmt: skip
        self.saved[g] = (q, k, v, attn, lse)
        return attn

    # ---- backward --------------------------------------------------------------------------------
    def backward(self, dev: Device, dattn: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = partial(vname, self.layer, g=g)
        c, me, dh = self.split.cp, self.split.cp_index, self.dh
        label = f"ring attention L{self.layer} mb{g} backward"
        q, k, v, attn, lse = self.saved.pop(g)
        mine = self._chunks(me)
        d_rows = [R.row_term(dattn[:, qa], attn[:, qa], dh) for qa, _ in mine]
        dq = np.zeros_like(q)
        kc, vc = k, v
        dkc, dvc = np.zeros_like(k), np.zeros_like(v)  # the block's dK and dV so far, travelling with it
        for step in range(c):
            owner = (me - step) % c
            if step < c - 1:  # the next keys and values travel while this block is computed
                sends, recvs = self._pass(dev, g, c + 2 * step, (kc, vc), (n("k"), n("v")), (owner - 1) % c)
            dk_here, dv_here = np.zeros_like(kc), np.zeros_like(vc)
            for a, qa, kb, index, flops, s in self._score_blocks(dev, n, q, kc, owner):
                p = dev.compute(n("probs"), R.block_probs, s, lse[a], index=index, keep=False)
                dp = dev.compute(n("dprobs"), partial(R.block_dprobs, head_dim=dh), dattn[:, qa], vc[:, kb],
                                 index=index, keep=False, flops=flops)  # fmt: skip
                ds = dev.compute(n("dscores"), R.block_dscores, p, dp, d_rows[a], index=index, keep=False)
                dq[:, qa] += dev.compute(n("ring_dq"), partial(R.q_grad, head_dim=dh), ds, kc[:, kb],
                                         keep=False, label=label, flops=flops)  # fmt: skip
                dk_here[:, kb] += dev.compute(n("ring_dk_term"), partial(R.k_grad, head_dim=dh), ds, q[:, qa],
                                              keep=False, label=label, flops=flops)  # fmt: skip
                dv_here[:, kb] += dev.compute(n("ring_dv_term"), partial(R.v_grad, head_dim=dh), p, dattn[:, qa],
                                              keep=False, label=label, flops=flops)  # fmt: skip
            dkc = dev.compute(n("ring_dk"), np.add, dkc, dk_here, keep=False, label=label)
            dvc = dev.compute(n("ring_dv"), np.add, dvc, dv_here, keep=False, label=label)
            if c == 1:
                continue
            # the block's sums go on with it (after the last hop, home to its owner: the next device)
            sums_sent, sums_recv = self._pass(dev, g, c + 2 * step + 1, (dkc, dvc), (None, None), (owner - 1) % c)
            if step < c - 1:
                kc, vc = (dev.wait(r) for r in recvs)
                for req in sends:
                    dev.wait(req)
            dkc, dvc = (dev.wait(r) for r in sums_recv)
            for req in sums_sent:
                dev.wait(req)
        index = self.split.index("heads")
        out = [
            dev.compute(n(what), _const(val), index=index, seconds=0.0)
            for what, val in (("dq", dq), ("dk", dkc), ("dv", dvc))
        ]
        return out[0], out[1], out[2]


def _const(value: np.ndarray):
    return lambda: value


def make_context_split(model: Transformer, rank: int, seq_len: int, group: Sequence[int], order: str) -> ContextSplit:
    return ContextSplit(model, tuple(group), rank, seq_len, order)
