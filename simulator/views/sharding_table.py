"""Which device holds which block of an array, as a text table (like DTensor's visualize_sharding).

For a 1-D or 2-D array the table has one row per block of rows and one column per block of columns;
each cell lists the devices that hold that block:

- ``0, 1``           replicas: each of devices 0 and 1 holds the whole block
- ``0+1 (sum)``      partial values: the block is the sum of what devices 0 and 1 hold, still pending

Arrays of more dimensions get ``device_listing`` (one line per device) instead.
"""

from __future__ import annotations

from ..tensors.placements import Partial
from ..tensors.sharded import Layout, ShardedArray


def _layout(x: Layout | ShardedArray) -> Layout:
    return x.layout if isinstance(x, ShardedArray) else x


def device_listing(x: Layout | ShardedArray) -> str:
    """One line per device: the block it holds, and whether its piece is partial."""
    lay = _layout(x)
    return "\n".join(f"device {r}: {lay.describe(r)}" for r in lay.mesh.ranks.reshape(-1).tolist())


def cell_holders(lay: Layout, ranks: list[int]) -> str:
    """'0, 2' for replicas; '0+1, 2+3 (sum)' where devices hold partial values of the same block."""
    partial_dims = [d for d, pl in enumerate(lay.placements) if isinstance(pl, Partial)]
    groups: dict[tuple, list[int]] = {}
    for r in ranks:
        coord = lay.mesh.coordinate(r)
        key = tuple(c for d, c in enumerate(coord) if d not in partial_dims)
        groups.setdefault(key, []).append(r)
    text = ", ".join("+".join(str(r) for r in g) for g in groups.values())
    return f"{text} ({lay.partial_op})" if partial_dims else text


def blocks(lay: Layout) -> list[tuple[tuple[int, int], tuple[int, int], list[int]]]:
    """The array cut into blocks, row by row: ((row range), (col range), devices holding it).

    A 1-D array is cut along its only axis, with (0, 1) as its column range."""
    ndim = len(lay.shape)
    if ndim not in (1, 2):
        raise ValueError(f"blocks are drawn for 1-D and 2-D arrays; this one has shape {lay.shape}")
    ranks = lay.mesh.ranks.reshape(-1).tolist()
    regions = {r: lay.region(r) for r in ranks}

    def cuts(axis: int) -> list[tuple[int, int]]:
        points = {0, lay.shape[axis]} | {p for reg in regions.values() for p in (reg[axis].start, reg[axis].stop)}
        points = sorted(points)
        return [(a, b) for a, b in zip(points, points[1:]) if b > a]

    def covers(reg, axis, a, b) -> bool:
        return reg[axis].start <= a and b <= reg[axis].stop

    rows = cuts(0)
    cols = cuts(1) if ndim == 2 else [(0, 1)]
    out = []
    for a, b in rows:
        for c, e in cols:
            hs = [r for r in ranks if covers(regions[r], 0, a, b) and (ndim == 1 or covers(regions[r], 1, c, e))]
            out.append(((a, b), (c, e), hs))
    return out


def sharding_table(x: Layout | ShardedArray) -> str:
    """The table described in the module docstring (or a device listing beyond two dimensions).

    Args:
        x: a layout, or a sharded array.

    Examples:
        >>> from simulator import DeviceMesh, Layout, R, S, sharding_table
        >>> print(sharding_table(Layout((4, 4), DeviceMesh([0, 1]), (S(0),))))
        shape (4, 4), placements [S(0)] on mesh (2,)
                  cols 0:4
        rows 0:2  0
        rows 2:4  1
    """
    lay = _layout(x)
    ndim = len(lay.shape)
    if ndim > 2:
        return device_listing(lay)
    ranks = lay.mesh.ranks.reshape(-1).tolist()
    if ndim == 0:
        return f"{'scalar':>10}  {cell_holders(lay, ranks)}"

    grid = blocks(lay)
    rows = sorted({(a, b) for (a, b), _, _ in grid})
    cols = sorted({(c, e) for _, (c, e), _ in grid})
    holders = {(rr, cc): hs for rr, cc, hs in grid}
    cells = [[cell_holders(lay, holders[rr, cc]) if holders.get((rr, cc)) else "-" for cc in cols] for rr in rows]
    row_names = [f"rows {a}:{b}" if ndim == 2 else f"{a}:{b}" for a, b in rows]
    col_names = [f"cols {c}:{e}" for c, e in cols] if ndim == 2 else ["devices"]
    width = max([len(s) for line in cells for s in line] + [len(s) for s in col_names]) + 2
    left = max(len(s) for s in row_names) + 2
    head = " " * left + "".join(f"{s:<{width}}" for s in col_names)
    body = [f"{n:<{left}}" + "".join(f"{s:<{width}}" for s in line) for n, line in zip(row_names, cells)]
    title = f"shape {lay.shape}, placements {list(lay.placements)} on mesh {lay.mesh.shape}"
    empty = [str(r) for r in ranks if 0 in lay.local_shape(r)]
    foot = [f"holding an empty piece (uneven split): devices {', '.join(empty)}"] if empty else []
    return "\n".join([title, head.rstrip(), *[b.rstrip() for b in body], *foot])
