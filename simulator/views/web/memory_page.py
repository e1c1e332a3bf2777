"""The memory calculator: one self-contained page where a student picks a model, the ZeRO stage, recomputation,
TP, PP, DP, CP and the microbatch size, and sees what one device holds: parameters, gradients, optimizer state
and activations, each bar explained, against an H100 80GB (79.6 GiB, as ``dgx_h100`` gives it).

The numbers are the what-if's own (``simulator.parallel.whatif.memory.device_memory``): Python computes the
tables the formulas read (each model's parameters on the first pipeline stage per tp and pp, one layer's
activations per tp, cp, recomputation, sequence parallelism and microbatch size), and ``memory.js`` finishes
them with ``device_memory``'s arithmetic (ZeRO's sharding, the 1F1B schedule's microbatches held). A test holds
the page's numbers to ``device_memory``'s for many settings::

    python -m simulator memory -o memory.html
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from ...cost.presets import dgx_h100
from ...parallel.schedules import make_schedule
from ...parallel.whatif.layer import layer_params_per_rank
from ...parallel.whatif.memory import Memory, device_memory, layer_activations, rank_params, transient
from ...parallel.whatif.model import MODELS, Transformer
from ...parallel.whatif.training_setup import PRECISION, RECOMPUTE, SetupError, TrainingSetup
from .assets import MEMORY
from .page import tool_page, write_text

SCHEMA = "parallelism-simulator/views/web/memory/1"
NAMES = ("llama3-8b", "llama2-13b", "mixtral-8x7b", "llama3-70b", "gpt3-175b", "llama3-405b")
CHOICES: dict[str, tuple[Any, ...]] = {
    "tp": (1, 2, 4, 8),
    "pp": (1, 2, 4, 8, 16),
    "dp": (1, 2, 4, 8, 16, 32, 64),
    "cp": (1, 2, 4),
    "zero": (0, 1, 2, 3),
    "recompute": tuple(r for r in RECOMPUTE if r != "op"),  # torchtitan's op-level policy: a what-if setting only
    "sp": (True, False),
    "microbatch": (1, 2, 4, 8),
}
CAPACITY = dgx_h100().memory  # bytes: what an H100 80GB gives a program (nvidia-smi's total)
START = {
    "model": "llama3-70b",
    "tp": 8,
    "pp": 4,
    "dp": 8,
    "cp": 1,
    "zero": 1,
    "recompute": "selective",
    "sp": True,
    "microbatch": 1,
}


def layout_of(choice: dict[str, Any]) -> TrainingSetup:
    """The what-if's layout for a page choice: 1F1B with one microbatch per pipeline stage (m = pp), bf16."""
    return TrainingSetup(
        tp=choice["tp"],
        pp=choice["pp"],
        dp=choice["dp"],
        cp=choice["cp"],
        microbatch=choice["microbatch"],
        recompute=choice["recompute"],
        sequence_parallel=bool(choice["sp"]) and choice["tp"] > 1,
        zero=choice["zero"],
    )


def python_memory(choice: dict[str, Any]) -> Memory:
    """What ``device_memory`` says the first pipeline stage's devices hold, for a page choice."""
    model = MODELS[choice["model"]]
    layout = layout_of(choice)
    layout.check(model)
    schedule = make_schedule("1f1b", layout.pp, layout.microbatches)
    return device_memory(model, layout, schedule, 0, CAPACITY)


def _problem(model: Transformer, tp: int, pp: int, cp: int, zero: int) -> str | None:
    """Why the what-if refuses this layout (its words), or None. The other choices never decide it here: every
    sequence offered splits over tp and cp at every microbatch (the test compares the page's refusals anyway)."""
    try:
        TrainingSetup(tp=tp, pp=pp, cp=cp, zero=zero).check(model)
    except SetupError as exc:
        return str(exc)
    return None


def _model_tables(model: Transformer) -> dict[str, Any]:
    params, problems, acts = {}, {}, {}
    for tp in CHOICES["tp"]:
        for pp in CHOICES["pp"]:
            layout = TrainingSetup(tp=tp, pp=pp)
            placement = tuple(range(pp))
            try:  # layers that do not split evenly over pp: the page shows the refusal (problems, below)
                dense, experts = rank_params(model, layout, 0, placement)
                params[f"{tp}|{pp}"] = [dense, experts, layer_params_per_rank(model, layout)]
            except SetupError:
                pass
            for cp in CHOICES["cp"]:
                for zero in CHOICES["zero"]:
                    problem = _problem(model, tp, pp, cp, zero)
                    if problem:
                        problems[f"{tp}|{pp}|{cp}|{zero}"] = problem
        for cp in CHOICES["cp"]:
            for recompute in CHOICES["recompute"]:
                for sp in CHOICES["sp"]:
                    for b in CHOICES["microbatch"]:
                        layout = TrainingSetup(
                            tp=tp, cp=cp, recompute=recompute, sequence_parallel=sp and tp > 1, microbatch=b
                        )
                        total, kept = layer_activations(model, layout)
                        sharded = replace(layout, zero=2)  # ZeRO-2 and -3 also hold a layer's whole gradient
                        ends = [transient(model, lay, last) for lay in (layout, sharded) for last in (False, True)]
                        acts[f"{tp}|{cp}|{recompute}|{int(sp)}|{b}"] = [total, kept, *ends]
    return {
        "name": model.name,
        "layers": model.layers,
        "params": model.params,
        "table": params,
        "problems": problems,
        "acts": acts,
    }


def memory_data() -> dict[str, Any]:
    """What the page holds: the choices, and each model's tables."""
    wb, gb, ob = PRECISION["bf16"]
    return {
        "schema": SCHEMA,
        "choices": {k: list(v) for k, v in CHOICES.items()},
        "bytes": {"weights": wb, "grads": gb, "optimizer": ob},
        "capacity": CAPACITY,
        "start": START,
        "models": [_model_tables(MODELS[name]) for name in NAMES],
    }


def memory_page(data: dict[str, Any] | None = None) -> str:
    """The calculator as one HTML page: its module, styles and tables inline, nothing to fetch."""
    data = memory_data() if data is None else data
    return tool_page(
        "memory",
        "Memory per device: what takes the room",
        "python -m simulator memory",
        MEMORY,
        data,
        "window.calculator = calculate(ROOT, DATA)",
        "This page computes memory per device; it needs JavaScript.",
    )


def write_memory_page(path: str | Path) -> Path:
    """Write the memory calculator to ``path`` (whole or not at all); returns the path."""
    return write_text(memory_page(), path)


__all__ = ["CHOICES", "layout_of", "memory_data", "memory_page", "python_memory", "write_memory_page"]
