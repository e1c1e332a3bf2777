"""An educational simulator of parallelism strategies: devices, messages, and a simulated clock."""

from .cost import CostModel
from .device import Device, Request
from .engine import Engine, RunResult, World
from .errors import (
    ContractError,
    DeadlockError,
    RankError,
    SimulationError,
    UnreceivedMessagesError,
    UnreceivedMessagesWarning,
)
from .trace import Message, Op, Trace

__all__ = [
    "ContractError",
    "CostModel",
    "DeadlockError",
    "Device",
    "Engine",
    "Message",
    "Op",
    "RankError",
    "Request",
    "RunResult",
    "SimulationError",
    "Trace",
    "UnreceivedMessagesError",
    "UnreceivedMessagesWarning",
    "World",
]
