"""The arithmetic of ring attention: attention of some queries over one block of keys at a time.

Ring attention (Liu et al. 2023, "Ring Attention with Blockwise Transformers"; the online softmax of
Milakov and Gimelshein 2018 and FlashAttention) never forms a row of the softmax whole. For a block of
keys it keeps, per query and head, the running maximum m, the running sum l of exp(s - m), and the
running unnormalised output o = sum exp(s - m) v; two blocks' states merge exactly:

    m = max(m1, m2)     l = l1 e^(m1 - m) + l2 e^(m2 - m)     o = o1 e^(m1 - m) + o2 e^(m2 - m)

and at the end the output is o / l and the log-sum-exp of the row lse = m + log l. The backward
recomputes each block's probabilities from the scores and lse, P = exp(S - lse), and needs per query
D = sum(dO * O) (the softmax backward's row term): dS = P * (dP - D).

Positions are global token positions (arrays: a device's tokens need not be contiguous, see
``simulator.parallel.transformer.context``); causal masking compares them. A state is a tuple (o, m, l) with o of shape
(B, H, n, Dh) and m, l of shape (B, H, n).
"""

from __future__ import annotations

import numpy as np

from .ops import heads, merge_heads

State = tuple[np.ndarray, np.ndarray, np.ndarray]


def masked_out(qpos: np.ndarray, kpos: np.ndarray) -> bool:
    """True when the block contributes nothing and is skipped: every key comes after every query, or it has
    no queries or no keys (an empty chunk: torch.chunk makes fewer, larger chunks when they do not divide S)."""
    return not len(qpos) or not len(kpos) or bool(kpos.min() > qpos.max())


def empty_state(batch: int, n_heads: int, head_dim: int, dtype: np.dtype) -> np.ndarray:
    """The packed state (``pack``) of no queries: what an empty chunk's attention starts and ends with."""
    return np.zeros((batch, n_heads, 0, head_dim + 2), dtype=dtype)


def block_scores(
    q: np.ndarray, k: np.ndarray, head_dim: int, qpos: np.ndarray, kpos: np.ndarray, causal: bool = True
) -> np.ndarray:
    """S = Q K^T / sqrt(Dh) for these queries and keys, -inf where a key comes after its query: (B, H, n, m)."""
    s = heads(q, head_dim) @ heads(k, head_dim).transpose(0, 1, 3, 2) / np.sqrt(head_dim)
    if causal:
        s = np.where(kpos[None, :] > qpos[:, None], -np.inf, s)
    return s


def block_state(s: np.ndarray, v: np.ndarray, head_dim: int) -> State:
    """One block's (o, m, l): its rows' maximum, sum of exponentials and unnormalised output."""
    m = s.max(axis=-1)
    safe = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - safe[..., None])  # exp(-inf) = 0: masked keys add nothing
    return p @ heads(v, head_dim), m, p.sum(axis=-1)


def merge(a: State, b: State) -> State:
    """Two blocks' states as one (the online softmax): exact, whatever the order."""
    (o1, m1, l1), (o2, m2, l2) = a, b
    m = np.maximum(m1, m2)
    safe = np.where(np.isfinite(m), m, 0.0)
    w1 = np.where(np.isfinite(m1), np.exp(m1 - safe), 0.0)
    w2 = np.where(np.isfinite(m2), np.exp(m2 - safe), 0.0)
    return o1 * w1[..., None] + o2 * w2[..., None], m, l1 * w1 + l2 * w2


def finish(state: State) -> np.ndarray:
    """The attention output o / l, heads side by side: (B, n, H*Dh)."""
    o, _, total = state
    return merge_heads(o / total[..., None])


def log_sum_exp(state: State) -> np.ndarray:
    """lse = m + log l per query and head: (B, H, n), what the backward needs to recompute P."""
    _, m, total = state
    return m + np.log(total)


def pack(state: State) -> np.ndarray:
    """A state as one array, (B, H, n, Dh + 2): o, then m, then l (an op's output is one array)."""
    o, m, total = state
    return np.concatenate([o, m[..., None], total[..., None]], axis=-1)


def unpack(packed: np.ndarray) -> State:
    return packed[..., :-2], packed[..., -2], packed[..., -1]


def block_probs(s: np.ndarray, lse: np.ndarray) -> np.ndarray:
    """P = exp(S - lse): these queries' final softmax probabilities over these keys."""
    return np.exp(s - lse[..., None])


def row_term(do: np.ndarray, o: np.ndarray, head_dim: int) -> np.ndarray:
    """D = sum(dO * O) over each head's features: (B, H, n)."""
    return (heads(do, head_dim) * heads(o, head_dim)).sum(axis=-1)


def block_dprobs(do: np.ndarray, v: np.ndarray, head_dim: int) -> np.ndarray:
    return heads(do, head_dim) @ heads(v, head_dim).transpose(0, 1, 3, 2)


def block_dscores(p: np.ndarray, dp: np.ndarray, d: np.ndarray) -> np.ndarray:
    return p * (dp - d[..., None])


def q_grad(ds: np.ndarray, k: np.ndarray, head_dim: int) -> np.ndarray:
    """This block's term of dQ: dS K / sqrt(Dh), (B, n, H*Dh)."""
    return merge_heads(ds @ heads(k, head_dim)) / np.sqrt(head_dim)


def k_grad(ds: np.ndarray, q: np.ndarray, head_dim: int) -> np.ndarray:
    """These queries' term of the block's dK: dS^T Q / sqrt(Dh), (B, m, H*Dh)."""
    return merge_heads(ds.transpose(0, 1, 3, 2) @ heads(q, head_dim)) / np.sqrt(head_dim)


def v_grad(p: np.ndarray, do: np.ndarray, head_dim: int) -> np.ndarray:
    """These queries' term of the block's dV: P^T dO, (B, m, H*Dh)."""
    return merge_heads(p.transpose(0, 1, 3, 2) @ heads(do, head_dim))
