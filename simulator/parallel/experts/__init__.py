"""A mixture of experts, and expert parallelism: experts spread over devices, tokens sent to them.

============  ==========================================================================================
ops.py        the arithmetic: a router, top-k, capacity and token dropping, and its hand-written backward
model.py      ``MoE``: the layer, its gradients in plain NumPy, and the one-device step naming every value
parallel.py   ``ExpertParallel``: tokens dispatched to their experts' devices and combined back by all-to-all
moe_layer.py  the layer inside a stack of layers, on whatever tokens a device holds, experts over "ep"
============  ==========================================================================================
"""

from .model import MoE
from .parallel import ExpertParallel

__all__ = ["ExpertParallel", "MoE"]
