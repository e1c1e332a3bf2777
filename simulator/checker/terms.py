"""A value that is one term of a sum, though nothing says so: the outputs of the same op on several devices
add up to the value each should hold (a row-parallel layer whose all-reduce is missing).

``unsummed_terms(trace, record, expected)`` looks at the records of the same name made the same time on
the other devices (the k-th record of a name on each device: a value computed per step or per microbatch
pairs with its own), adds up each group of devices whose terms could form the sum (all of them, then the
devices whose record has the same shape), and says which devices' terms add up to the expected value, or
average to it (a replica's own gradient, stepped with before the all-reduce that averages them).

``before_bias(reference, name, found, expected)``: a torch module's output that is its value less the module's
bias, as the partial sums of a row-parallel layer add up when the bias is added after the sum (Megatron's
``RowParallelLinear``, ``skip_bias_add``): the module's own output, not a value that feeds on (those are
compared whole), and the model's result is compared with the bias in.
"""

from __future__ import annotations

import re
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
    torch: bool = False,
) -> str | None:
    """Words for a value that, added to the same value on other devices, gives the expected one; else None.
    record: an op's output (kind "op"), or a held value (kind "hold"), compared with the k-th of its name elsewhere;
    reduced: the device did all-reduce (so the term was taken before the sum came, rather than never summed);
    torch: a torch program's, whose way to say a term is partial is DTensor's ``Partial``, not ``partial=True``."""
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
    group = ", ".join(map(str, ranks))
    if not same(total, expected, rtol, atol):
        if found.dtype.kind not in "fc" or not same(total / len(ranks), expected, rtol, atol):
            return None
        own = "gradient" if ".grad" in record.name else "value"  # a replica's: its own samples' share
        return (
            f"It is device {record.rank}'s own {own}, not averaged: the values of {record.name} on devices {group} "
            f"average to {record.name}, so each replica went on with its own (the all-reduce that averages them, "
            "dist.all_reduce(g, op=dist.ReduceOp.AVG), or SUM and then / world size, is missing?)"
        )
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
    if torch:
        return (
            f"{head} The all-reduce that adds them (after a row-parallel layer) is missing? Or were they said to be "
            "Replicate()? (Terms of a sum are Partial(): DTensor.from_local(t, mesh, [Partial()]).)"
        )
    return f"{head} The all-reduce that adds them (after a row-parallel layer) is missing? (If one follows, say so with partial=True.)"


def bias_count(
    reference: Any, name: str, index: Any, found: Any, rtol: float | None, atol: float | None
) -> tuple[str, int] | None:
    """(the module's bias, k) when ``found`` is part ``index`` of the module's value with its bias counted k times
    instead of once (k = 0: the bias left for after the sum; k > 1: added by k devices before it), else None."""
    if not getattr(reference, "modules", False) or structured(found):
        return None
    source = reference.aliases.get(name, name)
    bias_name = re.sub(r" \(call \d+\)$", "", source) + ".bias"
    bias = reference.values.get(bias_name)
    whole = reference.values.get(source)
    if bias is None or whole is None or structured(whole) or not np.any(bias):
        return None
    whole, bias, found = np.asarray(whole), np.asarray(bias), np.asarray(found)
    if whole.ndim == 0 or bias.shape != whole.shape[-1:] or found.dtype.kind not in "fc":
        return None
    less = _part(whole - bias, index)
    if np.shape(less) != found.shape:
        return None
    spread = _part(np.broadcast_to(bias, whole.shape), index)  # the bias where each element of the part has it
    k = float(np.vdot(spread, found - less)) / float(np.vdot(spread, spread))
    if not np.isfinite(k) or abs(k - round(k)) > 1e-3 or round(k) == 1 or not 0 <= round(k) <= 1024:
        return None
    return (bias_name, round(k)) if same(found, less + round(k) * spread, rtol, atol) else None


def before_bias(
    reference: Any, name: str, index: Any, found: Any, rtol: float | None, atol: float | None
) -> str | None:
    """The module's bias if ``found`` is part ``index`` of the module's value less that bias (see the module
    docstring); else None."""
    counted = bias_count(reference, name, index, found, rtol, atol)
    return counted[0] if counted is not None and counted[1] == 0 else None


def _part(value: Any, index: Any) -> Any:
    """Part ``index`` of a value (as ``Reference.expected`` takes it: a numpy index, a function, or None: all)."""
    if index is None:
        return value
    return index(value) if callable(index) else np.asarray(value)[index]
