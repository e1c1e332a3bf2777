"""BLAS threads while devices run: one by default (``World(blas_threads=...)``).

Simulated devices take turns in one process, so a device's matrix product never runs beside another's:
BLAS threads add nothing to a simulation but contention, and on a busy machine they fight the other
processes for every core. OpenBLAS's threads spin while they wait for work, so a run of many small
products can be several times slower: a 16-device 3-D step (``benchmarks/scale_3d_step.py --quick``) took
47.3 s with OpenBLAS's default threads and 3.6 s with one, on a loaded 2-core machine. So while a run's
devices run, BLAS gets ``blas_threads`` threads (threadpoolctl), and its own setting is back as soon as the
run returns or pauses between steps; ``World(blas_threads=None)`` leaves BLAS alone.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any


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
    """The thread pools of the libraries loaded (NumPy's BLAS is, before any run), found once: finding them
    takes about a millisecond, which a program of many small runs would pay on each. The limits themselves are
    set and restored by each run."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()
