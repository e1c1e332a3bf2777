"""One rank of a run that ``torchrun`` started: join the group from its environment, run, gather on rank 0.

torchrun starts the processes and sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT (and LOCAL_RANK);
``run_rank`` joins the group from those variables (env://), runs the program on a ``TorchDevice``, and
gathers every rank's output and record on rank 0, which reports them. The command line that names what
to run (a scenario, or ``package.module:function``) is ``simulator.cli.torchrun``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..core.payloads import returned
from .device import RankResources, TorchDevice
from .heap import keep_freed_memory
from .worker import all_on_this_host, common_epoch


def run_rank(
    program: Callable[..., Any],
    args: tuple,
    report: Callable[[int, list[Any], list[Any]], bool],
    *,
    backend: str = "gloo",
    timeout: float = 30.0,
    size: int | None = None,
    options: dict[str, Any] | None = None,
) -> None:
    """Run ``program(dev, *args)`` as this process's rank; rank 0 then calls ``report(world_size, outputs,
    records)``, which says whether every message was received (then eager sends are let complete).

    size: the number of ranks the program needs (None: any). options: ``TorchDevice`` rules (send_mode, strict).
    """
    keep_freed_memory()  # as TorchWorld's rank processes do (see heap.py)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if size is not None and size != world_size:
        raise SystemExit(f"the program needs {size} processes; torchrun started {world_size}")
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=timeout))
    try:
        same_host = all_on_this_host(device, world_size)
        dev = TorchDevice(
            rank,
            world_size,
            device=device,
            timeout=timeout,
            ordered_headers=backend == "nccl",
            resources=RankResources.join(world_size),
            **(options or {}),
        )
        dev.start_clock(common_epoch(device, same_host))
        dev.record.t_begin = dev.clock
        output = returned(program(dev, *args))  # read here, as a simulated device's is
        gathered: list[Any] | None = [None] * world_size if rank == 0 else None
        dist.gather_object((output, dev.record), gathered, dst=0)
        clean = [None]
        if rank == 0:
            clean[0] = report(world_size, [g[0] for g in gathered], [g[1] for g in gathered])
        dist.broadcast_object_list(clean, src=0)
        if clean[0]:  # every message was received: let the eager sends complete
            dev.settle()
    finally:
        dist.destroy_process_group()
