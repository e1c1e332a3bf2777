"""Stopping a simulated rank that makes no progress, and saying where every rank was, as torch's Flight Recorder does.

A rank's thread runs the program between two torch.distributed calls while every other rank waits (``ranks``).
A program that sleeps, or loops without ever calling torch.distributed again, would hold every rank forever:
so the rank's greenlet waits for its next call at most ``timeout`` seconds of wall-clock time, then stops the
thread and raises ``NoProgressError``, whose text lists each rank: the one that computes (and at which line of
the program), the ones that wait (in which call), and each rank's last calls.

A thread cannot be killed from outside. It is stopped from within: ``RankAborted`` is raised in it at its next
Python instruction (``PyThreadState_SetAsyncExc``), and ``time.sleep`` on a simulated rank waits on the rank's
stop event, so a sleeping rank wakes at once. A rank blocked inside C code for good (a socket read) cannot be
stopped: its thread is named in the error instead of being left behind silently.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from ..core.errors import SimulationError
from .context import RankAborted, current, is_library_file, user_line

_SIMULATOR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the simulator's own files that hold programs (the examples), where a rank's line may be
_EXAMPLES = {os.path.join(_SIMULATOR, "torchsim", f"{name}.py") for name in ("programs", "stage_programs")}
DEFAULT_TIMEOUT = 60.0  # seconds a rank may compute between two torch.distributed calls before it is stopped
_sleep = time.sleep
_patched = threading.Lock()


class NoProgressError(SimulationError):
    """A simulated rank made no torch.distributed call for ``timeout`` seconds; it was stopped.

    ``rank``: the rank that was stopped; ``where``: each rank's state when it was (rank -> one line)."""

    def __init__(self, message: str, rank: int, where: dict[int, str]) -> None:
        super().__init__(message)
        self.rank, self.where = rank, where


def install_sleep() -> None:
    """``time.sleep`` on a simulated rank's thread waits on the rank's stop event (a stopped rank wakes at once);
    on any other thread it is the original. Once per process."""
    with _patched:
        if time.sleep is not _sleep:
            return

        def sleep(seconds: float) -> None:
            ctx = current()
            if ctx is None:
                return _sleep(seconds)
            if seconds < 0:
                raise ValueError("sleep length must be non-negative")
            if ctx.stop.wait(min(seconds, threading.TIMEOUT_MAX)):
                raise RankAborted

        sleep.__doc__ = _sleep.__doc__
        time.sleep = sleep


def interrupt(thread: threading.Thread) -> None:
    """Raise ``RankAborted`` in ``thread`` at its next Python instruction."""
    if thread.ident is not None and thread.is_alive():
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(RankAborted))


def program_line(thread: threading.Thread) -> str:
    """The line of the user's program ``thread`` runs now (``prog.py:12 `time.sleep(60)```), or ""."""
    return user_line(sys._current_frames().get(thread.ident or -1), _machinery)


def _machinery(name: str) -> bool:
    """Whether a frame of file ``name`` is torch's or the simulator's (the pricing of an op), not the program's."""
    simulator = name.startswith(_SIMULATOR + os.sep) and name not in _EXAMPLES
    return simulator or is_library_file(name) or name.startswith("<")  # <string>: code torch generates


def no_progress(stopped: int, timeout: float, ranks: Iterable[Any], world_size: int | None) -> NoProgressError:
    """The error for rank ``stopped``, which computed ``timeout`` seconds without a torch.distributed call.

    ranks:      the threads of the ranks that have started (``ranks.RankThread``: ``ctx.rank``, ``doing``,
                ``last_calls``, ``line``), in any order; the stopped one's ``line`` was taken before it was stopped
    world_size: the simulation's; None on a real rank, whose peers are other processes (they report their own)"""
    started = {t.ctx.rank: t for t in ranks}
    where: dict[int, str] = {}
    for rank in range(world_size) if world_size is not None else sorted(started):
        t = started.get(rank)
        if t is None:
            where[rank] = "has not started (a rank starts when the ranks before it first wait)"
            continue
        if t.ctx.rank == stopped:
            state = f"computes, outside torch.distributed, at {t.line}" if t.line else "computes"
        elif t.doing in (None, "computing"):
            state = "computes (its turn comes after the stopped rank's)"
        elif t.doing == "finished" or t.doing.startswith("raised"):
            state = t.doing
        else:
            state = f"waits in {t.doing}"
        last = "; ".join(t.last_calls) if t.last_calls else "none"
        where[t.ctx.rank] = f"{state}\n      its last calls: {last}"
    lines = "\n".join(f"  rank {r}: {w}" for r, w in where.items())
    if world_size is None:  # a real rank: its peers time out waiting for it
        return NoProgressError(
            f"rank {stopped} made no torch.distributed call for {timeout:g} s (the world's timeout), so it was "
            f"stopped (the other ranks wait for it):\n{lines}\nA program that sleeps or loops until another rank "
            "changes something should wait in a torch.distributed call instead (a recv, a barrier). If the rank "
            "only computes for long, give it the time: TorchWorld(..., timeout=seconds).",
            stopped,
            where,
        )
    return NoProgressError(
        f"simulate_torch: rank {stopped} made no torch.distributed call for {timeout:g} s, so it was stopped "
        f"(the other ranks cannot go on without it). Where each rank was:\n{lines}\n"
        "A program that sleeps or loops until another rank changes something waits forever on the simulator (a "
        "rank runs only between the others' calls): make it wait in a torch.distributed call instead (a recv, a "
        "barrier). If the rank only computes for long, give it the time: simulate_torch(..., timeout=seconds).",
        stopped,
        where,
    )
