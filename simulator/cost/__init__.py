"""What things cost: the layer every other one stands on.

The engine prices every message and op with a ``CostModel``; the cost model knows nothing of engines,
devices or programs, only sizes and rates. (The design sketch put the core at the bottom; the engine must
price what it runs, and a cost model is pure arithmetic, so it goes below the core instead.)

==========  ==============================================================================================
model.py    ``CostModel``: latency + bytes / bandwidth per message, FLOPs / speed per op, the roofline;
            the topologies (fully connected, ring, two levels) and link regimes; an op's FLOPs and bytes
links.py    links during a run: when each is next free (the engine's hot path)
spread.py   measured spread of message times, drawn per message
presets.py  cost models of real machines and of the classroom (``preset("dgx-h100")``)
achieved.py what kernels and NCCL reach, measured: products by size, memory, bus bandwidth by size
products.py matrix products measured by shape (rows, columns, reduction length) on H100
systems.py  GPU systems as published: a preset's peaks and links with measured rates, every one sourced
meta.py     ``MetaArray``: an array known only by its shape and dtype, for what-ifs too large to compute
units.py    seconds, bytes and small arrays as people read them
==========  ==============================================================================================
"""

from .meta import MetaArray
from .model import CostModel, FullyConnected, LinkRegime, Ring, TwoLevel, op_bytes, op_flops
from .presets import PRESETS, classroom, dgx_a100, dgx_h100, pcie4_workstation, preset, teaching
from .spread import MessageSpread
from .systems import SYSTEMS, System, system

__all__ = [
    "PRESETS",
    "SYSTEMS",
    "CostModel",
    "FullyConnected",
    "LinkRegime",
    "MessageSpread",
    "MetaArray",
    "Ring",
    "System",
    "TwoLevel",
    "classroom",
    "dgx_a100",
    "dgx_h100",
    "op_bytes",
    "op_flops",
    "pcie4_workstation",
    "preset",
    "system",
    "teaching",
]
