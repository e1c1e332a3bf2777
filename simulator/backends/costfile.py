"""A cost model on disk: the JSON file that calibration writes and the simulator loads.

    {"latency": 4.1e-05, "bandwidth": 1.9e9, "flops": 6.0e8, "name": "gloo, 2 ranks, measured",
     "measured": {...}}

Only the fields ``CostModel`` has are read back; ``measured`` keeps the raw samples for reference.
This module needs no torch: a simulation can load a file calibrated on another machine.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..cost import CostModel

_NUMBERS = ("latency", "bandwidth", "flops", "memory")


def save_cost(path: str | Path, cost: CostModel, measured: dict[str, Any] | None = None, name: str = "") -> Path:
    """Write ``cost``'s numbers (and any measurements) as JSON; returns the path."""
    data: dict[str, Any] = {k: getattr(cost, k) for k in _NUMBERS}
    if name:
        data["name"] = name
    if measured:
        data["measured"] = measured
    path = Path(path)
    path.write_text(json.dumps(data, indent=2) + "\n")
    return path


def load_cost(path: str | Path) -> CostModel:
    """The ``CostModel`` a file written by ``save_cost`` (or by hand) describes."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read a cost model from {path}: {exc}") from exc
    known = {f.name for f in dataclasses.fields(CostModel)}
    missing = [k for k in ("latency", "bandwidth", "flops") if k not in data]
    if missing:
        raise ValueError(f"cost model file {path} lacks {', '.join(missing)}; write it with save_cost or calibrate")
    return CostModel(**{k: v for k, v in data.items() if k in known})
