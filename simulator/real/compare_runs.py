"""A simulation and a real run of the same program, compared: outputs, messages, ops, and the checker.

``compare(simulated, measured)`` lines the two traces up without looking at times (a measured
trace has other times by nature): the messages of each channel (source, destination, tag) in order,
with their shape, dtype, size, name and payload; the ops and held values of each rank in order, with
their outputs; and each rank's return value. ``exact=True`` asks for bit-for-bit equality (right for
integer-valued data); otherwise floats are compared with ``allclose``.

``Scenario.run(on=world)`` (``simulator.teach``) runs a named scenario on real processes to set beside
its simulation. This module imports no torch: it works on any trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..checker.compare import same
from ..core.trace import Trace


@dataclass
class Comparison:
    """Where a measured run differs from its simulation (times aside); empty ``differences``: none."""

    messages: int
    ops: int
    differences: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.differences

    def __str__(self) -> str:
        if self.ok:
            messages = f"{self.messages} message{'s' * (self.messages != 1)}"
            return f"same run: {messages} and {self.ops} ops/values match, outputs equal"
        shown = "\n".join(f"  {d}" for d in self.differences[:10])
        more = f"\n  ... and {len(self.differences) - 10} more" if len(self.differences) > 10 else ""
        return f"the runs differ in {len(self.differences)} place(s):\n{shown}{more}"


def compare(simulated: Any, measured: Any, *, exact: bool = False, rtol: float = 1e-7, atol: float = 0.0) -> Comparison:
    """Compare two results (anything with ``.outputs`` and ``.trace``) event for event, ignoring time."""
    eq = _equal_exact if exact else (lambda a, b: same(a, b, rtol, atol))
    sim, real = simulated.trace, measured.trace
    diffs: list[str] = []
    sim_ch, real_ch = _channels(sim), _channels(real)
    for key in sorted(set(sim_ch) | set(real_ch)):
        a, b = sim_ch.get(key, []), real_ch.get(key, [])
        where = f"channel {key[0]}->{key[1]} tag {key[2]}"
        if len(a) != len(b):
            diffs.append(f"{where}: {len(a)} message(s) simulated, {len(b)} measured")
        for k, (ma, mb) in enumerate(zip(a, b)):
            for attr in ("shape", "dtype", "nbytes", "name", "label"):
                va, vb = getattr(ma, attr), getattr(mb, attr)
                if (np.dtype(va) != np.dtype(vb)) if attr == "dtype" else (va != vb):
                    diffs.append(f"{where}, message {k}: {attr} {va!r} simulated, {vb!r} measured")
            if (ma.t_recv is None) != (mb.t_recv is None):
                diffs.append(f"{where}, message {k}: received in one run only")
            if ma.payload is not None and mb.payload is not None and not eq(ma.payload, mb.payload):
                diffs.append(
                    f"{where}, message {k}: payload {_show(ma.payload)} simulated, {_show(mb.payload)} measured"
                )
    sim_ops, real_ops = _ops(sim), _ops(real)
    for rank in range(max(sim.world_size, real.world_size)):
        a, b = sim_ops.get(rank, []), real_ops.get(rank, [])
        if [(k, o.name) for k, o in a] != [(k, o.name) for k, o in b]:
            diffs.append(
                f"device {rank}: ops {[f'{k} {o.name}' for k, o in a]} simulated, {[f'{k} {o.name}' for k, o in b]} measured"
            )
            continue
        for (kind, oa), (_, ob) in zip(a, b):
            if oa.output is not None and ob.output is not None and not eq(oa.output, ob.output):
                diffs.append(
                    f"device {rank}: {kind} {oa.name} = {_show(oa.output)} simulated, {_show(ob.output)} measured"
                )
    outs_a, outs_b = simulated.outputs, measured.outputs
    for rank, (oa, ob) in enumerate(zip(outs_a, outs_b)):
        if not _equal_nested(oa, ob, eq):
            diffs.append(f"device {rank}: returned {_show(oa)} simulated, {_show(ob)} measured")
    n_ops = sum(len(v) for v in sim_ops.values())
    return Comparison(len(sim.messages), n_ops, diffs)


def counterpart(record: Any, measured: Trace, simulated: Trace) -> Any:
    """The record of ``simulated`` that corresponds to ``record`` of ``measured`` (a Message or an Op).

    Messages correspond by channel and position on it; ops (and held values) by device and position
    in that device's sequence: what ``compare`` lines up.
    """
    if hasattr(record, "src"):
        key = (record.src, record.dst, record.tag)
        k = _channels(measured)[key].index(record)
        return _channels(simulated)[key][k]
    k = [op for _, op in _ops(measured)[record.rank]].index(record)
    return _ops(simulated)[record.rank][k][1]


def _channels(trace: Trace) -> dict[tuple, list]:
    out: dict[tuple, list] = {}
    for m in sorted(trace.messages, key=lambda m: m.id):
        out.setdefault((m.src, m.dst, m.tag), []).append(m)
    return out


def _ops(trace: Trace) -> dict[int, list]:
    out: dict[int, list] = {}
    for kind, rec in trace.events:
        if kind in ("op", "hold", "free"):
            out.setdefault(rec.rank, []).append((kind, rec))
    return out


def _equal_exact(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def _equal_nested(a: Any, b: Any, eq) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal_nested(x, y, eq) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal_nested(a[k], b[k], eq) for k in a)
    return eq(a, b)


def _show(x: Any) -> str:
    a = np.asarray(x, dtype=object) if isinstance(x, (list, tuple)) else np.asarray(x)
    return np.array2string(a, separator=", ") if a.size <= 8 else f"array{a.shape}"
