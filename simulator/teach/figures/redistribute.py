"""The redistribution volume table: per-device bytes of DTensor-planned transitions on a 2 x 2 mesh, beside DTensor's.

For each transition of a 4 x 8 float64 array (256 bytes) on a 2 x 2 mesh: the steps planned
(``simulator.tensors.redistribute_plan``), the most bytes any device sends in the simulation, and what DTensor sends
on rank 0 (its collectives recorded under torch's fake process group; on CPU it replaces an all-to-all by
an all-gather, on GPUs it runs the all-to-all, which sends what the simulation sends). The README quotes it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...core.files import write_text
from ...core.world import World
from ...tensors.mesh import DeviceMesh
from ...tensors.placements import P, Placement, R, S
from ...tensors.redistribute import redistribute
from ...tensors.redistribute_plan import plan
from ...tensors.sharded import Layout
from ...views.plot.style import FigureStyle
from . import figure

SHAPE = (4, 8)
CASES: tuple[tuple[list[Placement], list[Placement]], ...] = (
    ([S(0), R], [R, S(1)]),
    ([P, R], [S(0), S(0)]),
    ([S(0), S(1)], [R, R]),
    ([P, P], [R, R]),
    ([S(0), S(0)], [R, S(0)]),
    ([S(0), R], [S(1), R]),
    ([R, S(0)], [S(0), R]),
    ([P, S(1)], [S(0), R]),
)


def _torch_missing() -> str | None:
    try:
        import torch.distributed.tensor  # noqa: F401
    except ImportError:
        return "torch is not installed (pip install -e '.[torch]'): DTensor's column needs it"
    return None


def _move(dev, x, lay, placements):
    return redistribute(dev, lay.piece(x, dev.rank), lay, placements)


def simulated_bytes(src: list[Placement], dst: list[Placement]) -> int:
    """The most bytes a device sends for ``src`` -> ``dst`` of the 4 x 8 array on the 2 x 2 mesh."""
    lay = Layout(SHAPE, DeviceMesh.grid((2, 2)), tuple(src))
    x = np.arange(float(np.prod(SHAPE))).reshape(SHAPE)
    run = World(4).run(_move, x, lay, dst)
    return max(sum(m.nbytes for m in run.trace.messages if m.src == r) for r in range(4))


def rows() -> list[tuple[str, str, int, int]]:
    from ...torchsim.dtensor_volumes import dtensor_bytes

    out = []
    for src, dst in CASES:
        steps = ", then ".join(f"{s.kind.replace('_', '-')} on mesh dim {s.dim}" for s in plan(src, dst, (2, 2)))
        transition = f"({', '.join(map(repr, src))}) -> ({', '.join(map(repr, dst))})"
        out.append((transition, steps, simulated_bytes(src, dst), dtensor_bytes((2, 2), SHAPE, src, dst).bytes))
    return out


@figure("redistribute_volumes.txt", needs=_torch_missing)
def redistribute_volumes(out: Path, style: FigureStyle) -> None:
    """Bytes per device of redistributions on a 2 x 2 mesh: the simulator's DTensor-planned steps beside DTensor's."""
    table = [(t, steps.replace("mesh dim", "dim"), a, b) for t, steps, a, b in rows()]  # within 120 columns
    w0, w1 = max(len(r[0]) for r in table), max(len(r[1]) for r in table)
    lines = [
        "A 4 x 8 float64 array (256 bytes) on a 2 x 2 mesh: the most bytes any device (device 0 to 3) sends,",
        "with the steps planned as DTensor plans them (dim: the mesh dimension a step works along).",
        "DTensor's column is measured (its collectives recorded on rank 0, CPU); on GPUs its all-to-all sends what",
        "the simulation sends.",
        "",
        f"{'transition':<{w0}}  {'steps':<{w1}}  {'simulator':>9}  {'DTensor':>7}",
    ]
    lines += [f"{t:<{w0}}  {s:<{w1}}  {a:>9}  {b:>7}" for t, s, a, b in table]
    write_text(out / "redistribute_volumes.txt", "\n".join(lines) + "\n")
