"""A transformer block split three ways at once: heads over "tp", Megatron sequence chunks, tokens over "cp".

``ComposedSplit`` is the split of one device of a mesh with (at least) the dimensions "cp" and "tp":

- its context-parallel group ("cp") holds the sequence in the load-balanced chunk order
  (``simulator.parallel.transformer.context``); attention is a ring over that group, on this device's heads;
- its tensor-parallel group ("tp") splits the heads and the MLP's columns (``simulator.parallel.transformer.sequence``):
  partial sums all-reduced, or with ``sequence_parallel`` reduce-scattered over the device's context chunk
  and all-gathered back;
- every other dimension of the mesh ("dp", "ep", "pp") sees other sequences or other layers, and only
  enters through the gradients' synchronisation (``sync_group``).

Which tokens a device holds: its context chunk's positions, and under sequence parallelism its tensor-parallel
rank's piece of those (torch.chunk's rule). Index tuples mix that position array (a numpy fancy index on the
sequence dimension) with the column slice of the heads, so the checker compares each piece with its part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...tensors.mesh import DeviceMesh
from .context import RingAttention, positions
from .model import Transformer
from .sequence import ALL, TOKEN_SUMMED, SequenceSplit, chunk


def subgroup(mesh: DeviceMesh, rank: int, dims: Sequence[str]) -> tuple[int, ...]:
    """The ranks that differ from ``rank`` only along ``dims`` (in mesh order): a group over several dimensions."""
    coord = mesh.coordinate(rank)
    index = tuple(slice(None) if name in dims else coord[d] for d, name in enumerate(mesh.dim_names))
    return tuple(int(r) for r in np.asarray(mesh.ranks[index]).reshape(-1))


@dataclass(frozen=True)
class ComposedSplit(SequenceSplit):
    """Device ``rank``'s part of a block on ``mesh`` (see the module docstring); ``group`` is its "tp" group.

    data_dims: the dimensions whose devices hold other sequences (their gradients add up too).
    """

    mesh: DeviceMesh | None = None
    sequence: bool = True
    data_dims: tuple[str, ...] = ("dp", "ep")
    order = "balanced"

    @classmethod
    def of(
        cls,
        model: Transformer,
        mesh: DeviceMesh,
        rank: int,
        seq_len: int,
        sequence_parallel: bool = True,
        data_dims: Sequence[str] = ("dp", "ep"),
    ) -> ComposedSplit:
        return cls(model, mesh.group("tp", rank), rank, seq_len, False, mesh, sequence_parallel, tuple(data_dims))

    # ---- the context-parallel side (what ring attention needs) --------------------------------------
    @property
    def ring(self) -> tuple[int, ...]:
        return self.mesh.group("cp", self.rank)

    @property
    def cp(self) -> int:
        return len(self.ring)

    @property
    def cp_index(self) -> int:
        return self.ring.index(self.rank)

    @property
    def tokens(self) -> np.ndarray:
        """The positions of this device's context chunk (attention's queries, the regions' tokens)."""
        return positions(self.seq_len, self.cp, self.cp_index, self.order)

    def block_index(self, rows: np.ndarray, cols: np.ndarray) -> tuple:
        return (ALL, self.heads, rows[:, None], cols[None, :])

    def kv_index(self, tokens: np.ndarray) -> tuple:
        return (ALL, tokens, self.cols)

    def attention(self, layer: int) -> RingAttention:
        return RingAttention(self.model, self, layer)

    # ---- which tokens and columns -------------------------------------------------------------------
    @property
    def seq(self) -> np.ndarray:
        """The tokens outside the regions: the context chunk, cut again over "tp" under sequence parallelism."""
        mine = self.tokens
        return mine[chunk(len(mine), self.tp, self.j)] if self.sequence else mine

    def index(self, kind: str) -> Any:
        if kind == "outside":
            return (ALL, self.seq, ALL)
        cols = {"heads": self.cols, "ff": self.ff, "region": ALL}[kind]  # region: a partial sum over the chunk
        return (ALL, self.tokens, cols)

    def _shapes(self, local: np.ndarray) -> list[tuple[int, ...]]:
        b, _, d = local.shape
        n = len(self.tokens)
        return [(b, chunk(n, self.tp, m).stop - chunk(n, self.tp, m).start, d) for m in range(self.tp)]

    # the four operators: Megatron's over the "tp" group, sequence-parallel ones over the context chunk
    def enter(self, dev: Any, name: str, local: np.ndarray) -> np.ndarray:
        if not self.sequence:
            return local
        index = (ALL, self.tokens, ALL)
        return dev.all_gather(local, self.group, axis=1, shapes=self._shapes(local), name=name, indices=self._pieces(),
                              index=index)  # fmt: skip

    def _pieces(self) -> list[tuple]:
        mine = self.tokens
        return [(ALL, mine[chunk(len(mine), self.tp, m)], ALL) for m in range(self.tp)]

    def enter_grad(self, dev: Any, name: str, partial: np.ndarray) -> np.ndarray:
        if not self.sequence:  # (an all-reduce's result says no index: it is recorded with this chunk's)
            total = dev.all_reduce(partial, "sum", self.group)
            return dev.compute(name, _const(total), seconds=0.0, index=(ALL, self.tokens, ALL))
        return dev.reduce_scatter(partial, "sum", self.group, axis=1, name=name, indices=self._pieces())

    exit = enter_grad

    def exit_grad(self, dev: Any, name: str, local: np.ndarray) -> np.ndarray:
        return self.enter(dev, name, local)

    def regathered(self, dev: Any, name: str, local: np.ndarray) -> np.ndarray:
        return local

    # ---- gradients ------------------------------------------------------------------------------------
    @property
    def param_partial(self) -> tuple[int, ...]:
        """The devices holding pieces of one microbatch: its context group (and "tp" under sequence parallelism)."""
        return subgroup(self.mesh, self.rank, ("cp", "tp") if self.sequence else ("cp",))

    def grad_partial(self, what: str) -> tuple[int, ...]:
        """A microbatch's gradient on this device: a sum over its tokens, one term of the sum over the devices
        that hold the microbatch's other tokens (its context group; and its tensor group for the parameters
        applied whole outside the regions, under sequence parallelism)."""
        dims = ("cp", "tp") if self.sequence and what in TOKEN_SUMMED else ("cp",)
        return subgroup(self.mesh, self.rank, dims)

    def sync_group(self, what: str) -> tuple[int, ...]:
        """The step's gradient: the same, over every device that holds this parameter's piece for other sequences."""
        dims = (*self.data_dims, "cp", "tp") if self.sequence and what in TOKEN_SUMMED else (*self.data_dims, "cp")
        return subgroup(self.mesh, self.rank, dims)

    def sync_param_grad(self, dev: Any, name: str, value: np.ndarray) -> np.ndarray:
        """All-reduced over ``sync_group``, recorded with this device's part of the parameter."""
        what = name.split(".d", 1)[1]
        total = dev.all_reduce(value, "sum", self.sync_group(what))
        return dev.compute(name, _const(total), seconds=0.0, index=self.param_index(what))


def _const(value: np.ndarray):
    return lambda: value
