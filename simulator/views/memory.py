"""Memory held by each device over time, computed from a run's trace.

A device's memory is its named values (what ``dev.memory`` shows), and the trace says when each
changes:

- ``hold``: a value is placed under a name, at the hold's time;
- ``op``: the op's output is stored under its name when the op starts (a real framework allocates an
  output before the kernel runs), unless the program passed ``keep=False``;
- ``recv``: a receive that names what it carries stores the payload under that name when the receive
  completes (a receive without a name hands the program a value the simulator does not see in memory);
- ``free``: the name is dropped.

Storing under a name that already holds a value replaces it (the old bytes are released). Sizes come
from ``Op.nbytes`` and ``Message.nbytes``, so this works when a run does not keep payloads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.trace import Trace
from .activity import unpack

if TYPE_CHECKING:
    from ..core.engine import RunResult
    from ..cost.model import CostModel


@dataclass
class MemoryTimeline:
    """Per device, the times at which its memory changed and the bytes held from then on.

    ``times[r][i]`` and ``held[r][i]``: from ``times[r][i]`` device r holds ``held[r][i]`` bytes (a step
    function starting at (0, 0)). ``biggest[r]`` is the name -> bytes it held at its peak.
    """

    times: list[list[float]]
    held: list[list[int]]
    biggest: list[dict[str, int]]
    end_time: float

    @property
    def world_size(self) -> int:
        return len(self.times)

    def peak(self, rank: int) -> int:
        return max(self.held[rank])

    def peak_time(self, rank: int) -> float:
        held = self.held[rank]
        return self.times[rank][held.index(max(held))]

    def at(self, rank: int, t: float) -> int:
        """Bytes device ``rank`` holds at time t (after every change at t)."""
        value = 0
        for ti, h in zip(self.times[rank], self.held[rank]):
            if ti > t:
                break
            value = h
        return value


def memory_timeline(run: RunResult | Trace) -> MemoryTimeline:
    """Memory held by each device over time (see the module docstring).

    Args:
        run: a run (or its trace).

    Examples:
        >>> import numpy as np
        >>> from simulator import World, memory_timeline
        >>> mem = memory_timeline(World(1).run(lambda dev: dev.hold("w", np.zeros(4))))
        >>> mem.peak(0)
        32
    """
    trace, _ = unpack(run)
    p = trace.world_size
    times: list[list[float]] = [[0.0] for _ in range(p)]
    held: list[list[int]] = [[0] for _ in range(p)]
    names: list[dict[str, int]] = [{} for _ in range(p)]
    biggest: list[dict[str, int]] = [{} for _ in range(p)]
    totals = [0] * p
    peaks = [0] * p

    def store(rank: int, t: float, name: str, nbytes: int | None) -> None:
        now = names[rank]
        totals[rank] += (nbytes or 0) - now.pop(name, 0)
        if nbytes is not None:
            now[name] = nbytes
        if times[rank][-1] == t:  # several changes at one instant: keep the last
            held[rank][-1] = totals[rank]
        else:
            times[rank].append(t)
            held[rank].append(totals[rank])
        if totals[rank] > peaks[rank]:
            peaks[rank] = totals[rank]
            biggest[rank] = dict(now)

    for kind, rec in trace.events:
        if kind == "hold" or (kind == "op" and rec.nbytes):
            store(rec.rank, rec.t_start, rec.name, rec.nbytes)
        elif kind == "free":
            store(rec.rank, rec.t_start, rec.name, None)
        elif kind == "recv" and rec.name is not None:
            store(rec.dst, rec.t_recv, rec.name, rec.nbytes)
    return MemoryTimeline(times, held, biggest, trace.end_time)


def over_capacity(run: RunResult | Trace, cost: CostModel | None = None) -> list[str]:
    """One line per device whose peak memory exceeds the cost model's ``memory`` (none if unlimited)."""
    trace, cost = unpack(run, cost)
    if cost is None or cost.memory is None:
        return []
    mem = memory_timeline(trace)
    lines = []
    for r in range(mem.world_size):
        if mem.peak(r) > cost.memory:
            top = sorted(mem.biggest[r].items(), key=lambda kv: -kv[1])[:3]
            what = ", ".join(f"{name} ({_size(b)})" for name, b in top)
            lines.append(
                f"device {r} holds {_size(mem.peak(r))} at t={mem.peak_time(r) * 1e6:.3f}us, over its capacity of "
                f"{_size(cost.memory)}; the largest values then: {what}"
            )
    return lines


def _size(nbytes: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{int(nbytes)} B"
