"""What the message-rate benchmarks share: side-by-side rounds, CPU time, medians with their spread, the load.

A busy machine slows every side of a comparison, so the sides run in turns, round after round, and each
figure is the median of the rounds' own ratios, printed with its spread (min to max) and the machine's
load average (``os.getloadavg``, 1 minute) before and after. Times are CPU seconds of this process (or of
a side's own process): other work on the machine then costs a side only what it takes from its caches,
not the time it waits for a core.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any


def cpu() -> float:
    """CPU seconds this process has used (user and system)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def cpu_timed(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """``fn(*args)`` and the CPU seconds it took."""
    t0 = time.process_time()
    out = fn(*args)
    return out, time.process_time() - t0


def load() -> float:
    """The machine's load average over the last minute."""
    return os.getloadavg()[0]


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """``median (min to max)`` of a figure's rounds."""
    med = statistics.median(values)
    return f"{fmt.format(med)} ({fmt.format(min(values))} to {fmt.format(max(values))})"


def loads(before: list[float], after: list[float]) -> str:
    """The load averages of the rounds, e.g. ``load 1.9 to 2.4``."""
    seen = before + after
    return f"load {min(seen):.1f} to {max(seen):.1f} (1-minute average, {os.cpu_count()} cores)"
