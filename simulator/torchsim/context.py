"""Which simulated rank the running thread is, and where in the user's code a torch call was made.

A torch program on simulated ranks runs each rank on a thread of its own (``ranks.py``), one at a time.
Torch's process-group state, the process group's calls and the module hooks all ask ``current()`` which
rank they serve: the answer is kept per thread (``threading.local``), never in a global, so two simulations
can run side by side. ``call_site()`` finds the line of the user's program that made a torch call, for the
errors that name the torch calls of each rank.
"""

from __future__ import annotations

import linecache
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import typing_extensions  # a dependency of torch

_local = threading.local()
# Files whose frames are torch's or this backend's machinery, never the user's program: skipped by call_site.
_TORCH_DIR = os.path.dirname(torch.__file__)
_OWN = {
    os.path.join(os.path.dirname(__file__), f"{name}.py")
    for name in (
        "context",
        "process_group",
        "works",
        "c10d",
        "names",
        "pricing",
        "ranks",
        "simulate",
        "stops",
        "bookkeeping",
    )  # fmt: skip
}
_LIBRARY = (_TORCH_DIR, os.path.dirname(threading.__file__))
_OWN.add(typing_extensions.__file__)  # torch's deprecated calls (all_gather_into_tensor) go through its wrapper


class RankAborted(BaseException):
    """Raised inside a rank's thread when its simulation ends early (another rank failed, or a deadlock): it
    unwinds the program without being caught by ``except Exception``."""


@dataclass
class RankContext:
    """What one simulated rank's thread knows of itself.

    rank, world_size: its place in the simulated world
    request:          ``request(fn, what)`` runs ``fn(device)`` on the rank's simulated device and returns its
                      result (the thread waits meanwhile); ``what`` names the torch call, for errors
    world:            its own torch.distributed state (``c10d.RankWorld``)
    sink:             where module outputs and priced ops go until the next request (``ranks.py``)
    algorithms:       the collective algorithm for each kind of collective (as ``World`` programs choose them)
    """

    rank: int
    world_size: int
    request: Callable[[Callable[[Any], Any], str], Any]
    world: Any = None
    sink: Any = None
    algorithms: dict[str, str] = field(default_factory=dict)
    internal: int = 0  # > 0 while the backend itself computes with torch (not the program: not priced)
    group_tag: str = ""  # makes this rank's process-group names unique in the process (see c10d.py)
    unwaited: list = field(default_factory=list)  # collectives called with async_op=True, not waited on yet
    bookkeeping: int = 0  # > 0 while torch does its own bookkeeping (bookkeeping.py): its messages are labelled
    stop: threading.Event = field(default_factory=threading.Event)  # set when the rank is stopped (stops.py)


def current() -> RankContext | None:
    """The simulated rank this thread runs, or None (a thread that is no simulated rank)."""
    return getattr(_local, "rank", None)


def enter(ctx: RankContext | None) -> None:
    """Make this thread simulated rank ``ctx`` (None: no rank)."""
    _local.rank = ctx


class internal:
    """``with internal(ctx):`` the backend's own torch work (copies in and out), not priced as the program's."""

    def __init__(self, ctx: RankContext | None) -> None:
        self.ctx = ctx

    def __enter__(self) -> None:
        if self.ctx is not None:
            self.ctx.internal += 1

    def __exit__(self, *exc: Any) -> None:
        if self.ctx is not None:
            self.ctx.internal -= 1


def call_site(depth: int = 2) -> str:
    """The user's line that led here: ``prog.py:12 `dist.all_reduce(y)```, or "" when there is none.

    It is the innermost frame that is neither torch's nor this backend's nor the threading module's."""
    return user_line(sys._getframe(depth), is_library_file)


def user_line(frame: Any, library: Callable[[str], bool]) -> str:
    """The innermost line, from ``frame`` outwards, of a file ``library`` says is not library code, as
    ``prog.py:12 `the line```; "" when there is none."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not library(name):
            line = linecache.getline(name, frame.f_lineno).strip()
            where = f"{os.path.basename(name)}:{frame.f_lineno}"
            return f"{where} `{line}`" if line else where
        frame = frame.f_back
    return ""


def is_library_file(name: str) -> bool:
    """Whether a frame of file ``name`` is torch's, this backend's or the threading module's, not the user's."""
    return name in _OWN or name.startswith(_LIBRARY)
