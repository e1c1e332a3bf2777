"""What torch keeps once per process that a program may change, kept per simulated rank as processes keep it.

Real ranks are processes, each with its own. Simulated ranks are threads of one process that run one at a time
(``ranks``): so this state is taken when a rank hands its turn over and put back when its turn comes again
(``TorchState``). Without it a context manager entered on one rank and left on another leaks: rank 0 enters
``sdpa_kernel(MATH)``, rank 1 enters it too and saves MATH as "before", rank 0 leaves, rank 1 restores MATH.

The state: the default dtype (``set_default_dtype``), autograd's anomaly mode (``detect_anomaly()``), and which
backends ``scaled_dot_product_attention`` may use, in which order (``sdpa_kernel()``). What torch keeps per thread
(grad mode, dispatch modes, ``implicit_replication``, the default device) needs nothing. The random generator is
swapped by ``ranks`` (each rank starts from torch's default seed, not the caller's); DTensor's custom op handlers
(``loss_parallel()``) are kept per rank by ``c10d``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


def _sdp_backends() -> list[str]:
    try:
        from torch.nn.attention import _backend_names  # torch 2.3 and later: {"cudnn": "CUDNN_ATTENTION", ...}
    except ImportError:
        return []
    return [name for name in _backend_names if hasattr(torch._C, f"_get_{name}_sdp_enabled")]


def _anomaly() -> tuple[bool, bool]:
    return torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()


def _set_anomaly(value: tuple[bool, bool]) -> None:
    torch.set_anomaly_enabled(*value)


_ITEMS: list[tuple[Callable[[], Any], Callable[[Any], None]]] = [
    (torch.get_default_dtype, torch.set_default_dtype),
    (_anomaly, _set_anomaly),
    *[(getattr(torch._C, f"_get_{n}_sdp_enabled"), getattr(torch._C, f"_set_sdp_use_{n}")) for n in _sdp_backends()],
]
if hasattr(torch._C, "_get_sdp_priority_order"):
    _ITEMS.append((torch._C._get_sdp_priority_order, torch._C._set_sdp_priority_order))


@dataclass(frozen=True)
class TorchState:
    """The values of torch's per-process state at one moment (``now``), to put back later (``restore``)."""

    values: tuple

    @classmethod
    def now(cls) -> TorchState:
        return cls(tuple(get() for get, _ in _ITEMS))

    def restore(self) -> None:
        for (get, put), value in zip(_ITEMS, self.values):
            if get() != value:
                put(value)
