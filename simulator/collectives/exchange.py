"""All-to-all (direct, pairwise) and the dissemination barrier: every member exchanges with every other.

No reductions here: all-to-all moves each member's chunk j to member j; the barrier passes empty
tokens (round k: signal member +2^k, wait for member -2^k), so no member leaves before all arrived.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .call import _Call


def _all_to_all_direct(c: _Call, chunks, shapes, dtype):
    p, me = c.p, c.me
    reqs = [c.send(chunks[m], m, 0, m) for m in range(p) if m != me]
    out = [chunks[me] if m == me else c.recv(m, shapes[m] if shapes else None, dtype) for m in range(p)]
    for r in reqs:
        c.wait(r)
    return out


def _all_to_all_pairwise(c: _Call, chunks, shapes, dtype):
    p, me = c.p, c.me
    out: list = [None] * p
    out[me] = chunks[me]
    for s in range(1, p):
        to, frm = (me + s) % p, (me - s) % p
        out[frm] = c.exchange(chunks[to], to, frm, s - 1, to, shapes[frm] if shapes else None, dtype)
    return out


def _barrier_dissemination(c: _Call) -> None:
    p, me = c.p, c.me
    token = np.zeros(0, dtype=np.uint8)
    d, step = 1, 0
    while d < p:
        c.exchange(token, (me + d) % p, (me - d) % p, step, "token", (0,), np.uint8)
        d *= 2
        step += 1
