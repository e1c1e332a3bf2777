"""Launching rank programs on real local processes: ``TorchWorld`` (several runs) and ``launch`` (one).

    with TorchWorld(2, backend="gloo", timeout=10) as world:
        result = world.run(program, x)          # like World(2).run(program, x) in the simulator
        result.outputs, result.trace            # the same kind of Trace, with measured times

How the processes find each other, with nobody else listening in: the launcher makes a private store
(``loopback.PrivateStore``: a file named by a random secret in a folder only this user may enter; no
socket), then starts N processes with the ``spawn`` method; each opens that store and joins the group
with a short timeout. Gloo's own connections stay on the loopback interface. Nothing the ranks exchange
with each other is unpickled. The processes stay up between runs, so the start-up cost
(seconds: every process imports torch) is paid once per world.

Every wait is bounded: each communication by ``timeout``, the start by ``start_timeout``, a whole run
by ``run_timeout`` (300 s by default), stopping the ranks by a few seconds.

Failures: when a rank raises, the launcher stops every rank and raises ``RemoteRankError`` naming the
rank, with its traceback. A rank stuck in a communication for longer than ``timeout`` becomes a
``RankTimeoutError`` (a hang is never silent); so does a run past ``run_timeout``, naming the ranks
still running. A rank process that dies is reported with its exit code and the last lines it wrote to
stderr (where gloo explains its aborts). In every case, all rank processes are ended (asked first,
then terminated, then killed) and joined before the error is raised, so no child process is left
behind. Any other exception during a run, Ctrl-C included, stops the ranks too; runs are numbered and
a reply counts only for its own run, so no run ever returns another's results. If the launching
process itself dies, its ranks notice and exit (``lifeline``).

Rank programs (and their arguments) must be picklable: module-level functions of an importable
module, not functions defined in a notebook cell or a test's closure.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing as mp
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch.distributed as dist

from ..core.errors import SimulationError, UnreceivedMessagesError, UnreceivedMessagesWarning
from ..core.trace import Trace
from ..core.world import World
from .device import SEND_MODES
from .errors import WorldBusyError
from .loopback import PrivateStore
from .rankproc import RankProcess, spawn_rank, stop_ranks
from .recording import merge
from .replies import Awaited, collect
from .worker import WorkerConfig

BACKENDS = ("gloo", "nccl")
COLLECTIVE_MODES = ("native", "messages")
LEFTOVER_POLICIES = ("warn", "error", "ignore")
RUN_TIMEOUT = 300.0  # seconds; generous for a teaching program, and a hang still ends


@dataclass
class TorchRunResult:
    """What a real run returns: each rank's return value and the merged trace (measured seconds)."""

    outputs: list[Any]
    trace: Trace
    world: TorchWorld

    @property
    def time(self) -> float:
        """Measured seconds from the common start to the last recorded event."""
        return self.trace.end_time


class TorchWorld:
    """N local rank processes over torch.distributed, ready to run rank programs.

    size:          number of ranks (processes)
    backend:       "gloo" (CPU) or "nccl" (one GPU per rank)
    timeout:       seconds any single communication may take before it is a hang (and the group's
                   timeout); keep it short, a few seconds to a minute
    send_mode, strict, keep_payloads, leftovers: as for ``simulator.World``
    headers:       send a shape/dtype header before each payload (see ``wire``); off, every recv
                   must declare shape and dtype
    collectives:   "native" (torch.distributed's collectives) or "messages" (the simulator's
                   algorithms message by message)
    start_timeout: seconds the processes may take to start and join the group
    run_timeout:   seconds a whole run may take (default 300); past it the run stops with an error
                   naming the ranks still running. It catches what ``timeout`` cannot: a rank stuck
                   outside any communication. None removes the limit.

    A failed run (or one that leaves messages in flight) stops the processes; the next run starts
    fresh ones. So does any exception while the ranks run, Ctrl-C (KeyboardInterrupt) included: the
    ranks may be anywhere in the program, so the world is closed, and the next run starts anew.
    A world runs one program at a time: a second thread that calls ``run`` meanwhile gets
    ``WorldBusyError``. The processes end with the launching process, however it ends (see ``lifeline``).
    """

    def __init__(
        self,
        size: int,
        backend: str = "gloo",
        *,
        timeout: float = 30.0,
        send_mode: str = "eager",
        strict: bool = False,
        keep_payloads: bool = True,
        leftovers: str = "warn",
        headers: bool = True,
        collectives: str = "native",
        start_timeout: float = 120.0,
        run_timeout: float | None = RUN_TIMEOUT,
    ) -> None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"TorchWorld(size={size!r}): size must be a positive number of ranks")
        _choose("backend", backend, BACKENDS)
        _choose("send_mode", send_mode, SEND_MODES)
        _choose("leftovers", leftovers, LEFTOVER_POLICIES)
        _choose("collectives", collectives, COLLECTIVE_MODES)
        for name, value in (("timeout", timeout), ("start_timeout", start_timeout), ("run_timeout", run_timeout)):
            if not (value is None and name == "run_timeout") and not _positive_seconds(value):
                raise ValueError(f"TorchWorld({name}={value!r}): give a positive number of seconds")
        self.size = size
        self.backend = backend
        self.timeout = float(timeout)
        self.leftovers = leftovers
        self.start_timeout = float(start_timeout)
        self.run_timeout = None if run_timeout is None else float(run_timeout)
        self.device_options = {
            "send_mode": send_mode,
            "strict": strict,
            "keep_payloads": keep_payloads,
            "headers": headers,
            "ordered_headers": backend == "nccl",  # NCCL matches by order per pair, not by tag
            "collectives": collectives,
        }
        self.cost = None  # a real run has no cost model: figures draw each message over its measured flight
        self._ranks: list[RankProcess] = []
        self._store: Any = None
        self._runs = itertools.count(1)  # run numbers; 0 is the start
        self._lock = threading.Lock()  # one call at a time (see ``_exclusive``)
        self._busy = ""
        self.hosts: list[str] = []

    def __repr__(self) -> str:
        state = "running" if self._ranks else "stopped"
        return f"<TorchWorld {self.size} x {self.backend} {state}>"

    def __enter__(self) -> TorchWorld:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """The process ids of the running ranks (empty when stopped)."""
        return [r.proc.pid for r in self._ranks]

    # ---- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the rank processes and wait until all have joined the group (idempotent)."""
        with self._exclusive("start"):
            self._start()

    def close(self) -> None:
        """End every rank process: ask, then terminate, then kill; always join them all."""
        with self._exclusive("close"):
            self._stop()

    def _start(self) -> None:
        if self._ranks:
            return
        self._check_backend()
        self._store = PrivateStore()
        config = WorkerConfig(
            self.size,
            self.backend,
            self._store.path,
            self.timeout,
            launcher_pid=os.getpid(),
            death_signal=threading.current_thread() is threading.main_thread(),
        )
        ctx = mp.get_context("spawn")
        try:
            for rank in range(self.size):
                self._ranks.append(spawn_rank(ctx, rank, config))
            replies = self._collect("ready", 0, self.start_timeout, "start and join the process group", "start_timeout")
        except BaseException:
            self._stop(ask=False)
            raise
        self.hosts = [reply[2] for reply in replies]

    def _stop(self, ask: bool = True) -> None:
        # forget the ranks first: if this is interrupted, the world is stopped all the same (and the
        # ranks it did not reach end with their lifelines, closed in stop_ranks' finally)
        ranks, store = self._ranks, self._store
        self._ranks, self._store = [], None
        try:
            stop_ranks(ranks, ask)
        finally:
            if store is not None:  # the store's folder goes once no rank can still be using it
                store.close()

    @contextlib.contextmanager
    def _exclusive(self, what: str) -> Iterator[None]:
        """One call at a time: two threads running on one world would take each other's replies."""
        if not self._lock.acquire(blocking=False):
            raise WorldBusyError(
                f"TorchWorld.{what}: this world is busy ({self._busy}); a world runs one call at a time. "
                f"Wait for that call to return, or give each thread its own TorchWorld"
            )
        self._busy = f"thread {threading.current_thread().name!r} is in {what}"
        try:
            yield
        finally:
            self._busy = ""
            self._lock.release()

    # ---- running ------------------------------------------------------------------------------
    def run(self, program: Callable[..., Any], *args: Any, **kwargs: Any) -> TorchRunResult:
        """Run ``program(device, *args, **kwargs)`` on every rank; return outputs and the merged trace."""
        return self._run(program, args, kwargs, self.device_options, self.leftovers)

    def run_like(self, world: World, program: Callable[..., Any], *args: Any, **kwargs: Any) -> TorchRunResult:
        """Run under the rules of a simulator ``World`` (its send mode, strictness, payloads, leftovers).

        The way to run a simulated program unchanged on real processes: ``run_like(sim_world, program, x)``.
        """
        if world.size != self.size:
            raise ValueError(
                f"run_like: the simulator world has {world.size} devices, this TorchWorld {self.size} ranks"
            )
        options = dict(
            self.device_options, send_mode=world.send_mode, strict=world.strict, keep_payloads=world.keep_payloads
        )
        return self._run(program, args, kwargs, options, world.leftovers)

    def _run(self, program, args, kwargs, options: dict[str, Any], leftovers: str) -> TorchRunResult:
        with self._exclusive("run"):
            run = next(self._runs)
            command = _command(run, program, args, kwargs, options)  # before anything starts
            self._start()
            try:
                for r in self._ranks:
                    r.conn.send_bytes(command)
                replies = self._collect("done", run, self.run_timeout, f"finish {_name(program)}", "run_timeout")
            except BaseException:
                # Ctrl-C, or any failure while the ranks run: they may be anywhere in the program, and a
                # later run must never see this one's traffic or replies. Stop them; the next run starts anew.
                self._stop(ask=False)
                raise
            trace = merge(self.size, [reply[3] for reply in replies], [reply[2] for reply in replies])
            open_receives = {rank: reply[4] for rank, reply in enumerate(replies) if reply[4]}
            left = trace.unreceived()
            if left or open_receives:
                # A message still in flight, or a posted receive never waited on, would be matched by the
                # next run's traffic: start the next run on fresh processes.
                self._stop()
        _report_leftovers(leftovers, left, open_receives)
        return TorchRunResult([reply[2] for reply in replies], trace, self)

    def _collect(self, kind: str, run: int, timeout: float | None, what: str, limit: str) -> list[tuple]:
        awaited = Awaited(kind, run, timeout, what, limit, self.timeout)
        return collect(self._ranks, awaited, lambda: self._stop(ask=False))

    def _check_backend(self) -> None:
        if not dist.is_available():
            raise SimulationError("this torch build has no torch.distributed; install a build that has it")
        if self.backend == "nccl":
            import torch

            if not (dist.is_nccl_available() and torch.cuda.is_available()):
                raise SimulationError(
                    "backend='nccl' needs CUDA GPUs and a torch build with NCCL; use backend='gloo' on CPU"
                )
            if torch.cuda.device_count() < self.size:
                raise SimulationError(
                    f"backend='nccl' needs one GPU per rank: {self.size} ranks, {torch.cuda.device_count()} GPU(s)"
                )


def launch(
    program: Callable[..., Any],
    *args: Any,
    size: int,
    backend: str = "gloo",
    timeout: float = 30.0,
    **kwargs: Any,
) -> TorchRunResult:
    """Start ``size`` processes, run ``program(device, *args, **kwargs)`` once, stop them."""
    with TorchWorld(size, backend, timeout=timeout) as world:
        return world.run(program, *args, **kwargs)


def _choose(what: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"TorchWorld({what}={value!r}): choose one of {choices}")


def _positive_seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _name(program: Any) -> str:
    return getattr(program, "__qualname__", None) or getattr(program, "__name__", None) or repr(program)


def _command(run: int, program: Any, args: tuple, kwargs: dict, options: dict) -> bytes:
    """The run command, pickled once for every rank: a program that cannot travel fails here, before any
    rank has it (otherwise some ranks would run it and others not). The job travels pickled inside the
    command, so a rank that cannot unpickle it (e.g. a function of the launcher's ``__main__``) still
    knows which run to report the error for."""
    try:
        job = bytes(ForkingPickler.dumps((program, args, kwargs, options)))
        return bytes(ForkingPickler.dumps(("run", run, job)))
    except Exception as exc:
        raise TypeError(
            f"cannot send {_name(program)} and its arguments to the rank processes: {exc}. A rank program and its "
            f"arguments must pickle: define the program at module level in an importable module (not in a "
            f"notebook cell, inside a function, or as a lambda)"
        ) from exc


def _report_leftovers(policy: str, left: list, open_receives: dict[int, int]) -> None:
    if policy == "ignore" or not (left or open_receives):
        return
    lines = [f"  {m.describe()}" for m in left[:10]]
    if len(left) > 10:
        lines.append(f"  ... and {len(left) - 10} more")
    lines += [f"  device {r} posted {n} receive(s) it never waited on" for r, n in open_receives.items()]
    text = (
        f"{len(left)} message(s) were sent but never received:\n" + "\n".join(lines) + "\n"
        "  add the matching recv (and wait) on the destination, or drop the send"
    )
    if policy == "error":
        raise UnreceivedMessagesError(text)
    warnings.warn(text, UnreceivedMessagesWarning, stacklevel=4)
