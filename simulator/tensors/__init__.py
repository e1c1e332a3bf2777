"""Who holds which block of an array: meshes, placements, sharded arrays, and moving them as messages.

=====================  ======================================================================================
placements.py          ``Shard(dim)``, ``Replicate()``, ``Partial(op)`` (``S``, ``R``, ``P``); torch.chunk's
                       splitting rule (``chunk_bounds``); ``FlatSlice``, a chunk of the flattened array
mesh.py                ``DeviceMesh``: an n-D grid of ranks and its process groups along each dimension
sharded.py             ``Layout`` and ``ShardedArray``: a global shape, a mesh, placements, a piece per device
redistribute_plan.py   the order of a redistribution's steps, as PyTorch's DTensor plans them
redistribute.py        ``distribute``, ``redistribute``, ``assemble``: every move a message or a collective
=====================  ======================================================================================

Redistribution runs on devices and calls their collectives (``dev.all_gather``, ...), which the layer
above attaches to the core's ``Device``; nothing here imports the collectives.
"""

from .mesh import DeviceMesh
from .placements import FlatSlice, P, Partial, Placement, R, Replicate, S, Shard, chunk_bounds, chunk_sizes
from .redistribute import assemble, distribute, redistribute
from .sharded import Layout, ShardedArray

__all__ = [
    "DeviceMesh",
    "FlatSlice",
    "Layout",
    "P",
    "Partial",
    "Placement",
    "R",
    "Replicate",
    "S",
    "Shard",
    "ShardedArray",
    "assemble",
    "chunk_bounds",
    "chunk_sizes",
    "distribute",
    "redistribute",
]
