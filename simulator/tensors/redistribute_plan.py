"""The order of the steps of a redistribution, planned as PyTorch's DTensor plans it.

A redistribution from one list of placements to another runs one step per mesh dimension that changes
(sometimes two), each a collective over that dimension's groups or a local operation. The order matters
twice: for correctness, because a tensor dimension sharded by several mesh dimensions is split by the
first, then each chunk by the next (nested chunks: only the innermost splitter can be undone or redone
in place), and for the bytes moved, because a slice before a gather makes the gathered pieces smaller.

``plan`` is DTensor's greedy planner (``DTensorRedistributePlanner.generate_greedy_transform_infos``,
torch 2.13), step for step, so that every transition moves no more bytes per device than DTensor does:

1. If the source shards anything, walk the mesh dimensions from the innermost to the outermost. A
   target ``Shard(k)`` whose outer mesh dimensions shard k differently now than in the target (the
   nesting would be wrong) becomes ``Replicate()`` for the moment; every other target is reached at once.
   Going inner first, a slice (Replicate -> Shard) happens before the gathers of the outer dimensions,
   which then move the smaller pieces: (S(0), R) -> (R, S(1)) on a 2 x 2 mesh slices first and all-gathers
   a quarter of the array, not half.
2. Walk from the outermost to the innermost and reach every target left.

Each step is then one collective: Shard -> Replicate an all-gather, Partial -> Replicate an all-reduce,
Partial -> Shard a reduce-scatter (so (P, R) -> (S(0), S(0)) reduce-scatters over the first dimension and
slices over the second, where an all-reduce would move twice the bytes), Shard(i) -> Shard(j) an
all-to-all, Replicate -> Shard a local slice, Replicate -> Partial a local step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .placements import Partial, Placement, Replicate, Shard


@dataclass(frozen=True)
class Step:
    """One step: mesh dimension ``dim`` goes from placement ``src`` to ``dst``."""

    dim: int
    src: Placement
    dst: Placement

    @property
    def kind(self) -> str:
        """The collective (or local operation) this step is."""
        a, b = self.src, self.dst
        if isinstance(b, Replicate):
            return "all_gather" if isinstance(a, Shard) else "all_reduce"
        if isinstance(b, Shard):
            if isinstance(a, Partial):
                return "reduce_scatter"
            return "slice" if isinstance(a, Replicate) else "all_to_all"
        return "partition"  # Replicate -> Partial

    def __str__(self) -> str:
        return f"mesh dim {self.dim}: {self.src!r} -> {self.dst!r} ({self.kind})"


def plan(src: Sequence[Placement], dst: Sequence[Placement], mesh_shape: Sequence[int]) -> list[Step]:
    """The steps from placements ``src`` to ``dst`` on a mesh of ``mesh_shape`` (see the module docstring)."""
    cur, tgt = list(src), list(dst)
    if len(cur) != len(tgt) or len(cur) != len(mesh_shape):
        raise ValueError(f"plan: {len(cur)} and {len(tgt)} placements for a {len(mesh_shape)}-D mesh")
    for a, b in zip(cur, tgt):
        if isinstance(a, Partial) and isinstance(b, Partial) and a != b:
            raise ValueError(f"cannot turn {a!r} into {b!r}: reduce it first (to Replicate or a Shard)")
    # DTensor refuses Shard -> Partial; here it goes through Replicate: the rest is planned with Replicate
    # there, then those dimensions are partitioned (a local step, which sends nothing wherever it happens).
    detour = [d for d, (a, b) in enumerate(zip(cur, tgt)) if isinstance(a, Shard) and isinstance(b, Partial)]
    if not detour:
        return _greedy(cur, tgt, mesh_shape)
    for d in detour:
        tgt[d] = Replicate()
    return _greedy(cur, tgt, mesh_shape) + [Step(d, Replicate(), dst[d]) for d in detour]


def _greedy(cur: list[Placement], tgt: list[Placement], mesh_shape: Sequence[int]) -> list[Step]:
    """DTensor's two passes (the module docstring's 1 and 2); ``cur`` ends equal to ``tgt``."""
    steps: list[Step] = []
    if len(cur) == 1:
        return [Step(0, cur[0], tgt[0])] if cur[0] != tgt[0] else []
    if any(isinstance(p, Shard) and n > 1 for p, n in zip(cur, mesh_shape)):
        for d in reversed(range(len(cur))):
            target = tgt[d]
            if isinstance(target, Shard):
                now = [i for i in range(d) if cur[i] == Shard(target.dim)]
                then = [i for i in range(d) if tgt[i] == Shard(target.dim)]
                if now != then:
                    target = Replicate()
            if cur[d] != target:
                steps.append(Step(d, cur[d], target))
                cur[d] = target
    for d in range(len(cur)):
        if cur[d] != tgt[d]:
            steps.append(Step(d, cur[d], tgt[d]))
            cur[d] = tgt[d]
    return steps
