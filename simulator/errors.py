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
        super().__init__(f"device {rank} raised {type(exc).__name__}: {exc}")
        self.rank = rank


class UnreceivedMessagesError(SimulationError):
    """The run ended with messages nobody received."""


class UnreceivedMessagesWarning(UserWarning):
    """The run ended with messages nobody received."""
