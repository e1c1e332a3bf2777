"""BLAS threads while devices run: one by default (``World(blas_threads=...)``).

Simulated devices take turns in one process, so a device's matrix product never runs beside another's:
BLAS threads add nothing to a simulation but contention, and on a busy machine they fight the other
processes for every core. OpenBLAS's threads spin while they wait for work, so a run of many small
products can be several times slower: a 16-device 3-D step (``benchmarks/scale_3d_step.py --quick``) took
47.3 s with OpenBLAS's default threads and 3.6 s with one, on a loaded 2-core machine. So while a run's
devices run, BLAS gets ``blas_threads`` threads (threadpoolctl), and its own setting is back as soon as the
run returns or pauses between steps; ``World(blas_threads=None)`` leaves BLAS alone.

The thread pools are found when this module is imported (about 5 ms: threadpoolctl's import and its look at
the loaded libraries), as a library finds its environment once per process, so that no run, the first one
included, pays for it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import numpy  # noqa: F401  (its BLAS must be loaded before the pools are looked for)
from threadpoolctl import ThreadpoolController


class BlasThreads:
    """The BLAS thread limit of one run; ``applied()`` holds it while the devices run."""

    __slots__ = ("limit",)

    def __init__(self, limit: int | None) -> None:
        self.limit = limit

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        if self.limit is None:
            yield
            return
        with _controller().limit(limits=self.limit, user_api="blas"):  # (about 8 us to set and restore)
            yield


@functools.cache
def _controller() -> Any:
    """The thread pools of the libraries loaded (NumPy's BLAS is: it is imported above), found once: a program
    of many small runs would otherwise pay about a millisecond on each. The limits themselves are set and
    restored by each run."""
    return ThreadpoolController()


_controller()
