"""Errors of the real-process backend; they extend the simulator's errors so callers catch both alike.

Inside a rank process:
- ``CommTimeoutError``: a send/recv/collective did not complete within the backend's timeout.
- ``CommError``: torch.distributed failed a communication (typically because a peer died or closed).

In the launching process, a failed run raises ``RemoteRankError`` (a ``RankError``): it names the rank,
the exception type and message, and carries the rank's traceback text; ``RankTimeoutError`` is the
same for a rank that timed out (it is also a ``TimeoutError``). ``WorldBusyError``: a second thread
called a world that is already running a program.
"""

from __future__ import annotations

from ..core.errors import RankError, SimulationError


class CommFailure(SimulationError):
    """A torch.distributed communication on this rank failed or timed out. ``waiting``: the call it was in
    (``all_reduce``, ``send(dst=1, tag=0)``); ``collective``: whether that is a collective (the launcher compares
    the calls of the ranks that failed)."""

    waiting: str = ""
    collective: bool = False


class CommError(CommFailure):
    """A torch.distributed communication failed on this rank (its peer may have failed first)."""


class CommTimeoutError(CommFailure, TimeoutError):
    """A communication on this rank did not complete in time: a hang, turned into an error."""


class RemoteRankError(RankError):
    """A rank process failed. ``rank``, ``exc_type`` (a name), ``remote_traceback`` (text)."""

    def __init__(self, rank: int, exc_type: str, message: str, remote_traceback: str, note: str = "") -> None:
        text = f"device {rank} raised {exc_type}: {message}"
        if note:
            text += f"\n{note}"
        if remote_traceback:
            text += f"\n\n--- traceback from device {rank}'s process ---\n{remote_traceback.rstrip()}"
        SimulationError.__init__(self, text)
        self.rank = rank
        self.exc_type = exc_type
        self.remote_message = message
        self.remote_traceback = remote_traceback


class RankTimeoutError(RemoteRankError, TimeoutError):
    """A rank timed out (a hang: e.g. a recv whose sender never sends)."""


class WorldBusyError(SimulationError, RuntimeError):
    """A TorchWorld was called while another thread's call on it was still running."""
