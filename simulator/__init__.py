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
from .mesh import DeviceMesh
from .placements import Partial, Replicate, Shard
from .redistribute import assemble, distribute, redistribute
from .sharded import Layout, ShardedArray
from .trace import Message, Op, Trace

__all__ = [
    "ContractError",
    "CostModel",
    "DeadlockError",
    "Device",
    "DeviceMesh",
    "Engine",
    "Layout",
    "Message",
    "Op",
    "Partial",
    "RankError",
    "Replicate",
    "Request",
    "RunResult",
    "Shard",
    "ShardedArray",
    "SimulationError",
    "Trace",
    "UnreceivedMessagesError",
    "UnreceivedMessagesWarning",
    "World",
    "assemble",
    "distribute",
    "redistribute",
]
