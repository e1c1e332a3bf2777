"""A cost model on disk: the JSON file that calibration writes and the simulator loads.

    {"latency": 4.1e-05, "bandwidth": 1.9e9, "flops": 6.0e8, "name": "gloo, 2 ranks, measured",
     "measured": {...}}

Fields: ``latency`` (seconds), ``bandwidth`` (bytes/s) and ``flops`` (FLOP/s) are required numbers;
``memory`` (bytes, or null for unlimited), ``memory_bandwidth`` (bytes/s an op reads and writes, or null),
``op_latency`` (seconds per op), ``roofline`` ("max" or "sum"), ``packing`` (true: products pack their
operands, see ``CostModel.packing``), ``spread`` ({"sizes": [...], "extra": [[...], ...], "seed": 0}:
measured message times around the line, see ``simulator.cost.spread``), ``name`` (text), ``regimes`` (a list
of {"min_bytes": 262144, "latency": 1.2e-4, "bandwidth": 1.5e9}, one per message-size regime) and
``topology`` are optional: "fully-connected" (the default), "ring", or {"two-level": {"node_size": 8,
"inter_latency": 5e-6, "inter_bandwidth": 2.5e10}}. ``measured`` keeps the raw samples and the fit's
residuals for reference and is not read back. Anything else is refused, and so are numbers written as
text or as true/false, each with the field's name, so a typo or a hand-edit fails on loading rather than
later in a simulation.

This module needs no torch: a simulation can load a file calibrated on another machine.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..core.files import write_text
from ..cost.model import ROOFLINES, CostModel, FullyConnected, LinkRegime, Ring, TwoLevel
from ..cost.spread import MessageSpread

_NUMBERS = ("latency", "bandwidth", "flops", "memory")
_REQUIRED = ("latency", "bandwidth", "flops")
_OPTIONAL = ("memory_bandwidth", "op_latency")  # written only when set, so older files stay as they were
_FIELDS = (*_NUMBERS, *_OPTIONAL, "roofline", "packing", "spread", "regimes", "name", "topology", "measured")
_REGIME = ("min_bytes", "latency", "bandwidth")
_TOPOLOGIES = {"fully-connected": FullyConnected, "ring": Ring}
_TWO_LEVEL = ("node_size", "inter_latency", "inter_bandwidth")
MAX_FILE_BYTES = 64 * 2**20  # measured samples included, a cost model file takes a few MB at most


def save_cost(path: str | Path, cost: CostModel, measured: dict[str, Any] | None = None, name: str = "") -> Path:
    """Write ``cost``'s numbers, topology (and any measurements) as JSON, whole or not at all; returns the path."""
    data: dict[str, Any] = {k: getattr(cost, k) for k in _NUMBERS}
    data |= {k: getattr(cost, k) for k in _OPTIONAL if getattr(cost, k)}
    if cost.roofline != "max":
        data["roofline"] = cost.roofline
    if cost.packing:
        data["packing"] = True
    if cost.spread is not None:
        sp = cost.spread
        data["spread"] = {"sizes": list(sp.sizes), "extra": [list(row) for row in sp.extra], "seed": sp.seed}
    if cost.regimes:
        data["regimes"] = [{k: getattr(r, k) for k in _REGIME} for r in cost.regimes]
    topology = _topology_to_json(cost.topology)
    if topology is not None:
        data["topology"] = topology
    if name or cost.name:
        data["name"] = name or cost.name
    if measured:
        data["measured"] = measured
    return write_text(path, json.dumps(data, indent=2) + "\n")


def load_cost(path: str | Path) -> CostModel:
    """The ``CostModel`` a file written by ``save_cost`` (or by hand) describes; a ValueError names any bad field."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)  # bounded: a path such as /dev/zero never ends
        if len(raw) > MAX_FILE_BYTES:
            raise ValueError(f"it is larger than {MAX_FILE_BYTES // 2**20} MiB; a cost model file is a few kB")
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise ValueError(f"cannot read a cost model from {path}: its JSON is nested too deeply") from None
    except (OSError, ValueError) as exc:  # (UnicodeDecodeError and JSONDecodeError are ValueErrors)
        raise ValueError(f"cannot read a cost model from {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"cost model file {path} holds a JSON {type(data).__name__}; it must be an object {{...}}")
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ValueError(f"cost model file {path}: unknown field(s) {', '.join(map(repr, unknown))}; known: {_FIELDS}")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise ValueError(f"cost model file {path} lacks {', '.join(missing)}; write it with save_cost or calibrate")
    kwargs: dict[str, Any] = {k: _number(path, k, data[k]) for k in _REQUIRED}
    for key in ("memory", "memory_bandwidth"):
        if data.get(key) is not None:
            kwargs[key] = _number(path, key, data[key])
    if "op_latency" in data:
        kwargs["op_latency"] = _number(path, "op_latency", data["op_latency"])
    if "roofline" in data:
        if data["roofline"] not in ROOFLINES:
            raise ValueError(f'cost model file {path}: "roofline" must be one of {ROOFLINES}, got {data["roofline"]!r}')
        kwargs["roofline"] = data["roofline"]
    if "packing" in data:
        if not isinstance(data["packing"], bool):
            raise ValueError(
                f'cost model file {path}: "packing" must be true or false, got {json.dumps(data["packing"])}'
            )
        kwargs["packing"] = data["packing"]
    if "spread" in data:
        kwargs["spread"] = _spread_from_json(path, data["spread"])
    if "regimes" in data:
        kwargs["regimes"] = _regimes_from_json(path, data["regimes"])
    if "name" in data:
        if not isinstance(data["name"], str):
            raise ValueError(f'cost model file {path}: "name" must be text, got {data["name"]!r}')
        kwargs["name"] = data["name"]
    if "topology" in data:
        kwargs["topology"] = _topology_from_json(path, data["topology"])
    try:
        return CostModel(**kwargs)
    except ValueError as exc:
        raise ValueError(f"cost model file {path}: {exc}") from exc


def _number(path: str | Path, key: str, value: Any) -> float:
    """A JSON number (not text, not true/false, not NaN), or a ValueError naming the field and the fix.

    Ranges (a latency >= 0, a bandwidth > 0, ...) are ``CostModel``'s to check.
    """
    # bool is an int in Python: without this, true would load as 1 second
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # a whole number past the largest float, e.g. 10**400
            digits = len(str(value))
            raise ValueError(
                f'cost model file {path}: "{key}" is a whole number of {digits} digits, beyond the largest a float '
                "holds (about 1.8e308); write it as a float in seconds, bytes/s or FLOP/s, e.g. 1e-05"
            ) from None
    if number is None or math.isnan(number):
        raise ValueError(
            f'cost model file {path}: "{key}" must be a number, got {json.dumps(value)[:80]}; '
            f'write it without quotes, e.g. "{key}": 1e-05'
        )
    return value


def _regimes_from_json(path: str | Path, value: Any) -> tuple[LinkRegime, ...]:
    example = '[{"min_bytes": 262144, "latency": 1.2e-04, "bandwidth": 1.5e9}]'
    if not isinstance(value, list) or any(not isinstance(r, dict) or sorted(r) != sorted(_REGIME) for r in value):
        raise ValueError(f'cost model file {path}: "regimes" must be a list like {example}, got {json.dumps(value)}')
    out = []
    for r in value:
        size = r["min_bytes"]
        if isinstance(size, bool) or not isinstance(size, int):
            raise ValueError(f'cost model file {path}: "min_bytes" must be a whole number, got {json.dumps(size)}')
        try:
            out.append(
                LinkRegime(size, _number(path, "latency", r["latency"]), _number(path, "bandwidth", r["bandwidth"]))
            )
        except ValueError as exc:
            raise ValueError(f"cost model file {path}: {exc}") from exc
    return tuple(out)


def _topology_to_json(topology: Any) -> Any:
    if isinstance(topology, FullyConnected):
        return None  # the default: files stay as they were before topologies could be saved
    if isinstance(topology, Ring):
        return "ring"
    if isinstance(topology, TwoLevel):
        return {"two-level": {k: getattr(topology, k) for k in _TWO_LEVEL}}
    raise ValueError(f"save_cost: cannot write the topology {topology!r}; choose FullyConnected, Ring or TwoLevel")


def _topology_from_json(path: str | Path, value: Any) -> Any:
    if isinstance(value, str) and value in _TOPOLOGIES:
        return _TOPOLOGIES[value]()
    if isinstance(value, dict) and list(value) == ["two-level"] and isinstance(value["two-level"], dict):
        fields = value["two-level"]
        if sorted(fields) != sorted(_TWO_LEVEL):
            raise ValueError(f'cost model file {path}: "two-level" needs exactly the fields {", ".join(_TWO_LEVEL)}')
        node_size = fields["node_size"]
        if isinstance(node_size, bool) or not isinstance(node_size, int):
            raise ValueError(f'cost model file {path}: "node_size" must be a whole number, got {json.dumps(node_size)}')
        try:
            return TwoLevel(node_size, *(_number(path, k, fields[k]) for k in _TWO_LEVEL[1:]))
        except ValueError as exc:
            raise ValueError(f"cost model file {path}: {exc}") from exc
    raise ValueError(
        f'cost model file {path}: "topology" {json.dumps(value)} is not one I know; write "fully-connected", '
        f'"ring", or {{"two-level": {{"node_size": 8, "inter_latency": 5e-06, "inter_bandwidth": 2.5e10}}}}'
    )


def _spread_from_json(path: str | Path, value: Any) -> MessageSpread:
    shape = '{"sizes": [1024, ...], "extra": [[seconds, ...], ...], "seed": 0}'
    if not isinstance(value, dict) or set(value) - {"sizes", "extra", "seed"} or not {"sizes", "extra"} <= set(value):
        raise ValueError(f'cost model file {path}: "spread" must be an object like {shape}, got {value!r:.200}')
    numbers = [value["sizes"], *(value["extra"] if isinstance(value["extra"], list) else [None])]
    if not all(isinstance(row, list) and all(_is_number(v) for v in row) for row in numbers):
        raise ValueError(f'cost model file {path}: "spread" holds lists of numbers, like {shape}')
    seed = value.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f'cost model file {path}: "spread" "seed" must be a whole number, got {seed!r}')
    try:
        return MessageSpread(tuple(value["sizes"]), tuple(tuple(row) for row in value["extra"]), seed)
    except ValueError as exc:
        raise ValueError(f'cost model file {path}: "spread": {exc}') from exc


def _is_number(v: Any) -> bool:
    return isinstance(v, float) or (isinstance(v, int) and not isinstance(v, bool) and abs(v) < 2**1000)
