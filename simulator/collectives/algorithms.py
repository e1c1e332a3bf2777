"""``ALGORITHMS``: for each collective, its algorithms by name (the table ``_Call`` checks a choice against).

What each one does is in the package docstring (``simulator.collectives``) and in its module. The
algorithms of one collective take the same arguments, after the call ``c``:

- reduce-scatter: the member's p blocks (block j goes to member j) and ``index``, where ``index(j)`` is
  the reference index of block j (or None); returns member me's reduced block;
- all-gather: member me's block, every member's block shape, the dtype, the name and ``index``;
  returns all p blocks in member order;
- all-reduce: the value; broadcast, reduce, scatter, gather: the value(s) and the root's position;
  all-to-all: the chunks, expected shapes and dtype; barrier: nothing.

Each algorithm checks what it needs of the group itself (halving and doubling: a power-of-two size), so the
public functions run any entry of the table alike.
"""

from __future__ import annotations

from collections.abc import Callable

from .direct import (
    _ag_direct,
    _all_reduce_direct,
    _broadcast_direct,
    _gather_direct,
    _reduce_direct,
    _rs_direct,
    _scatter_direct,
)
from .exchange import _all_to_all_direct, _all_to_all_pairwise, _barrier_dissemination
from .halving_doubling import _all_reduce_halving_doubling, all_gather_doubling, reduce_scatter_halving
from .ring import _ag_ring, _all_reduce_ring, _rs_ring
from .tree import _all_reduce_tree, _broadcast_tree, _gather_tree, _reduce_tree, _scatter_tree

ALGORITHMS: dict[str, dict[str, Callable]] = {
    "all_reduce": {
        "ring": _all_reduce_ring,
        "halving_doubling": _all_reduce_halving_doubling,
        "tree": _all_reduce_tree,
        "direct": _all_reduce_direct,
    },
    "reduce_scatter": {"ring": _rs_ring, "halving_doubling": reduce_scatter_halving, "direct": _rs_direct},
    "all_gather": {"ring": _ag_ring, "halving_doubling": all_gather_doubling, "direct": _ag_direct},
    "broadcast": {"tree": _broadcast_tree, "direct": _broadcast_direct},
    "reduce": {"tree": _reduce_tree, "direct": _reduce_direct},
    "scatter": {"tree": _scatter_tree, "direct": _scatter_direct},
    "gather": {"tree": _gather_tree, "direct": _gather_direct},
    "all_to_all": {"direct": _all_to_all_direct, "pairwise": _all_to_all_pairwise},
    "barrier": {"dissemination": _barrier_dissemination},
}
"""Each collective's algorithms by name: ``dev.all_reduce(x, algorithm="tree")`` picks one.

Examples:
    >>> from simulator import ALGORITHMS
    >>> sorted(ALGORITHMS["all_reduce"])
    ['direct', 'halving_doubling', 'ring', 'tree']
"""
