"""A small transformer, and the ways its step is split over devices.

============  ==========================================================================================
model.py      ``Transformer``: pre-norm blocks of causal attention and a GELU MLP; gradients in plain NumPy
ops.py        the arithmetic of a block, one function per op, each forward with its hand-written backward
sequence.py   how a block is split over a tensor-parallel group: by heads, and by sequence too (Megatron SP)
ring_ops.py   the arithmetic of ring attention: attention over one block of keys at a time
block.py      one block on one device, as named ops: forward, backward, its part of the weights
context.py    context parallelism: tokens over devices, attention as a ring
step.py       one training step on a device, and ``transformer_reference``, its one-device reference
costs.py      closed forms: messages, bytes and activation memory per device
composed_split.py  heads, sequence chunks and tokens split at once (the 5-D composition's block)
============  ==========================================================================================
"""

from .model import Transformer
from .step import TransformerStep, transformer_reference

__all__ = ["Transformer", "TransformerStep", "transformer_reference"]
