"""One transformer block on one device, as named ops: its forward, its backward, its part of the weights.

``Block`` runs the block of ``simulator.parallel.transformer.model`` on whatever part of it a device holds,
which a split decides (``simulator.parallel.transformer.sequence``): the heads and MLP columns of a tensor-parallel
rank, the sequence chunk of a sequence-parallel one, or everything on one device (the reference). The
split also supplies the four communication operators around the two regions (f and g in the
Megatron-LM paper, and their backwards), so the block's code is the same for every split:

    forward                                       backward
    ln1 = LN(x)                [outside]          dy -> g-bar -> dmlp (whole) ... dln2 (partial) -> f-bar
    ln1 -> f -> q, k, v        [heads]            dh = dy + LN2'(dln2)
    attention                  [heads]            dh -> g-bar -> dattn ... dq, dk, dv -> dln1 (partial) -> f-bar
    proj (partial) -> g        [outside]          dx = dh + LN1'(dln1)
    h = x + dropout(proj + bo) ...

Attention itself (scores, softmax, the weighted sum, and their backward) is an object of its own,
``LocalAttention``, so that context parallelism can swap in ring attention (``simulator.parallel.transformer.context``).

Values live in the device's memory under their model names from the op that makes them to their
last use, so the trace shows what each device holds (``simulator.parallel.measure`` reads activation
memory from it). Every op carries ``index=`` for the part it computes and ``partial=`` for partial
sums, so ``check`` compares each one with the one-device run.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from ...core.device import Device
from . import ops as T
from .model import Transformer, input_grad_name, pname, vname
from .sequence import TensorSplit


def mm_flops(x: np.ndarray, w: np.ndarray) -> float:
    """2 * tokens * d_in * d_out for (..., d_in) @ (d_in, d_out)."""
    return 2.0 * x.size * w.shape[1]


class LocalAttention:
    """Causal attention over the heads this device holds, the whole sequence on the device.

    Names: ``scores`` (freed once the softmax has it), ``probs`` (kept for the backward), ``attn``;
    backward ``dprobs``, ``dscores``, ``dq``, ``dk``, ``dv``.
    """

    def __init__(self, model: Transformer, split: TensorSplit, layer: int) -> None:
        self.model, self.split, self.layer = model, split, layer
        self.dh = model.head_dim

    def forward(self, dev: Device, q: np.ndarray, k: np.ndarray, v: np.ndarray, g: int) -> np.ndarray:
        n = partial(vname, self.layer, g=g)
        hi, ci = self.split.index("probs"), self.split.index("heads")
        flops = 2.0 * q.size * k.shape[1]
        scores = dev.compute(
            n("scores"), partial(T.attention_scores, head_dim=self.dh, causal=self.model.causal), q, k, index=hi,
            flops=flops,
        )  # fmt: skip
        probs = dev.compute(n("probs"), T.softmax, scores, index=hi)
        dev.free(n("scores"))
        return dev.compute(n("attn"), partial(T.attention_output, head_dim=self.dh), probs, v, index=ci, flops=flops)

    def backward(self, dev: Device, dattn: np.ndarray, g: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = partial(vname, self.layer, g=g)
        mem = dev.memory
        q, k, v, probs = mem[n("q")], mem[n("k")], mem[n("v")], mem[n("probs")]
        hi, ci = self.split.index("probs"), self.split.index("heads")
        flops = 2.0 * q.size * k.shape[1]
        dh = self.dh
        dv = dev.compute(n("dv"), partial(T.attention_v_grad, head_dim=dh), probs, dattn, index=ci, flops=flops)
        dp = dev.compute(n("dprobs"), partial(T.attention_probs_grad, head_dim=dh), dattn, v, index=hi, flops=flops)
        ds = dev.compute(n("dscores"), T.softmax_grad, dp, probs, index=hi)
        dev.free(n("dprobs"))
        dq = dev.compute(n("dq"), partial(T.attention_q_grad, head_dim=dh), ds, k, index=ci, flops=flops)
        dk = dev.compute(n("dk"), partial(T.attention_k_grad, head_dim=dh), ds, q, index=ci, flops=flops)
        for what in ("dscores", "probs"):
            dev.free(n(what))
        return dq, dk, dv


class Block:
    """Block ``layer`` on one device: its parameters (its part of them), forward and backward per microbatch.

    batch: the whole batch's shape (B, S, D), for the dropout masks; a microbatch's ``rows`` pick its
    sequences, and the split's ``seq`` its tokens.
    """

    def __init__(
        self,
        dev: Device,
        model: Transformer,
        split: TensorSplit,
        layer: int,
        params: dict[str, np.ndarray],
        batch: tuple[int, int, int],
        attention: Any = None,
    ) -> None:
        self.model, self.split, self.layer, self.batch = model, split, layer, batch
        make = getattr(split, "attention", None)  # a split with its own attention (context parallelism's ring)
        self.attention = attention or (make(layer) if make else LocalAttention(model, split, layer))
        self.p: dict[str, np.ndarray] = {}
        for what in ("Wq", "Wk", "Wv", "Wo", "bo", "W1", "b1", "W2", "b2", "gamma1", "beta1", "gamma2", "beta2"):
            index = split.param_index(what)
            value = np.asarray(params[pname(layer, what)])
            self.p[what] = dev.hold(
                pname(layer, what), value if index is None else value[index], index=index, doc=f"block {layer}'s {what}"
            )

    def _mask(self, dev: Device, site: int, g: int, rows: slice) -> np.ndarray | None:
        full = self.model.mask(self.layer, site, self.batch)
        if full is None:
            return None
        index = self.split.index("outside")
        local = full[rows] if index is None else full[rows][index]
        return dev.hold(
            vname(self.layer, f"mask{site}", g), local, index=index, doc="a dropout mask, kept entries scaled"
        )

    # ---- forward ---------------------------------------------------------------------------------
    def forward(self, dev: Device, x: np.ndarray, g: int, rows: slice) -> np.ndarray:
        """x: this device's part of the block's input (its sequence chunk under sequence parallelism)."""
        n = partial(vname, self.layer, g=g)
        p, split = self.p, self.split
        oi, ci, fi = split.index("outside"), split.index("heads"), split.index("ff")
        ln1 = dev.compute(n("ln1"), T.layer_norm, x, p["gamma1"], p["beta1"], index=oi)
        ln1 = split.enter(dev, n("ln1"), ln1)  # f
        q, k, v = (
            dev.compute(n(what), T.linear, ln1, p[w], index=ci, flops=mm_flops(ln1, p[w]))
            for what, w in (("q", "Wq"), ("k", "Wk"), ("v", "Wv"))
        )
        attn = self.attention.forward(dev, q, k, v, g)
        whole = (
            oi if split.partial is None else split.index("region")
        )  # complete on this device's tokens, or a partial sum
        proj = dev.compute(
            n("proj"), T.linear, attn, p["Wo"], partial=split.partial, index=whole, flops=mm_flops(attn, p["Wo"])
        )
        proj = split.exit(dev, n("proj"), proj)  # g
        h = self._residual(dev, x, proj, "bo", "attn_out", 1, "h", g, rows)
        ln2 = dev.compute(n("ln2"), T.layer_norm, h, p["gamma2"], p["beta2"], index=oi)
        ln2 = split.enter(dev, n("ln2"), ln2)  # f
        u = dev.compute(n("u"), T.linear_bias, ln2, p["W1"], p["b1"], index=fi, flops=mm_flops(ln2, p["W1"]))
        act = dev.compute(n("act"), T.gelu, u, index=fi)
        down = dev.compute(
            n("down"), T.linear, act, p["W2"], partial=split.partial, index=whole, flops=mm_flops(act, p["W2"])
        )
        down = split.exit(dev, n("down"), down)  # g
        return self._residual(dev, h, down, "b2", "mlp_out", 2, "y", g, rows)

    def _residual(self, dev, x, summed, bias, out, site, result, g, rows):
        """x + dropout(summed + bias), on this device's tokens."""
        n = partial(vname, self.layer, g=g)
        oi = self.split.index("outside")
        branch = dev.compute(n(out), T.add, summed, self.p[bias], index=oi)
        dev.free(n("proj" if site == 1 else "down"))
        mask = self._mask(dev, site, g, rows)
        if mask is not None:
            dropped = "attn_drop" if site == 1 else "mlp_drop"
            branch = dev.compute(n(dropped), T.scale, branch, mask, index=oi)
            dev.free(n(out))
            out = dropped
        y = dev.compute(n(result), T.add, x, branch, index=oi)
        dev.free(n(out))
        return y

    # ---- backward --------------------------------------------------------------------------------
    def backward(self, dev: Device, dy: np.ndarray, g: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """dy: the gradient of this device's part of the block's output. Returns the gradient of its part
        of the block's input, and the microbatch's gradients of this device's parameters (by short name)."""
        n = partial(vname, self.layer, g=g)
        mem, p, split = dev.memory, self.p, self.split
        oi, fi = split.index("outside"), split.index("ff")
        grads: dict[str, np.ndarray] = {}

        def grad(what: str, fn, *inputs, **kw) -> None:
            part = split.grad_partial(what)  # a sum over this device's tokens only: one term of the gradient
            grads[what] = dev.compute(n("d" + what), fn, *inputs, index=split.param_index(what), partial=part, **kw)

        # the MLP, backwards
        dmlp = self._undrop(dev, dy, 2, "dmlp_out", g)
        grad("b2", T.token_sum, dmlp)
        dmlp_name = n("dmlp_out") if mem.get(n("mask2")) is not None else n("dy")
        dmlp = split.exit_grad(dev, dmlp_name, dmlp)  # g-bar
        act, u = mem[n("act")], mem[n("u")]
        dact = dev.compute(n("dact"), T.linear_input_grad, dmlp, p["W2"], index=fi, flops=mm_flops(dmlp, p["W2"].T))
        grad("W2", T.linear_weight_grad, act, dmlp, flops=mm_flops(dmlp, p["W2"].T))
        du = dev.compute(n("du"), T.gelu_grad, dact, u, index=fi)
        dev.free(n("dact"))
        ln2 = split.regathered(dev, n("ln2"), mem[n("ln2")])
        grad("W1", T.linear_weight_grad, ln2, du, flops=mm_flops(du, p["W1"].T))
        grad("b1", T.token_sum, du)
        whole = (
            oi if split.partial is None else split.index("region")
        )  # complete on this device's tokens, or a partial sum
        dln2 = dev.compute(
            n("dln2"),
            T.linear_input_grad,
            du,
            p["W1"],
            partial=split.partial,
            index=whole,
            flops=mm_flops(du, p["W1"].T),
        )
        dln2 = split.enter_grad(dev, n("dln2"), dln2)  # f-bar
        h = mem[n("h")]
        grad("gamma2", T.layer_norm_gamma_grad, dln2, h)
        grad("beta2", T.token_sum, dln2)
        dh = dev.compute(n("dh"), _ln_residual_grad, dy, dln2, h, p["gamma2"], index=oi)
        self._free(dev, g, "act", "u", "du", "ln2", "h", "dln2", "mask2", "dmlp_out", "dy")
        # attention, backwards
        dattn_out = self._undrop(dev, dh, 1, "dattn_out", g)
        grad("bo", T.token_sum, dattn_out)
        out_name = n("dattn_out") if mem.get(n("mask1")) is not None else n("dh")
        dattn_out = split.exit_grad(dev, out_name, dattn_out)  # g-bar
        attn = mem[n("attn")]
        dattn = dev.compute(n("dattn"), T.linear_input_grad, dattn_out, p["Wo"], index=split.index("heads"))
        grad("Wo", T.linear_weight_grad, attn, dattn_out, flops=mm_flops(attn, p["Wo"]))
        dq, dk, dv = self.attention.backward(dev, dattn, g)
        ln1 = split.regathered(dev, n("ln1"), mem[n("ln1")])
        for what, d in (("Wq", dq), ("Wk", dk), ("Wv", dv)):
            grad(what, T.linear_weight_grad, ln1, d, flops=mm_flops(ln1, p[what]))
        dln1 = dev.compute(
            n("dln1"), T.qkv_input_grad, dq, dk, dv, p["Wq"], p["Wk"], p["Wv"], partial=split.partial, index=whole,
            flops=3 * mm_flops(dq, p["Wq"].T),
        )  # fmt: skip
        dln1 = split.enter_grad(dev, n("dln1"), dln1)  # f-bar
        x = mem[_input_of(self.layer, g)]
        grad("gamma1", T.layer_norm_gamma_grad, dln1, x)
        grad("beta1", T.token_sum, dln1)
        dx = dev.compute(input_grad_name(self.layer, g), _ln_residual_grad, dh, dln1, x, p["gamma1"], index=oi)
        self._free(dev, g, "attn", "dattn", "dq", "dk", "dv", "q", "k", "v", "ln1", "dln1", "mask1", "dattn_out", "dh")
        dev.free(_input_of(self.layer, g))
        return dx, grads

    def _undrop(self, dev: Device, d: np.ndarray, site: int, name: str, g: int) -> np.ndarray:
        mask = dev.memory.get(vname(self.layer, f"mask{site}", g))
        if mask is None:
            return d
        return dev.compute(vname(self.layer, name, g), T.scale, d, mask, index=self.split.index("outside"))

    def _free(self, dev: Device, g: int, *whats: str) -> None:
        for what in whats:
            name = vname(self.layer, what, g)
            if name in dev.memory:
                dev.free(name)


def _input_of(layer: int, g: int) -> str:
    return f"x.mb{g}" if layer == 0 else vname(layer - 1, "y", g)


def _ln_residual_grad(dres: np.ndarray, dln: np.ndarray, x: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """The gradient into a residual stream x -> x + f(LN(x)): straight through, plus through the layer norm."""
    return dres + T.layer_norm_input_grad(dln, x, gamma)
