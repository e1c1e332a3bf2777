"""The body of one rank process started by ``launch.TorchWorld``: join the group, then run jobs.

The process talks to its launcher over a pipe, in this protocol (launcher -> worker, then back):

    (joining)                                       ->  ("ready", 0, hostname)  or  ("error", 0, report)
    ("run", run, job)   ->  ("done", run, output, record, open_receives)  or  ("error", run, report)
                            (job: the pickled (program, args, kwargs, options), unpickled by the worker)

That pipe is the only thing a worker unpickles: it joins only its launcher. What ranks exchange with
each other (start-up checks, payloads) are arrays, never pickles.
    ("close",)                      ->  the process leaves its loop, destroys the group and exits

``run`` numbers the runs of a world; every reply carries the number of the run it answers, and the
launcher takes a reply only for the run it is waiting on (a reply can never be taken for another run's).

Besides that pipe, a rank has two more: its stderr goes to the launcher (``stderr_tail``: a rank that
gloo aborts leaves its last words there), and it watches a lifeline (``lifeline``: it exits as soon as
its launcher has gone). It ignores SIGINT: Ctrl-C in a terminal reaches every process of the
foreground group, and the launcher, not each rank, decides what it means (it stops the ranks).

Before each run the ranks agree on a common start (``common_epoch``); after a run a worker waits
for its eager sends still in flight only when the next command comes, so that a peer still receiving
never sees this process vanish. A worker that fails reports and then waits for the launcher's
command instead of exiting, so its peers' connections stay open until the launcher tears the world
down (a peer would otherwise report a confusing "connection reset" before the real error arrives).
"""

from __future__ import annotations

import hashlib
import os
import pickle
import signal
import socket
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..core.arguments import parts_for
from ..core.payloads import returned
from .device import RankResources, TorchDevice
from .errors import CommError, CommTimeoutError
from .heap import keep_freed_memory
from .lifeline import watch_launcher
from .loopback import loopback_interface
from .stderr_tail import redirect_stderr

# How much a failure report says about the root cause: a program's own error beats a timeout, and a
# timeout beats a failed transfer (usually the echo of a peer that failed first).
PRIORITY = {CommError: 0, CommTimeoutError: 1}
PROGRAM_ERROR = 2


@dataclass(frozen=True)
class WorkerConfig:
    """What every rank process needs to join the group and build its device."""

    world_size: int
    backend: str
    store_path: str  # the world's private store (``loopback.PrivateStore``): knowing it is the way in
    timeout: float
    launcher_pid: int = 0  # 0: do not check the parent (e.g. a process started some other way)
    death_signal: bool = False  # also ask the kernel for SIGKILL when the launcher dies (see ``lifeline``)


@dataclass
class ErrorReport:
    rank: int
    exc_type: str
    message: str
    traceback: str
    priority: int
    timeout: bool
    t: float  # time.time() of the failure, to order reports from different processes
    pickled: bytes | None  # the exception itself, when it pickles (to chain it as the cause)
    waiting: str = ""  # a failed communication's: the call the device was in (CommError.waiting) ...
    collective: bool = False  # ... and whether it is a collective

    def exception(self) -> BaseException | None:
        """The original exception, rebuilt in this process (None if it cannot be)."""
        if self.pickled is None:
            return None
        try:
            return pickle.loads(self.pickled)
        except Exception:  # e.g. an exception class whose __init__ takes other arguments
            return None


def report_of(rank: int, exc: BaseException) -> ErrorReport:
    priority = next((p for cls, p in PRIORITY.items() if isinstance(exc, cls)), PROGRAM_ERROR)
    return ErrorReport(
        rank,
        type(exc).__name__,
        str(exc),
        "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        priority,
        isinstance(exc, TimeoutError),
        time.time(),
        _pickled(exc),
        getattr(exc, "waiting", ""),
        getattr(exc, "collective", False),
    )


def _pickled(exc: BaseException) -> bytes | None:
    try:
        return pickle.dumps(exc)
    except Exception:
        return None


def main(rank: int, config: WorkerConfig, conn: Any, lifeline: Any = None, stderr: Any = None) -> None:
    """Entry point of a rank process (``multiprocessing`` target).

    lifeline: the read end of the launcher's lifeline pipe; stderr: the write end of this rank's stderr pipe.
    """
    if stderr is not None:
        redirect_stderr(stderr)
    if lifeline is not None:
        watch_launcher(lifeline, config.launcher_pid, config.death_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    lo = loopback_interface()
    if lo is not None:  # gloo binds to this interface: stay on 127.0.0.1
        os.environ.setdefault("GLOO_SOCKET_IFNAME", lo)
    torch.set_num_threads(1)  # several ranks share the machine's cores; NumPy does the compute
    keep_freed_memory()  # a large buffer reused, not faulted in afresh (see heap.py)
    try:
        try:
            device = join_group(rank, config)
        except BaseException as exc:
            conn.send(("error", 0, report_of(rank, exc)))
            return
        conn.send(("ready", 0, socket.gethostname()))
        serve(rank, config, device, conn)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        conn.close()


def join_group(rank: int, config: WorkerConfig) -> torch.device:
    """Open the world's private store and initialise the default process group."""
    timeout = timedelta(seconds=config.timeout)
    store = dist.FileStore(config.store_path, config.world_size)
    store.set_timeout(timeout)
    device = torch.device("cpu")
    if config.backend == "nccl":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    dist.init_process_group(config.backend, store=store, rank=rank, world_size=config.world_size, timeout=timeout)
    return device


def serve(rank: int, config: WorkerConfig, device: torch.device, conn: Any) -> None:
    """Run jobs until told to close."""
    same_host = all_on_this_host(device, config.world_size)
    dev: TorchDevice | None = None
    resources = RankResources.join(config.world_size)  # process groups and buffers, kept across runs
    while True:
        command = conn.recv()
        if command[0] == "close":
            return
        _, run, job = command
        try:
            program, args, kwargs, options = pickle.loads(job)
            if dev is not None:  # the previous run's eager sends were all received: let them complete
                dev.settle()
                dev = None
            dev = TorchDevice(
                rank, config.world_size, device=device, timeout=config.timeout, resources=resources, **options
            )
            dev.start_clock(common_epoch(device, same_host))  # t = 0 on every rank, right before the program
            dev.record.t_begin = dev.clock
            args, kwargs = parts_for(rank, args, kwargs)  # PerDevice: this rank's part (its own copy: unpickled)
            output = returned(program(dev, *args, **kwargs))  # read here, as a simulated device's is
            conn.send(("done", run, output, dev.record, dev.open_receives()))
        except BaseException as exc:
            dev = None
            conn.send(("error", run, report_of(rank, exc)))


def all_on_this_host(device: torch.device, world_size: int) -> bool:
    """Whether every rank runs on this machine: the ranks compare a hash of their host names, as numbers
    (an object collective would unpickle what the peers send)."""
    digest = hashlib.sha256(socket.gethostname().encode()).digest()
    mine = torch.tensor([int.from_bytes(digest[:8], "little", signed=True)], dtype=torch.int64, device=device)
    every = [torch.zeros_like(mine) for _ in range(world_size)]
    dist.all_gather(every, mine)
    return all(bool((t == mine).all()) for t in every)


def common_epoch(device: torch.device, same_host: bool) -> float:
    """The perf_counter value that is t = 0 for this run, on every rank.

    On one machine perf_counter reads the same system-wide monotonic clock in every process (Linux
    CLOCK_MONOTONIC), so the ranks agree on the latest of their arrival times at a barrier: measured
    times are then directly comparable across ranks. On several machines the clocks are unrelated;
    each rank takes its own time right after a barrier (off by the barrier's skew, tens of microseconds).
    """
    dist.barrier()
    now = time.perf_counter()
    if not same_host:
        return now
    t = torch.tensor([now], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())
