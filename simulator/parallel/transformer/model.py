"""A small transformer: pre-norm blocks of causal multi-head attention and a GELU MLP, with residuals.

Block l maps its input x (B, S, D) to y (B, S, D), GPT-2 / Megatron-LM style:

    ln1  = LayerNorm(x; gamma1, beta1)
    q, k, v = ln1 Wq, ln1 Wk, ln1 Wv                     (D x D each; head h = columns h*Dh..(h+1)*Dh)
    probs = softmax(q_h k_h^T / sqrt(Dh), causal)        (B, H, S, S)
    attn  = probs_h v_h, heads side by side              (B, S, D)
    h     = x + dropout(attn Wo + bo)
    ln2   = LayerNorm(h; gamma2, beta2)
    u     = ln2 W1 + b1,  act = gelu(u)                  (B, S, F)
    y     = h + dropout(act W2 + b2)

The last block's output is compared with targets t by a mean squared error over the tokens of the
batch, 0.5 * sum((y - t)^2) / (B S), so the gradient of a step is a sum over microbatches (as in
``simulator.parallel.mlp``). ``Transformer.gradients`` is the whole batch in plain NumPy, without any
device: the independent check of the hand-written backward (tests compare it with finite differences)
and of every run. ``step.transformer_reference`` is the same step as a one-device rank program naming every
value (``simulator.parallel.transformer.block``), the reference every parallel run is checked against.

Names: parameters ``L{l}.Wq`` ..., per microbatch g ``L{l}.q.mb{g}`` ..., gradients ``L{l}.dWq`` (and the
microbatch's part ``L{l}.dWq.mb{g}``); the first block's input is ``x.mb{g}``, block l's input is block
l-1's output ``L{l-1}.y.mb{g}``, and the gradient flowing into it ``L{l-1}.dy.mb{g}`` (``dx.mb{g}`` for
the first block).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import ops as T

WEIGHTS = ("Wq", "Wk", "Wv", "Wo", "bo", "W1", "b1", "W2", "b2", "gamma1", "beta1", "gamma2", "beta2")


def pname(layer: int, what: str) -> str:
    """The name of a block's parameter or gradient: ``pname(0, "Wq") == "L0.Wq"``."""
    return f"L{layer}.{what}"


def vname(layer: int, what: str, g: int) -> str:
    """The name of a block's value for microbatch g: ``vname(0, "q", 1) == "L0.q.mb1"``."""
    return f"L{layer}.{what}.mb{g}"


def input_name(layer: int, g: int) -> str:
    """What block ``layer`` takes: the batch's input for the first block, the previous block's output after."""
    return f"x.mb{g}" if layer == 0 else vname(layer - 1, "y", g)


def input_grad_name(layer: int, g: int) -> str:
    """The gradient flowing back into block ``layer``'s input."""
    return f"dx.mb{g}" if layer == 0 else vname(layer - 1, "dy", g)


@dataclass(frozen=True)
class Transformer:
    """The model's sizes: width D = ``d_model``, ``heads`` heads of D / heads, MLP width ``d_ff``.

    dropout: the probability of dropping an entry after the attention and after the MLP (0: none);
    the masks are a function of ``seed``, the block, the site and the whole batch's shape (see
    ``transformer_ops.dropout_mask``), so every split of the batch or the sequence drops the same entries.
    """

    d_model: int = 8
    heads: int = 2
    d_ff: int = 16
    blocks: int = 1
    dropout: float = 0.0
    causal: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.d_model % self.heads:
            raise ValueError(f"d_model = {self.d_model} does not split into {self.heads} heads of equal width")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout = {self.dropout}: give a probability in [0, 1)")
        if self.blocks < 1:
            raise ValueError(f"blocks = {self.blocks}: a transformer needs at least one block")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    def init(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Parameters for every block, scaled so attention and GELU stay in their interesting range."""
        rng = np.random.default_rng(seed)
        d, f = self.d_model, self.d_ff
        params: dict[str, np.ndarray] = {}
        for layer in range(self.blocks):
            shapes = {"Wq": (d, d), "Wk": (d, d), "Wv": (d, d), "Wo": (d, d), "W1": (d, f), "W2": (f, d)}
            for name, shape in shapes.items():
                params[pname(layer, name)] = rng.normal(0.0, 1.0 / np.sqrt(shape[0]), size=shape)
            for name, n in (("bo", d), ("b1", f), ("b2", d), ("beta1", d), ("beta2", d)):
                params[pname(layer, name)] = rng.normal(0.0, 0.1, size=(n,))
            for name in ("gamma1", "gamma2"):
                params[pname(layer, name)] = 1.0 + rng.normal(0.0, 0.1, size=(d,))
        return params

    def data(self, batch: int, seq: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """Inputs x and targets t, both (batch, seq, d_model)."""
        rng = np.random.default_rng(seed)
        shape = (batch, seq, self.d_model)
        return rng.normal(size=shape), rng.normal(size=shape)

    def check_batch(self, x: np.ndarray, t: np.ndarray) -> None:
        if x.ndim != 3 or x.shape[2] != self.d_model:
            raise ValueError(f"x has shape {x.shape}; this transformer takes (batch, seq, {self.d_model})")
        if t.shape != x.shape:
            raise ValueError(f"t has shape {t.shape}; it must be x's, {x.shape}")

    def mask(self, layer: int, site: int, shape: tuple[int, ...]) -> np.ndarray | None:
        """The dropout mask of block ``layer`` at ``site`` (1: after attention, 2: after the MLP), whole batch."""
        if self.dropout == 0.0:
            return None
        return T.dropout_mask(self.seed * 1_000_003 + layer * 2 + site, shape, self.dropout)

    # ---- plain NumPy, whole batch: the independent check ------------------------------------------
    def loss(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> float:
        """The mean squared error of the whole batch (for finite differences)."""
        y = x
        for layer in range(self.blocks):
            y = self._block_forward(params, layer, y)[-1]["y"]
        return float(T.mse_loss(1.0 / (x.shape[0] * x.shape[1]), y, t))

    def _block_forward(self, params, layer, x):
        p = {w: params[pname(layer, w)] for w in WEIGHTS}
        dh = self.head_dim
        c: dict[str, np.ndarray] = {"x": x}
        c["ln1"] = T.layer_norm(x, p["gamma1"], p["beta1"])
        c["q"], c["k"], c["v"] = (T.linear(c["ln1"], p[w]) for w in ("Wq", "Wk", "Wv"))
        c["probs"] = T.softmax(T.attention_scores(c["q"], c["k"], dh, self.causal))
        c["attn"] = T.attention_output(c["probs"], c["v"], dh)
        out = T.linear_bias(c["attn"], p["Wo"], p["bo"])
        m1 = self.mask(layer, 1, x.shape)
        c["h"] = x + (out if m1 is None else T.scale(out, m1))
        c["ln2"] = T.layer_norm(c["h"], p["gamma2"], p["beta2"])
        c["u"] = T.linear_bias(c["ln2"], p["W1"], p["b1"])
        c["act"] = T.gelu(c["u"])
        out = T.linear_bias(c["act"], p["W2"], p["b2"])
        m2 = self.mask(layer, 2, x.shape)
        c["y"] = c["h"] + (out if m2 is None else T.scale(out, m2))
        return p, (m1, m2), c

    def gradients(self, params: dict[str, np.ndarray], x: np.ndarray, t: np.ndarray) -> dict[str, np.ndarray]:
        """The loss and every parameter's gradient of the whole batch on one device, in plain NumPy."""
        self.check_batch(x, t)
        caches, y = [], x
        for layer in range(self.blocks):
            caches.append(self._block_forward(params, layer, y))
            y = caches[-1][2]["y"]
        factor = 1.0 / (x.shape[0] * x.shape[1])
        out = {"loss": T.mse_loss(factor, y, t)}
        dy = T.mse_grad(factor, y, t)
        for layer in reversed(range(self.blocks)):
            grads, dy = self._block_backward(caches[layer], dy)
            out |= {pname(layer, "d" + w): g for w, g in grads.items()}
        return out

    def _block_backward(self, cache, dy):
        p, (m1, m2), c = cache
        dh_ = self.head_dim
        g: dict[str, np.ndarray] = {}
        dout = dy if m2 is None else T.scale(dy, m2)
        g["b2"], g["W2"] = T.token_sum(dout), T.linear_weight_grad(c["act"], dout)
        du = T.gelu_grad(T.linear_input_grad(dout, p["W2"]), c["u"])
        g["b1"], g["W1"] = T.token_sum(du), T.linear_weight_grad(c["ln2"], du)
        dln2 = T.linear_input_grad(du, p["W1"])
        g["gamma2"], g["beta2"] = T.layer_norm_gamma_grad(dln2, c["h"]), T.token_sum(dln2)
        dh = dy + T.layer_norm_input_grad(dln2, c["h"], p["gamma2"])
        dout = dh if m1 is None else T.scale(dh, m1)
        g["bo"], g["Wo"] = T.token_sum(dout), T.linear_weight_grad(c["attn"], dout)
        dattn = T.linear_input_grad(dout, p["Wo"])
        dv = T.attention_v_grad(c["probs"], dattn, dh_)
        ds = T.softmax_grad(T.attention_probs_grad(dattn, c["v"], dh_), c["probs"])
        dq, dk = T.attention_q_grad(ds, c["k"], dh_), T.attention_k_grad(ds, c["q"], dh_)
        for w, d in (("Wq", dq), ("Wk", dk), ("Wv", dv)):
            g[w] = T.linear_weight_grad(c["ln1"], d)
        dln1 = T.qkv_input_grad(dq, dk, dv, p["Wq"], p["Wk"], p["Wv"])
        g["gamma1"], g["beta1"] = T.layer_norm_gamma_grad(dln1, c["x"]), T.token_sum(dln1)
        return g, dh + T.layer_norm_input_grad(dln1, c["x"], p["gamma1"])
