"""The core: devices as processes with private memory, messages between them, a simulated clock, the trace.

Each module builds only on those below it in this list (checked by import-linter):

================  ==========================================================================================
world.py          ``World``: the rules a run goes by, checked when made; ``run`` and ``start``
hooks.py          what the collectives need of a device beyond a rank program's API (post a part, reduce
                  a chunk, agree on a call), as public functions; the engine's own are public on ``Engine``
engine.py         ``Engine`` and ``RunResult``: one greenlet per device, scheduled in simulated time order; the
                  hook the layers above use (``Engine.held_calls``, ``Engine.caches``, ``recorder``, ``wake``)
run_errors.py     what a bad run reports: deadlocks with their cycle, messages nobody received
arguments.py      what each device is given: its own copy of every argument, or its part (``PerDevice``)
lanes.py          a ring collective's steps (send right, receive from the left, reduce) in one loop, bound once
program_time.py   devices that also pay their program's own wall time (``World(program_time=True)``)
device.py         ``Device``: memory, ops and messaging, the only thing a rank program sees (the
                  collectives attach their methods from the layer above)
messaging.py      ``send``/``recv``/``isend``/``irecv``/``wait``/``test`` on the engine's clock
p2p.py            the rules every device's messaging keeps (peers, tags, contracts, who waits), shared
                  with a real rank's (``simulator.real.messages``)
payloads.py       values on a device: read-only copies, what a message may carry, ops that name inputs
columnar.py       the trace as columns, ``Message``/``Op`` made on access
ordering.py       one numbering for every run: events in canonical time order
rows.py           the packed rows the engine writes as a run goes
trace.py          ``Trace``, ``Message``, ``Op``: what happened, and how it reads
values.py         how a value reads in every text view
tags.py           users' tags below 2**30, the collectives' above
errors.py         the errors a bad program gets, each naming what is wrong, where, and the fix
files.py          writing a file whole or not at all, and devices, pipes and standard output through
threads.py        one BLAS thread while devices run (``World(blas_threads=...)``)
================  ==========================================================================================
"""

from .arguments import PerDevice
from .device import Device, Request
from .engine import Engine, RunResult
from .errors import (
    BufferLimitError,
    CollectiveMismatchError,
    ContractError,
    DeadlockError,
    EventLimitError,
    InfiniteTimeError,
    OpError,
    RankError,
    SimulationError,
    UnreceivedMessagesError,
    UnreceivedMessagesWarning,
)
from .trace import Message, Op, Trace
from .values import ValueStyle
from .world import World

__all__ = [
    "BufferLimitError",
    "CollectiveMismatchError",
    "ContractError",
    "DeadlockError",
    "Device",
    "Engine",
    "EventLimitError",
    "InfiniteTimeError",
    "Message",
    "Op",
    "OpError",
    "PerDevice",
    "RankError",
    "Request",
    "RunResult",
    "SimulationError",
    "Trace",
    "UnreceivedMessagesError",
    "UnreceivedMessagesWarning",
    "ValueStyle",
    "World",
]
