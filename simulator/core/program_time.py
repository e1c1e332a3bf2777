"""Devices that also pay for their program's own time: ``World(program_time=True)``.

A simulated clock moves only for what the cost model prices: ops and messages. On real ranks the rank
program's own code takes time as well: the Python between its ops (a pipeline walking its schedule, a
collective choosing its next block), the copy a ``hold`` makes. In a training step of small layers this is
about a tenth of the step: a two-replica data-parallel step of the seed MLP spends 3 to 4 ms of its
35 ms there, on real gloo ranks and in a simulation alike.

With ``program_time=True`` each device, at each of its calls (an op, a send, a receive, a wait, a
test), first pays the wall time its program ran since its previous call returned: the same code, timed
as the simulation runs it on this machine (SimGrid's SMPI times the computation between an MPI program's
calls the same way). A call's own work is not counted: an op costs what the cost model says, not what
NumPy took here. The time a program runs after its last call is paid when it returns.

The price: simulated times then depend on this machine and its load, so two runs of one program no
longer give the same trace. Off by default. ``dev.clock`` read by the program counts its own time up to
its latest call. Where the simulation itself copies what a real rank does not (the ring all-reduce's
result, assembled from blocks a real rank receives in place; its input, which a real rank lends), those
copies are not counted either.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from time import perf_counter
from typing import Any

from .device import Device

# The calls that pay the program's time before they run (``_post`` and ``_reduce``: a collective's parts and
# reductions). Collectives are not among them: their own Python between their messages is program time too,
# as it is on real ranks.
TIMED_CALLS = ("compute", "isend", "send", "irecv", "recv", "wait", "test", "_post", "_reduce")


def _timed(call: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(call)
    def timed(self: ProgramTimedDevice, *args: Any, **kwargs: Any) -> Any:
        if not self._depth:
            self.pay_program_time()
        self._depth += 1
        try:
            return call(self, *args, **kwargs)
        finally:
            self._depth -= 1
            if not self._depth:  # back in the program: its time runs from here
                self._left = perf_counter()

    return timed


class ProgramTimedDevice(Device):
    """A ``Device`` whose clock also counts its program's wall time between calls (see the module)."""

    def __init__(self, engine: Any, rank: int) -> None:
        super().__init__(engine, rank)
        self._depth = 0  # calls in progress (a send waits inside itself): only the outermost pays
        self._left = perf_counter()  # when control last went back to the program

    def pay_program_time(self) -> None:
        """Move the clock on by the program's wall time since its last call returned."""
        spent = perf_counter() - self._left
        if spent > 0:  # (the call that follows sets ``_left`` anew as it returns)
            self._advance(self.clock + spent)  # may let other devices run: their time is not this one's

    def start_program(self) -> None:
        """The program starts now (its greenlet's first run)."""
        self._left = perf_counter()

    @contextmanager
    def simulation_work(self, share: float = 1.0) -> Iterator[None]:
        """Work the simulation does in the program's place, ``share`` of which a real rank does not do (a
        ring all-reduce's result assembled from p blocks: a real rank copies its own block and receives the
        others in place): that share of its time is not the program's."""
        t0 = perf_counter()
        try:
            yield
        finally:
            self._left += share * (perf_counter() - t0)


for _name in TIMED_CALLS:
    setattr(ProgramTimedDevice, _name, _timed(getattr(Device, _name)))
