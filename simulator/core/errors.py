"""Errors a bad program gets, each naming what is wrong, where, and how to fix it."""

from __future__ import annotations


class SimulationError(Exception):
    """Base class for every error the simulator raises about a program."""


class ContractError(SimulationError):
    """A received message does not match the shape/dtype its receiver declared."""


class DeadlockError(SimulationError):
    """Every unfinished device is blocked: nothing can ever happen again."""

    def __init__(self, message: str, blocked: dict[int, str], cycle: list[int] | None) -> None:
        super().__init__(message)
        self.blocked = blocked
        self.cycle = cycle


class RankError(SimulationError):
    """A rank program raised; the original exception is chained as ``__cause__``."""

    def __init__(self, rank: int, exc: BaseException) -> None:
        super().__init__(f"device {rank} raised {type(exc).__name__}: {exc}{read_only_hint(exc)}")
        self.rank = rank


def read_only_hint(exc: BaseException) -> str:
    """What to do when a program writes into a value it was given (numpy says only "read-only")."""
    numpy_says = ("assignment destination is read-only", "output array is read-only")
    if isinstance(exc, ValueError) and any(words in str(exc) for words in numpy_says):
        return (
            "\n  values a device holds, receives or computes are read-only (the trace keeps them as they were):"
            "\n  make a new array instead (y = x + 1, not x += 1), or change a copy (y = x.copy())"
        )
    return ""


class UnreceivedMessagesError(SimulationError):
    """The run ended with messages nobody received."""


class UnreceivedMessagesWarning(UserWarning):
    """The run ended with messages nobody received."""


class CollectiveMismatchError(SimulationError):
    """Members of one group made different collective calls (kind, arguments, or group order)."""


class OpError(SimulationError):
    """An op's function raised; the message names the op, the device and its inputs, the cause is chained."""


class BufferLimitError(SimulationError):
    """The payloads the engine holds for a run's messages passed ``World.max_buffered_bytes``."""


class EventLimitError(SimulationError):
    """A run recorded more events than its limit: most likely a program that never stops."""


def describe_inputs(inputs: tuple) -> str:
    """``(2, 4) float64, (3, 6) float64``: the shapes and dtypes of an op's inputs, for error messages."""
    import numpy as np

    parts = []
    for x in inputs:
        if isinstance(x, np.ndarray) or np.isscalar(x):
            a = np.asarray(x)
            parts.append(f"{a.shape} {a.dtype.name}")
        else:
            parts.append(type(x).__name__)
    return ", ".join(parts) if parts else "no inputs"
