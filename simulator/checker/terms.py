"""A value that is one term of a sum, though nothing says so: the outputs of the same op on several devices
add up to the value each should hold (a row-parallel layer whose all-reduce is missing).

``unsummed_terms(trace, record, expected)`` looks at the records of the same name made the same time on
the other devices (the k-th record of a name on each device: a value computed per step or per microbatch
pairs with its own), adds up each group of devices whose terms could form the sum (all of them, then the
devices whose record has the same shape), and says which devices' terms add up to the expected value, or
average to it (a replica's own gradient, stepped with before the all-reduce that averages them).

``hand_summed(trace, record, expected)``: the same terms, added up by the program's own messages (a ring
all-reduce written with isend and irecv): every device of the sum later holds the whole value. The terms are
then partial sums, and ``running_sum(payload, terms)`` says whether an unnamed message carries a chunk of the
sum of some of them (a running sum on its way round the ring).

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


def by_name(trace: Any, kind: str = "op") -> dict[tuple[int, str], list]:
    """Each device's records of each name (ops, or ``kind``: "hold"), unlabelled ones only, in order: the records
    ``_terms_of`` pairs, gathered in one pass over the trace (a check may ask for the terms of many values)."""
    pool = trace.ops if kind == "op" else [rec for k, rec in trace.events if k == kind]
    index: dict[tuple[int, str], list] = {}
    for op in pool:
        if op.label is None:
            index.setdefault((op.rank, op.name), []).append(op)
    return index


def _terms_of(trace: Any, record: Any, kind: str = "op", index: dict | None = None) -> dict[int, np.ndarray]:
    """The k-th record of ``record``'s name on each device (``record`` is its device's k-th), of its shape.
    ``index``: ``by_name(trace, kind)``, where the caller keeps it."""
    if index is None:
        index = by_name(trace, kind)
    mine = index.get((record.rank, record.name), [])
    k = next((i for i, op in enumerate(mine) if op.id == record.id), None)
    found = np.asarray(record.output)
    terms = {record.rank: found} if k is not None else {}
    for rank in range(trace.world_size) if k is not None else ():
        theirs = index.get((rank, record.name), [])
        if rank != record.rank and len(theirs) > k and np.shape(theirs[k].output) == found.shape:
            terms[rank] = np.asarray(theirs[k].output)
    return terms


def hand_summed(
    trace: Any, record: Any, expected: Any, rtol: float | None, atol: float | None, index: dict | None = None
) -> dict | None:
    """The terms by device (see the module docstring) if they add up to ``expected`` and each of their devices
    later receives running sums of them from the others and holds ``expected`` itself, having called no
    collective; else None. ``index``: ``by_name(trace)``, kept by a caller that asks of many records."""
    if structured(record.output) or structured(expected) or getattr(record, "partial", None) is not None:
        return None
    if np.asarray(record.output).shape != np.shape(expected):
        return None
    terms = _terms_of(trace, record, index=index)
    if len(terms) < 2:
        return None
    total = sum((terms[r] for r in sorted(terms)[1:]), terms[min(terms)])
    if not same(total, expected, rtol, atol):
        return None
    events = trace.events
    at = next(i for i, (kind, rec) in enumerate(events) if kind == "op" and rec.id == record.id)
    for rank in terms:
        if any(m.label is not None for m in trace.messages if m.src == rank):
            return None  # a collective's: its own checks hold
        later = [
            rec for kind, rec in events[at + 1 :]
            if kind in ("op", "hold") and rec.rank == rank and rec.label is None and not structured(rec.output)
            and rec.name != record.name and np.shape(rec.output) == np.shape(expected)
        ]  # fmt: skip
        if not any(same(rec.output, expected, rtol, atol) for rec in later):
            return None
        carried = [
            rec for kind, rec in events[at + 1 :]
            if kind == "recv" and rec.dst == rank and rec.src in terms and running_sum(rec.payload, terms, rtol, atol)
        ]  # fmt: skip
        if not carried:  # the sum must have reached the device in messages, not through memory it shares
            return None
    return terms


def running_sum(payload: Any, terms: dict, rtol: float | None, atol: float | None) -> bool:
    """Whether ``payload`` is a chunk (the torch.chunk way, of the flattened value) of the sum of the terms of
    devices next to each other in a ring of ``terms``' devices (one device's term, or all of them)."""
    if structured(payload):
        return False
    flat_payload = np.asarray(payload).reshape(-1)
    ranks = sorted(terms)
    p = len(ranks)
    for start in range(p):
        total = None
        for length in range(p):
            term = np.asarray(terms[ranks[(start - length) % p]]).reshape(-1)
            total = term if total is None else total + term
            n = total.size
            size = -(-n // p)
            bounds = [min(i * size, n) for i in range(p + 1)]
            for a, b in zip(bounds, bounds[1:]):
                if b - a == flat_payload.size and same(flat_payload, total[a:b], rtol, atol):
                    return True
    return False


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
        numpy_way = "" if torch else ", or the array given to dev.all_reduce rather than the one it returns"
        return (
            f"{head} Device {record.rank} did call all_reduce: was this value taken before the sum came? (a tensor read "
            f"before work.wait() of an all_reduce called with async_op=True{numpy_way})"
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
