"""Pictures of runs: timeline diagrams, memory plots, animations (matplotlib), and Chrome-trace export.

matplotlib is imported only inside this package, and only by the modules that draw
(``timeline``, ``memory``, ``animation``, ``sharding``, ``schedule_chart``, ``style``); ``chrome_trace`` writes
JSON and needs none. ``schedule_chart`` draws pipeline schedules from their timing, one labelled panel each.
The names below load their module on first use, so ``import simulator.views.plot`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "plot_timeline": "timeline",
    "plot_timelines": "timeline",
    "save_timeline": "timeline",
    "plot_memory": "memory",
    "save_memory": "memory",
    "shared_scales": "memory",
    "animate_messages": "animation",
    "plot_schedules": "schedule_chart",
    "chrome_trace": "chrome_trace",
    "write_chrome_trace": "chrome_trace",
    "save_figure": "style",
    "FigureStyle": "style",
    "plot_simulated_vs_measured": "measured",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'simulator.views.plot' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
