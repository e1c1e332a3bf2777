"""The arithmetic of a transformer block, one function per op, each forward with its hand-written backward.

Shapes: B sequences of S tokens, model width D = H heads x Dh, MLP width F. Activations are (B, S, D);
attention scores and probabilities (B, H, Sq, Sk). A head h owns the columns h*Dh .. (h+1)*Dh of q, k,
v and of the attention output, so a device that holds some heads holds a block of columns, and the
functions here work on any number of heads: they read it from the width of what they are given.

Positions: causal masking compares global token positions, so each attention function takes the
position of the first query and the first key (``q_at``, ``k_at``): a device with a chunk of the
sequence (context parallelism) passes its chunk's offsets, one device passes zeros.

The backward formulas, for reference (x-hat the normalised input, r = 1 / sqrt(var + eps)):

    layer norm   y = x-hat * gamma + beta      dx = r / D * (D g - sum(g) - x-hat sum(g x-hat)),  g = dy * gamma
    softmax      P = softmax(S)                dS = P * (dP - sum(dP * P))  (row by row)
    attention    O = P V                       dP = dO V^T,  dV = P^T dO
    scores       S = Q K^T / sqrt(Dh)          dQ = dS K / sqrt(Dh),  dK = dS^T Q / sqrt(Dh)
    gelu (tanh)  a = gelu(u)                   du = da * gelu'(u)

Every function is pure NumPy, so the same ones run on one device and on every shard.
"""

from __future__ import annotations

import numpy as np

EPS = 1e-5
_GELU_C = np.sqrt(2.0 / np.pi)


# ---- layer norm --------------------------------------------------------------------------------
def _normalised(x: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    mu = x.mean(axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + eps)
    return (x - mu) * r, r


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = EPS) -> np.ndarray:
    """Normalise each token over its D features, then scale and shift: works on any tokens (a sequence shard)."""
    xhat, _ = _normalised(x, eps)
    return xhat * gamma + beta


def layer_norm_input_grad(dy: np.ndarray, x: np.ndarray, gamma: np.ndarray, eps: float = EPS) -> np.ndarray:
    """dL/dx of layer norm, token by token (no token needs another's: a sequence shard suffices)."""
    xhat, r = _normalised(x, eps)
    g = dy * gamma
    d = x.shape[-1]
    return r / d * (d * g - g.sum(axis=-1, keepdims=True) - xhat * (g * xhat).sum(axis=-1, keepdims=True))


def layer_norm_gamma_grad(dy: np.ndarray, x: np.ndarray, eps: float = EPS) -> np.ndarray:
    """dL/dgamma: a sum over every token, so a sequence shard gives one term of it."""
    xhat, _ = _normalised(x, eps)
    return (dy * xhat).reshape(-1, x.shape[-1]).sum(axis=0)


def token_sum(dy: np.ndarray) -> np.ndarray:
    """The sum over every token (B and S): the gradient of a bias or of layer norm's beta."""
    return dy.reshape(-1, dy.shape[-1]).sum(axis=0)


# ---- linear layers -----------------------------------------------------------------------------
def linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """x @ W over the last dimension: (B, S, Din) @ (Din, Dout) -> (B, S, Dout)."""
    return x @ w


def linear_bias(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return x @ w + b


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b


def linear_input_grad(dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    return dy @ w.T


def linear_weight_grad(x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """x^T dy summed over every token: (Din, Dout)."""
    return x.reshape(-1, x.shape[-1]).T @ dy.reshape(-1, dy.shape[-1])


def qkv_input_grad(dq: np.ndarray, dk: np.ndarray, dv: np.ndarray, wq: np.ndarray, wk: np.ndarray, wv: np.ndarray):
    """The gradient reaching layer norm's output through the three projections: one sum of three products."""
    return dq @ wq.T + dk @ wk.T + dv @ wv.T


# ---- attention ---------------------------------------------------------------------------------
def heads(x: np.ndarray, head_dim: int) -> np.ndarray:
    """(B, S, h*Dh) -> (B, h, S, Dh)."""
    b, s, w = x.shape
    return x.reshape(b, s, w // head_dim, head_dim).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(B, h, S, Dh) -> (B, S, h*Dh): the heads side by side, head h in columns h*Dh .. (h+1)*Dh."""
    b, h, s, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, s, h * d)


def causal_mask(sq: int, sk: int, q_at: int = 0, k_at: int = 0) -> np.ndarray:
    """True where the key comes after the query (global positions q_at + i, k_at + j): those are masked."""
    return (k_at + np.arange(sk))[None, :] > (q_at + np.arange(sq))[:, None]


def attention_scores(
    q: np.ndarray, k: np.ndarray, head_dim: int, causal: bool = True, q_at: int = 0, k_at: int = 0
) -> np.ndarray:
    """S = Q K^T / sqrt(Dh) per head, -inf where causality forbids: (B, h, Sq, Sk)."""
    s = heads(q, head_dim) @ heads(k, head_dim).transpose(0, 1, 3, 2) / np.sqrt(head_dim)
    if causal:
        s = np.where(causal_mask(q.shape[1], k.shape[1], q_at, k_at), -np.inf, s)
    return s


def softmax(s: np.ndarray) -> np.ndarray:
    """Row by row over the keys; a row with every key masked gives zeros (it attends to nothing)."""
    top = np.max(s, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(s - top)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def attention_output(p: np.ndarray, v: np.ndarray, head_dim: int) -> np.ndarray:
    """O = P V per head, heads merged back: (B, Sq, h*Dh)."""
    return merge_heads(p @ heads(v, head_dim))


def attention_probs_grad(do: np.ndarray, v: np.ndarray, head_dim: int) -> np.ndarray:
    """dP = dO V^T per head: (B, h, Sq, Sk)."""
    return heads(do, head_dim) @ heads(v, head_dim).transpose(0, 1, 3, 2)


def attention_v_grad(p: np.ndarray, do: np.ndarray, head_dim: int) -> np.ndarray:
    """dV = P^T dO per head, merged: (B, Sk, h*Dh)."""
    return merge_heads(p.transpose(0, 1, 3, 2) @ heads(do, head_dim))


def softmax_grad(dp: np.ndarray, p: np.ndarray) -> np.ndarray:
    """dS = P * (dP - sum(dP * P)) row by row (masked entries have P = 0, so their dS is 0)."""
    return p * (dp - (dp * p).sum(axis=-1, keepdims=True))


def attention_q_grad(ds: np.ndarray, k: np.ndarray, head_dim: int) -> np.ndarray:
    return merge_heads(ds @ heads(k, head_dim)) / np.sqrt(head_dim)


def attention_k_grad(ds: np.ndarray, q: np.ndarray, head_dim: int) -> np.ndarray:
    return merge_heads(ds.transpose(0, 1, 3, 2) @ heads(q, head_dim)) / np.sqrt(head_dim)


# ---- the MLP's nonlinearity, dropout and the loss ---------------------------------------------
def gelu(u: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (GPT-2, Megatron-LM)."""
    return 0.5 * u * (1.0 + np.tanh(_GELU_C * (u + 0.044715 * u**3)))


def gelu_grad(da: np.ndarray, u: np.ndarray) -> np.ndarray:
    t = np.tanh(_GELU_C * (u + 0.044715 * u**3))
    return da * (0.5 * (1.0 + t) + 0.5 * u * (1.0 - t * t) * _GELU_C * (1.0 + 3 * 0.044715 * u**2))


def dropout_mask(seed: int, shape: tuple[int, ...], p: float) -> np.ndarray:
    """The kept entries scaled by 1 / (1 - p), zeros elsewhere, for the whole (B, S, D) activation.

    A function of the seed and the global shape only: a device that holds a shard slices the same mask,
    so one device and any split drop the same entries (Megatron keeps per-region RNG states for this).
    """
    keep = np.random.default_rng(seed).random(shape) >= p
    return keep / (1.0 - p)


def scale(x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Dropout forward (x times the mask) and backward (the gradient times the same mask)."""
    return x * mask


def mse_loss(factor: float, y: np.ndarray, t: np.ndarray) -> np.ndarray:
    """0.5 * sum((y - t)^2) * factor, with factor one over the tokens the loss is a mean over."""
    d = y - t
    return np.array(0.5 * float(np.sum(d * d)) * factor)


def mse_grad(factor: float, y: np.ndarray, t: np.ndarray) -> np.ndarray:
    return (y - t) * factor
