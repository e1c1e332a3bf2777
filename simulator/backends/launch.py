"""Launching rank programs on real local processes: ``TorchWorld`` (several runs) and ``launch`` (one).

    with TorchWorld(2, backend="gloo", timeout=10) as world:
        result = world.run(program, x)          # like World(2).run(program, x) in the simulator
        result.outputs, result.trace            # the same kind of Trace, with measured times

How the processes find each other without a port race: the launcher opens a TCPStore on port 0 (the
operating system picks a free port, and the launcher keeps it open), then starts N processes with
the ``spawn`` method; each connects to that store on 127.0.0.1 and joins the group with a short
timeout. Gloo's own connections stay on the loopback interface. The processes stay up between runs,
so the start-up cost (seconds: every process imports torch) is paid once per world.

Failures: when a rank raises, the launcher stops every rank and raises ``RemoteRankError`` naming the
rank, with its traceback. A rank stuck in a communication for longer than ``timeout`` becomes a
``RankTimeoutError`` (a hang is never silent). A rank process that dies is reported with its exit
code. In every case, all rank processes are ended (asked first, then terminated, then killed) and
joined before the error is raised, so no child process is left behind.

Rank programs (and their arguments) must be picklable: module-level functions of an importable
module, not functions defined in a notebook cell or a test's closure.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import wait as wait_any
from typing import Any

import torch.distributed as dist

from ..engine import World
from ..errors import SimulationError, UnreceivedMessagesError, UnreceivedMessagesWarning
from ..trace import Trace
from .errors import RankTimeoutError, RemoteRankError
from .recording import merge
from .torch import SEND_MODES
from .worker import PROGRAM_ERROR, ErrorReport, WorkerConfig, main

BACKENDS = ("gloo", "nccl")
COLLECTIVE_MODES = ("native", "messages")
LEFTOVER_POLICIES = ("warn", "error", "ignore")


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
    run_timeout:   optional limit on a whole run (None: only each communication is limited)

    A failed run (or one that leaves messages in flight) stops the processes; the next run starts
    fresh ones. The processes are daemonic: they also end if the launching process exits.
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
        run_timeout: float | None = None,
    ) -> None:
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"TorchWorld(size={size!r}): size must be a positive number of ranks")
        _choose("backend", backend, BACKENDS)
        _choose("send_mode", send_mode, SEND_MODES)
        _choose("leftovers", leftovers, LEFTOVER_POLICIES)
        _choose("collectives", collectives, COLLECTIVE_MODES)
        if not timeout > 0:
            raise ValueError(f"TorchWorld(timeout={timeout!r}): give a positive number of seconds")
        self.size = size
        self.backend = backend
        self.timeout = float(timeout)
        self.leftovers = leftovers
        self.start_timeout = start_timeout
        self.run_timeout = run_timeout
        self.device_options = {
            "send_mode": send_mode,
            "strict": strict,
            "keep_payloads": keep_payloads,
            "headers": headers,
            "ordered_headers": backend == "nccl",  # NCCL matches by order per pair, not by tag
            "collectives": collectives,
        }
        self.cost = None  # a real run has no cost model: figures draw each message over its measured flight
        self._procs: list[Any] = []
        self._conns: list[Any] = []
        self._store: Any = None
        self.hosts: list[str] = []

    def __repr__(self) -> str:
        state = "running" if self._procs else "stopped"
        return f"<TorchWorld {self.size} x {self.backend} {state}>"

    def __enter__(self) -> TorchWorld:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def pids(self) -> list[int]:
        """The process ids of the running ranks (empty when stopped)."""
        return [p.pid for p in self._procs]

    # ---- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the rank processes and wait until all have joined the group (idempotent)."""
        if self._procs:
            return
        self._check_backend()
        self._store = dist.TCPStore(
            "127.0.0.1", 0, None, True, timeout=timedelta(seconds=self.start_timeout), wait_for_workers=False
        )
        config = WorkerConfig(self.size, self.backend, "127.0.0.1", self._store.port, self.timeout)
        ctx = mp.get_context("spawn")
        try:
            for rank in range(self.size):
                parent, child = ctx.Pipe()
                proc = ctx.Process(target=main, args=(rank, config, child), name=f"simulator-rank-{rank}", daemon=True)
                proc.start()
                child.close()
                self._procs.append(proc)
                self._conns.append(parent)
            replies = self._collect(("ready",), self.start_timeout, "start and join the process group")
        except BaseException:
            self.close()
            raise
        self.hosts = [reply[1] for reply in replies]

    def close(self) -> None:
        """End every rank process: ask, then terminate, then kill; always join them all."""
        for conn in self._conns:
            with contextlib.suppress(OSError, ValueError):  # already closed by its process
                conn.send(("close",))
        deadline = time.monotonic() + 2.0
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for stop in ("terminate", "kill"):
            alive = [p for p in self._procs if p.is_alive()]
            for proc in alive:
                getattr(proc, stop)()
            for proc in alive:
                proc.join(2.0)
        for conn in self._conns:
            conn.close()
        self._procs, self._conns, self._store = [], [], None

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
        self.start()
        for conn in self._conns:
            conn.send(("run", program, args, kwargs, options))
        replies = self._collect(("done",), self.run_timeout, f"finish {getattr(program, '__name__', program)}")
        trace = merge(self.size, [reply[2] for reply in replies], [reply[1] for reply in replies])
        open_receives = {rank: reply[3] for rank, reply in enumerate(replies) if reply[3]}
        left = trace.unreceived()
        if left or open_receives:
            # A message still in flight, or a posted receive never waited on, would be matched by the
            # next run's traffic: start the next run on fresh processes.
            self.close()
        _report_leftovers(leftovers, left, open_receives)
        return TorchRunResult([reply[1] for reply in replies], trace, self)

    def _collect(self, expected: tuple[str, ...], timeout: float | None, what: str) -> list[tuple]:
        """One reply from every rank; on an error, a death or the deadline: close and raise."""
        replies: dict[int, tuple] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        by_conn = {conn: rank for rank, conn in enumerate(self._conns)}
        by_sentinel = {proc.sentinel: rank for rank, proc in enumerate(self._procs)}
        while len(replies) < self.size:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = wait_any([c for r, c in enumerate(self._conns) if r not in replies] + list(by_sentinel), left)
            if not ready:
                missing = [r for r in range(self.size) if r not in replies]
                self.close()
                raise RankTimeoutError(
                    missing[0],
                    "TimeoutError",
                    f"device(s) {', '.join(map(str, missing))} did not {what} within {timeout:g} s",
                    "",
                    _progress(replies, self.size),
                )
            for obj in ready:
                if obj in by_conn:
                    rank = by_conn[obj]
                    try:
                        reply = obj.recv()
                    except EOFError:  # its process is gone; the sentinel says how
                        continue
                    if reply[0] == "error":
                        self._fail(reply[1], replies)
                    if reply[0] in expected:
                        replies[rank] = reply
                else:
                    rank = by_sentinel[obj]
                    proc = self._procs[rank]
                    proc.join(0.5)
                    if rank not in replies or proc.exitcode:
                        self._fail_dead(rank, proc.exitcode, replies)
                    del by_sentinel[obj]
        return [replies[r] for r in range(self.size)]

    def _fail(self, first: ErrorReport, replies: dict[int, tuple]) -> None:
        """Gather the reports that arrive at about the same time, pick the root cause, stop all, raise.

        A process that died without a word counts as a report too: the peers' "connection reset"
        errors that follow it are echoes, and rank below it (see ``worker.PRIORITY``).
        """
        reports = [first]
        deadline = time.monotonic() + 0.2
        for conn in self._conns:
            while conn.poll(max(0.0, deadline - time.monotonic())):
                try:
                    reply = conn.recv()
                except EOFError:
                    break
                if reply[0] == "error":
                    reports.append(reply[1])
        reported = {r.rank for r in reports}
        for rank, proc in enumerate(self._procs):
            if rank not in reported and not proc.is_alive() and proc.exitcode:
                reports.append(_died(rank, proc.exitcode))
        self.close()
        root = max(reports, key=lambda r: (r.priority, -r.t))
        others = sorted({r.rank for r in reports} - {root.rank})
        note = _progress(replies, self.size)
        if others:
            note += f"; device(s) {', '.join(map(str, others))} failed after it"
        cls = RankTimeoutError if root.timeout else RemoteRankError
        raise cls(root.rank, root.exc_type, root.message, root.traceback, note) from root.exception()

    def _fail_dead(self, rank: int, exitcode: int | None, replies: dict[int, tuple]) -> None:
        self._fail(_died(rank, exitcode), replies)

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


def _progress(replies: dict[int, tuple], size: int) -> str:
    done = sorted(replies)
    if not done:
        return "no device had finished"
    return f"device(s) {', '.join(map(str, done))} had finished; {size - len(done)} had not"


def _died(rank: int, exitcode: int | None) -> ErrorReport:
    """The report of a rank process that exited without reporting (a crash, a kill, os._exit)."""
    text = f"the process of device {rank} exited with code {exitcode} without reporting a result"
    return ErrorReport(rank, "ProcessDied", text, "", PROGRAM_ERROR, False, time.time(), None)


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
