"""A decoder-only transformer's shapes, and the named ones (GPT-3, the Megatron-LM papers' models, Llama).

``Transformer`` holds what the what-if needs to count FLOPs, bytes and parameters: layers, width, heads
(and key/value heads for grouped-query attention), the MLP's width and kind (GeLU, or SwiGLU's three
matrices), the sequence length, the vocabulary, and, for a mixture of experts, the experts per layer and
how many each token visits. ``MODELS`` names the shapes the papers and model cards give.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Transformer:
    """A GPT-style decoder's shapes (defaults: GPT-3 175B).

    kv_heads: key/value heads (grouped-query attention); None for as many as ``heads``
    ffn:      the MLP's inner width; None for 4 x hidden
    mlp:      "gelu" (two matrices) or "swiglu" (three: gate, up and down)
    bias, dropout, norm: GPT's linear biases, dropout after attention and MLP, and LayerNorm; Llama has
              none of the first two and RMSNorm
    experts, top_k: a mixture of experts in place of every MLP (0: dense)
    tied:     the output layer shares the token embedding's weights (GPT, Megatron-LM's default)
    alibi:    ALiBi's position bias added to the attention scores (BLOOM, MPT) instead of position embeddings
    """

    layers: int = 96
    hidden: int = 12288
    heads: int = 96
    seq: int = 2048
    vocab: int = 50257
    dtype: Any = np.float16  # 2 bytes, standing for bf16 (NumPy has no bf16)
    kv_heads: int | None = None
    ffn: int | None = None
    mlp: str = "gelu"
    bias: bool = True
    dropout: bool = True
    norm: str = "layernorm"
    experts: int = 0
    top_k: int = 1
    tied: bool = True
    alibi: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        for field in ("layers", "hidden", "heads", "seq", "vocab"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Transformer({field}={value!r}): give a whole number >= 1")
        for field, low in (("kv_heads", 1), ("ffn", 1), ("experts", 0), ("top_k", 1)):
            value = getattr(self, field)
            optional = field in ("kv_heads", "ffn") and value is None  # None: as many as heads, 4 x hidden
            if not optional and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ValueError(f"Transformer({field}={value!r}): give a whole number >= {low}")
        if self.hidden % self.heads:
            raise ValueError(f"Transformer: hidden={self.hidden} does not split into {self.heads} heads evenly")
        if self.kv_heads is not None and (self.kv_heads < 1 or self.heads % self.kv_heads):
            raise ValueError(f"Transformer: kv_heads={self.kv_heads} must divide heads={self.heads}")
        if self.mlp not in ("gelu", "swiglu"):
            raise ValueError(f"Transformer(mlp={self.mlp!r}): choose 'gelu' or 'swiglu'")
        if self.norm not in ("layernorm", "rmsnorm"):
            raise ValueError(f"Transformer(norm={self.norm!r}): choose 'layernorm' or 'rmsnorm'")
        if self.experts < 0 or (self.experts and not 1 <= self.top_k <= self.experts):
            raise ValueError(f"Transformer: top_k={self.top_k} must be from 1 to experts={self.experts}")
        if not self.experts and self.top_k != 1:
            raise ValueError(f"Transformer: top_k={self.top_k} needs experts (a mixture of experts); this one is dense")

    @classmethod
    def gpt3(cls) -> Transformer:
        """GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers of width 12,288, 96 heads, 2,048 tokens."""
        return cls(name="gpt3-175b")

    # ---- shapes -------------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv(self) -> int:
        """Key/value heads."""
        return self.kv_heads or self.heads

    @property
    def inner(self) -> int:
        """The MLP's inner width."""
        return self.ffn or 4 * self.hidden

    def padded_vocab(self, tp: int) -> int:
        """The vocabulary padded to a multiple of 128 per tensor-parallel rank, as Megatron-LM pads it
        (``--make-vocab-size-divisible-by 128``), so that each rank's share of the output layer is whole."""
        unit = 128 * tp
        return -(-self.vocab // unit) * unit

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    # ---- parameters ---------------------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        """Q, K, V and the output projection (with their biases)."""
        h, d = self.hidden, self.head_dim
        qkv = h * (self.heads + 2 * self.kv) * d
        return qkv + h * h + self.bias * ((self.heads + 2 * self.kv) * d + h)

    @property
    def mlp_params(self) -> int:
        """One MLP (one expert's, in a mixture of experts)."""
        h, f = self.hidden, self.inner
        if self.mlp == "swiglu":
            return 3 * h * f + self.bias * (2 * f + h)
        return 2 * h * f + self.bias * (f + h)

    @property
    def norm_params(self) -> int:
        return (2 if self.norm == "layernorm" else 1) * self.hidden

    @property
    def layer_params(self) -> int:
        """Weights and biases of one layer; for GPT: QKV and projection (4h^2 + 4h), MLP (8h^2 + 5h), norms (4h)."""
        experts = max(self.experts, 1) * self.mlp_params + self.experts * self.hidden  # (+ the router)
        return self.attention_params + experts + 2 * self.norm_params

    @property
    def embedding_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """All parameters: the layers, the embedding, the output layer unless tied, the final norm."""
        return self.layers * self.layer_params + self.embedding_params * (1 if self.tied else 2) + self.norm_params

    # ---- the older what-if's counts (full.Step3D) ------------------------------------------------
    def forward_flops(self, tokens: int) -> float:
        """One layer's forward over ``tokens`` tokens: the matmuls (24 T h^2) and attention (4 T s h)."""
        return 24 * tokens * self.hidden**2 + 4 * tokens * self.seq * self.hidden

    def activation_bytes(self, tokens: int, tp: int) -> int:
        """What one layer keeps for its backward (selective recomputation, tensor parallel over tp)."""
        return int(tokens * self.hidden * (10 + 24 / tp))


def _gpt(name: str, layers: int, hidden: int, heads: int, vocab: int = 51200, seq: int = 2048) -> Transformer:
    return Transformer(layers, hidden, heads, seq, vocab, name=name)


def _llama(name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int, seq: int, **more: Any):
    return Transformer(
        layers, hidden, heads, seq, vocab, kv_heads=kv, ffn=ffn, mlp="swiglu", bias=False, dropout=False,
        norm="rmsnorm", tied=False, name=name, **more,
    )  # fmt: skip


# Megatron-LM's GPT models (vocabulary padded to 51,200; Narayanan et al. 2021, Table 1; Korthikanti et al.
# 2022, Table 3), GPT-3 (Brown et al. 2020, Table 2.1), Llama 2 (Touvron et al. 2023, Table 1 and the released
# configs), Llama 3 (the Llama 3 Herd of Models paper, Table 3), Mixtral 8x7B (Jiang et al. 2024, Table 1).
_MODELS = [
    _gpt("megatron-1.7b", 24, 2304, 24),
    _gpt("megatron-3.6b", 30, 3072, 32),
    _gpt("megatron-7.5b", 36, 4096, 32),
    _gpt("megatron-18b", 40, 6144, 48),
    _gpt("megatron-22b", 48, 6144, 64),
    _gpt("megatron-39b", 48, 8192, 64),
    _gpt("megatron-76b", 60, 10240, 80),
    _gpt("megatron-145b", 80, 12288, 96),
    _gpt("megatron-310b", 96, 16384, 128),
    _gpt("megatron-530b", 105, 20480, 128),
    _gpt("megatron-1t", 128, 25600, 160),
    replace(Transformer.gpt3(), vocab=50257),
    _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
    _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
    _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
    _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    _llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192),
    _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096, experts=8, top_k=2),
]
MODELS: dict[str, Transformer] = {m.name: m for m in _MODELS}


def named_model(name: str) -> Transformer:
    """The model called ``name`` (see ``MODELS``)."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"no model named {name!r}; choose one of {', '.join(MODELS)}") from None
