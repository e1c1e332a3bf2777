"""A value that is one term of a sum, though nothing says so: the outputs of the same op on several devices
add up to the value each should hold (a row-parallel layer whose all-reduce is missing).

``unsummed_terms(trace, record, expected)`` looks at the records of the same name made the same time on
the other devices (the k-th record of a name on each device: a value computed per step or per microbatch
pairs with its own), adds up each group of devices whose terms could form the sum (all of them, then the
devices whose record has the same shape), and says which devices' terms add up to the expected value.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .compare import same, structured


def unsummed_terms(
    trace: Any,
    record: Any,
    expected: Any,
    rtol: float | None,
    atol: float | None,
    kind: str = "op",
    reduced: bool = False,
) -> str | None:
    """Words for a value that, added to the same value on other devices, gives the expected one; else None.
    record: an op's output (kind "op"), or a held value (kind "hold"), compared with the k-th of its name elsewhere;
    reduced: the device did all-reduce (so the term was taken before the sum came, rather than never summed)."""
    if structured(record.output) or structured(expected) or getattr(record, "partial", None) is not None:
        return None
    found = np.asarray(record.output)
    if found.dtype.kind not in "biufc" or found.shape != np.shape(expected) or not np.any(found):
        return None
    pool = trace.ops if kind == "op" else [rec for k, rec in trace.events if k == kind]
    mine = [op for op in pool if op.rank == record.rank and op.name == record.name and op.label is None]
    k = next((i for i, op in enumerate(mine) if op.id == record.id), None)
    if k is None:
        return None
    terms = {record.rank: found}
    for rank in range(trace.world_size):
        if rank == record.rank:
            continue
        theirs = [op for op in pool if op.rank == rank and op.name == record.name and op.label is None]
        if len(theirs) > k and not structured(theirs[k].output) and np.shape(theirs[k].output) == found.shape:
            terms[rank] = np.asarray(theirs[k].output)
    if len(terms) < 2:
        return None
    ranks = sorted(terms)
    total = sum((terms[r] for r in ranks[1:]), terms[ranks[0]])
    if not same(total, expected, rtol, atol):
        return None
    group = ", ".join(map(str, ranks))
    head = (
        f"It is device {record.rank}'s term of a sum: the values of {record.name} on devices {group} add up to "
        f"{record.name}, so each holds a partial sum used as if it were the complete value."
    )
    if reduced:
        return (
            f"{head} Device {record.rank} did call all_reduce: was this value taken before the sum came? (a tensor read "
            "before work.wait() of an all_reduce called with async_op=True, or the array given to dev.all_reduce "
            "rather than the one it returns)"
        )
    return f"{head} The all-reduce that adds them (after a row-parallel layer) is missing? (If one follows, say so with partial=True.)"
