"""One rank process as the launcher holds it, and how a set of them is started and stopped.

Each rank process is started with the ``spawn`` method and three pipes:

    conn      commands and replies (see ``worker``)
    lifeline  the launcher keeps the write end and never writes: the rank exits when it closes (``lifeline``)
    stderr    the rank's descriptor 2, read by a ``StderrTail`` in the launcher

The launcher's copies of the rank's ends are closed right after the start, so each pipe has exactly
one holder at each end: a pipe ends exactly when its holder goes.

Like torchrun, ranks start with one thread for OpenMP and BLAS (``OMP_NUM_THREADS=1`` unless the
caller's environment says otherwise): several ranks share the machine's cores, and a NumPy matrix
product that also spreads over every core makes the ranks' threads fight for them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .stderr_tail import StderrTail
from .worker import WorkerConfig, main

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_ENVIRONMENT = threading.Lock()  # one spawn at a time changes the environment the child inherits


@dataclass
class RankProcess:
    rank: int
    proc: Any  # multiprocessing.Process
    conn: Any  # the launcher's end of the command pipe
    lifeline: Any  # the write end of the lifeline pipe
    stderr: StderrTail

    def describe_exit(self) -> str:
        """How the process ended, for an error message ("exited with code -6 (killed by SIGABRT)")."""
        code = self.proc.exitcode
        text = f"exited with code {code}"
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                text += f" (killed by {signal.Signals(-code).name})"
        return text


def spawn_rank(ctx: Any, rank: int, config: WorkerConfig) -> RankProcess:
    """Start the process of ``rank`` (it then joins the group on its own and says "ready")."""
    conn, child_conn = ctx.Pipe()
    life_read, life_write = ctx.Pipe(duplex=False)
    err_read, err_write = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=main, args=(rank, config, child_conn, life_read, err_write), name=f"simulator-rank-{rank}", daemon=True
    )
    try:
        with _one_thread_each():
            proc.start()
    except BaseException:
        for end in (conn, life_write, err_read):
            end.close()
        raise
    finally:
        for end in (child_conn, life_read, err_write):
            end.close()
    return RankProcess(rank, proc, conn, life_write, StderrTail(rank, err_read))


@contextlib.contextmanager
def _one_thread_each() -> Iterator[None]:
    """The spawned child inherits the environment at its start: set the thread counts for it, then restore."""
    with _ENVIRONMENT:
        unset = [k for k in THREAD_VARIABLES if k not in os.environ]
        if "OMP_NUM_THREADS" in os.environ:  # the caller chose: leave every count as it is
            unset = []
        for k in unset:
            os.environ[k] = "1"
        try:
            yield
        finally:
            for k in unset:
                os.environ.pop(k, None)


def stop_ranks(ranks: list[RankProcess], ask: bool = True) -> None:
    """End every rank process and join it: ask (if ``ask``), then terminate, then kill.

    Bounded: about 2 s per step at most. Whatever happens meanwhile (a second Ctrl-C included), the
    lifelines are closed at the end, so a rank still alive then exits on its own.
    """
    try:
        if ask:
            for r in ranks:
                with contextlib.suppress(OSError, ValueError):  # already closed by its process
                    r.conn.send(("close",))
            deadline = time.monotonic() + 2.0
            for r in ranks:
                r.proc.join(max(0.0, deadline - time.monotonic()))
        for stop in ("terminate", "kill"):
            alive = [r.proc for r in ranks if r.proc.is_alive()]
            for proc in alive:
                getattr(proc, stop)()
            for proc in alive:
                proc.join(2.0)
    finally:
        for r in ranks:
            r.conn.close()
            r.lifeline.close()
        for r in ranks:
            r.stderr.close()
