"""The torch ops a simulated rank runs, priced by the cost model as the simulator's own ops are.

``Pricing`` is a ``TorchDispatchMode`` a simulated rank's thread runs its program under: every aten op
that computes (not a view, not a factory or an in-place fill such as a weight's random initialisation, not a
collective, not on the meta device) is passed on to the
rank's sink as an op of so many FLOPs (torch's own FLOP formulas for matrix products and convolutions,
``torch.utils.flop_counter``; one per output element otherwise), with its inputs and output known by
shape and dtype (``MetaArray``, for a cost model that prices memory traffic). The device records it,
labelled ``torch``, when the rank next asks it for something: the time passes on its clock, the op shows
on its timeline, and the checker, which compares named values, leaves it alone.

A DTensor op reaches the mode as the local ops DTensor runs on each rank, so a rank pays for its shard.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from ..cost.meta import MetaArray
from .context import current

# ops that move no numbers: their results are other views of memory, or fresh memory with nothing computed
_FREE = {"detach", "alias", "empty", "empty_like", "empty_strided", "lift_fresh", "_to_copy", "t", "clone"}
_NAMESPACES_SKIPPED = {"_c10d_functional", "c10d", "_dtensor", "c10d_functional", "_c10d_functional_autograd"}


def _meta(t: torch.Tensor) -> MetaArray | None:
    try:
        return MetaArray(tuple(t.shape), np.dtype(str(t.dtype).removeprefix("torch.")))
    except TypeError:  # a dtype NumPy does not name (bfloat16): priced by its shape alone
        return MetaArray(tuple(t.shape), np.float32)


class Pricing(TorchDispatchMode):
    """Hands each computing aten op of this thread's simulated rank to its sink (see the module docstring)."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if any(isinstance(t, DTensor) for t in ins):
            return NotImplemented  # DTensor runs it as local ops, which come back here, each rank's its own
        out = func(*args, **kwargs)
        ctx = current()
        if ctx is None or ctx.internal or ctx.sink is None:
            return out
        packet = func.overloadpacket
        name = packet.__name__
        if func.namespace in _NAMESPACES_SKIPPED or name in _FREE or func.is_view:
            return out
        outs = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if not outs or not ins or any(t.device.type == "meta" or isinstance(t, FakeTensor) for t in outs):
            return out  # (DTensor works out its placements on fake tensors: shapes, not work)
        if name.endswith("_") and len(ins) == 1:  # a tensor filled in place from nothing: initialisation
            return out
        formula = flop_registry.get(packet)
        flops = formula(*args, **kwargs, out_val=out) if formula is not None else max(t.numel() for t in outs)
        ctx.sink.priced(name, float(flops), [_meta(t) for t in ins], _meta(outs[0]))
        return out
