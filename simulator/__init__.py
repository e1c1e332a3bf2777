"""An educational simulator of parallelism strategies: devices, messages, and a simulated clock.

The package is cut in layers; each imports only the layers below it (checked by import-linter, see
``pyproject.toml``), from the bottom up:

| package | holds |
| --- | --- |
| cost | what things cost: the cost model, links and topologies, presets, measured spread, units, and arrays known only by their shape (``MetaArray``) |
| core | the engine (clock, scheduling), the device programs see, messaging, the trace, errors |
| tensors | meshes, placements, sharded arrays, and moving them between layouts as messages |
| collectives | all-reduce, all-gather, ... written as messages, one module per algorithm |
| checker | the single-device reference, comparison, diagnoses, and the verdict |
| parallel | strategies (data, tensor, pipeline, ZeRO, transformer, experts) and schedules as data |
| real | our rank programs on real processes (torch.distributed: gloo, NCCL, torchrun) |
| torchsim | PyTorch's own programs on simulated ranks (``simulate_torch``) |
| views | text views, plots (matplotlib), the step-through web page and widget |
| calibration | real ranks measured and fitted to a cost model; predictions beside real runs |
| teach | named scenarios, exercises, the figures in ``figures/`` |
| cli | the command line (``python -m simulator``) |

``from simulator import ...`` gives the names a program, a notebook or the README uses; the views and
the scenarios load when first asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

from .checker import CheckReport, Reference, check
from .checker import reference as _reference
from .collectives import ALGORITHMS, ulp_distance
from .core.arguments import PerDevice
from .core.device import Device, Request
from .core.engine import Engine, RunResult
from .core.errors import (
    ContractError,
    DeadlockError,
    RankError,
    SimulationError,
    UnreceivedMessagesError,
    UnreceivedMessagesWarning,
)
from .core.trace import Message, Op, Trace
from .core.world import World
from .cost import CostModel, MetaArray, preset
from .tensors import (
    DeviceMesh,
    FlatSlice,
    Layout,
    P,
    Partial,
    R,
    Replicate,
    S,
    Shard,
    ShardedArray,
    assemble,
    distribute,
    redistribute,
)

# Loaded when first asked for: matplotlib, the web view and the scenarios are not needed to run a program.
_LAZY = {
    "view": ("simulator.teach.view", None),
    "scenario": ("simulator.teach.examples", "get"),
    "Stepper": ("simulator.views.stepper", "Stepper"),
    "text_timeline": ("simulator.views.textgrid", "text_timeline"),
    "sharding_table": ("simulator.views.sharding_table", "sharding_table"),
    "memory_timeline": ("simulator.views.memory", "memory_timeline"),
    "comm_summary": ("simulator.checker.comm_summary", "comm_summary"),
    "plot_timeline": ("simulator.views.plot", "plot_timeline"),
    "plot_timelines": ("simulator.views.plot", "plot_timelines"),
    "plot_memory": ("simulator.views.plot", "plot_memory"),
    "plot_sharding": ("simulator.views.plot.sharding", "plot_sharding"),
    "write_chrome_trace": ("simulator.views.plot", "write_chrome_trace"),
    "simulate_torch": ("simulator.torchsim.simulate", "simulate_torch"),
}


TORCH_EXTRA = 'pip install -e ".[torch]"'  # what a name that runs PyTorch's code needs


def _needs_torch(name: str, missing: ModuleNotFoundError) -> Any:
    """A stand-in for ``name`` where torch is not installed: ``help`` and ``from simulator import *`` still work,
    and a call says which extra to install."""

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise ModuleNotFoundError(f"simulator.{name} runs PyTorch's code and needs torch: {TORCH_EXTRA}") from missing

    unavailable.__name__ = unavailable.__qualname__ = name
    unavailable.__doc__ = f"Needs torch, which is not installed here: {TORCH_EXTRA}."
    return unavailable


def _is_torch(exc: ModuleNotFoundError) -> bool:
    return (exc.name or "").split(".")[0] == "torch"


def _reference_of_torch(model: Any, *args: Any, **kwargs: Any) -> Reference:
    """``Reference.of_torch``, lent to the checker (which never imports torch) and loaded when first used."""
    try:
        build = importlib.import_module("simulator.torchsim.reference").reference_of_torch
    except ModuleNotFoundError as exc:
        if not _is_torch(exc):
            raise
        raise ModuleNotFoundError(f"Reference.of_torch reads a torch module and needs torch: {TORCH_EXTRA}") from exc
    return build(model, *args, **kwargs)


_reference.BUILDERS["torch"] = _reference_of_torch


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if not _is_torch(exc):
                raise
            return _needs_torch(name, exc)  # not cached: installing torch mid-session then works
        value = loaded if attr is None else getattr(loaded, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'simulator' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])


__all__ = [
    "ALGORITHMS",
    "CheckReport",
    "ContractError",
    "CostModel",
    "DeadlockError",
    "Device",
    "DeviceMesh",
    "Engine",
    "FlatSlice",
    "Layout",
    "Message",
    "MetaArray",
    "Op",
    "P",
    "Partial",
    "PerDevice",
    "R",
    "RankError",
    "Reference",
    "Replicate",
    "Request",
    "RunResult",
    "S",
    "Shard",
    "ShardedArray",
    "SimulationError",
    "Trace",
    "UnreceivedMessagesError",
    "UnreceivedMessagesWarning",
    "World",
    "assemble",
    "check",
    "distribute",
    "preset",
    "redistribute",
    "ulp_distance",
    *_LAZY,
]
