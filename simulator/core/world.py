"""``World``: the rules a run goes by (how many devices, the cost model, send mode, limits), checked when made.

``World(4).run(program, x)`` runs ``program(device, x)`` on each of four devices (``simulator.core.engine``)
and returns a ``RunResult``; ``World(4).start(...)`` gives the live ``Engine`` to advance step by step.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..cost.model import CostModel
from ..cost.presets import teaching
from .arguments import check_parts
from .engine import Engine, RunResult
from .run_errors import check_program

SEND_MODES = ("eager", "rendezvous")
LEFTOVER_POLICIES = ("warn", "error", "ignore")
MAX_DEVICES = 1 << 16
INF = float("inf")
# Default limits on events per run: a program that never stops ends with an error naming who keeps
# going, long before it fills memory (about 0.5 kB per event with payloads, 0.2 kB without).
MAX_EVENTS_WITH_PAYLOADS = 2_000_000
MAX_EVENTS_METADATA = 50_000_000


def default_max_buffered_bytes() -> int:
    """The default budget for message payloads the engine holds (``World.max_buffered_bytes``): 512 MiB, or a
    quarter of this machine's memory if that is less. Copying 512 MiB of fresh memory takes a second or so (a
    few on a busy machine): a run that would fill memory stops in seconds."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not a POSIX system: assume a small machine (8 GiB)
        memory = 8 << 30
    return min(512 << 20, memory // 4)


@dataclass(frozen=True)
class World:
    """A set of simulated devices and the rules they run under.

    Args:
        size: number of devices (ranks 0..size-1)
        cost: the cost model (latency, bandwidth, FLOP/s), or the name of a preset ("dgx-h100"); by
            default ``presets.teaching()``, at which small examples' ops and messages all show
        send_mode: "eager" (a send completes once its bytes leave; buffered) or "rendezvous" (a send
            cannot start until the matching receive is posted: two sends facing each other
            deadlock, as with large messages in MPI or NCCL)
        strict: every recv must declare its contract (shape and dtype)
        keep_payloads: keep every message payload and op input/output in the trace (for the checker and
            stepping); turn off for large runs to record metadata only
        leftovers: what to do with messages nobody received: "warn", "error" or "ignore"
        max_events: stop a run that records more events (messages and ops) than this with an EventLimitError
            (default: 2,000,000 with payloads, 50,000,000 metadata only)
        program_time: each device also pays the wall time its program's own code runs between its calls,
            measured here as it runs, as real ranks pay it (``simulator.core.program_time``); simulated
            times then vary from run to run. Off by default
        max_buffered_bytes: the most bytes of message payloads the engine may hold: the copies of writable
            arrays that sends make, while they wait to be received (an eager send returns at once, so a
            sender that never waits could buffer without end) and, with ``keep_payloads``, for the whole
            run, as the trace keeps them. A send past it ends the run with a BufferLimitError naming the
            sender and the bytes. Read-only arrays (what hold, compute and recv give) need no copy and
            do not count. Default: 512 MiB, or a quarter of the machine's memory if less
        blas_threads: threads BLAS (NumPy's matrix products) may use while the devices run: 1 by default, as
            devices take turns and more threads only contend for the cores (``simulator.core.threads``);
            None leaves BLAS as it is
        book_collectives: let a collective that can be booked whole be (a ring all-reduce on private links:
            ``simulator.collectives.booked``), its trace the one its messages would make, event for
            event, payloads included. False runs every collective message by message (to time that
            path, or to compare the two). On by default

    Examples:
        >>> import numpy as np
        >>> from simulator import World
        >>> def two_stage(dev, x):
        ...     if dev.rank == 0:
        ...         dev.send(2 * x + 1, 1)
        ...     else:
        ...         return dev.recv(0, shape=(1,), dtype=np.float64) ** 2
        >>> run = World(2).run(two_stage, np.array([3.0]))
        >>> run.outputs, len(run.trace.messages)
        ([None, array([49.])], 1)
    """

    size: int
    cost: CostModel = field(default_factory=teaching)
    send_mode: str = "eager"
    strict: bool = False
    keep_payloads: bool = True
    leftovers: str = "warn"
    max_events: int | None = None
    program_time: bool = False
    max_buffered_bytes: int | None = None
    blas_threads: int | None = 1
    book_collectives: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.cost, str):  # a preset's name, e.g. World(8, cost="dgx-h100")
            from ..cost.presets import preset

            object.__setattr__(self, "cost", preset(self.cost))
        if not hasattr(self.cost, "network"):
            raise TypeError(
                f"World(cost={self.cost!r}): give a CostModel, or a preset name such as 'dgx-h100' "
                "(see simulator.cost.presets.PRESETS)"
            )
        if isinstance(self.size, (bool, np.bool_)) or not isinstance(self.size, (int, np.integer)):
            raise TypeError(f"World(size={self.size!r}): size is a number of devices, an int from 1 to {MAX_DEVICES:,}")
        object.__setattr__(self, "size", int(self.size))
        if not 1 <= self.size <= MAX_DEVICES:
            raise ValueError(
                f"World(size={self.size:,}): size must be from 1 to {MAX_DEVICES:,} devices (each device is a "
                "coroutine with its own memory; a larger world would not fit this simulator)"
            )
        if self.max_events is None:
            limit = MAX_EVENTS_WITH_PAYLOADS if self.keep_payloads else MAX_EVENTS_METADATA
            object.__setattr__(self, "max_events", limit)
        elif isinstance(self.max_events, bool) or not isinstance(self.max_events, int) or self.max_events < 1:
            raise ValueError(f"World(max_events={self.max_events!r}): give a positive number of events")
        if self.send_mode not in SEND_MODES:
            raise ValueError(f"World(send_mode={self.send_mode!r}): choose one of {SEND_MODES}")
        if self.leftovers not in LEFTOVER_POLICIES:
            raise ValueError(f"World(leftovers={self.leftovers!r}): choose one of {LEFTOVER_POLICIES}")
        if not isinstance(self.program_time, bool):
            raise ValueError(f"World(program_time={self.program_time!r}): give True or False")
        if self.blas_threads is not None and (
            isinstance(self.blas_threads, bool) or not isinstance(self.blas_threads, int) or self.blas_threads < 1
        ):
            raise ValueError(
                f"World(blas_threads={self.blas_threads!r}): give a number of threads >= 1, or None to leave BLAS as it is"
            )
        if self.max_buffered_bytes is None:
            object.__setattr__(self, "max_buffered_bytes", default_max_buffered_bytes())
        elif (
            isinstance(self.max_buffered_bytes, (bool, np.bool_))
            or not isinstance(self.max_buffered_bytes, (int, np.integer))
            or self.max_buffered_bytes < 0
        ):
            raise ValueError(
                f"World(max_buffered_bytes={self.max_buffered_bytes!r}): give a whole number of bytes >= 0, "
                "e.g. 8 << 30 for 8 GiB"
            )
        if not isinstance(self.book_collectives, bool):
            raise ValueError(f"World(book_collectives={self.book_collectives!r}): give True or False")

    def start(self, program: Callable[..., Any], *args: Any, **kwargs: Any) -> Engine:
        """Start ``program(device, *args, **kwargs)`` on every device; advance it with ``step``."""
        check_program(program)
        check_parts(args, kwargs, self.size)
        return Engine(self, program, args, kwargs)

    def run(self, program: Callable[..., Any], *args: Any, **kwargs: Any) -> RunResult:
        """Run ``program(device, *args, **kwargs)`` on every device to the end."""
        return self.start(program, *args, **kwargs).finish()
