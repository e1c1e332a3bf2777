"""Run a scenario or rank program under ``torchrun``: one machine or several, env:// initialisation.

torchrun starts the processes and sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; each process
runs this module, joins the group from those variables, runs the program on a ``TorchDevice``, and
sends its record to rank 0, which merges the trace, checks it against the scenario's single-device
reference and prints the event log. On one machine:

    torchrun --standalone --nproc-per-node 2 -m simulator.backends.torchrun split

On two machines (run on each; node 0's address reachable from node 1; the port free on node 0):

    torchrun --nnodes 2 --nproc-per-node 1 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 \\
        -m simulator.backends.torchrun split              # on node 0
    torchrun --nnodes 2 --nproc-per-node 1 --node-rank 1 --master-addr 10.0.0.1 --master-port 29500 \\
        -m simulator.backends.torchrun split              # on node 1

The target is a scenario name (``python -m simulator list``) or ``package.module:function`` (a rank
program that takes only the device). ``--backend nccl`` uses one GPU per process (LOCAL_RANK).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pickle
import socket
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from ..cli_types import output_file
from ..examples import all_scenarios
from ..files import atomic_write
from ..reference import check
from .heap import keep_freed_memory
from .recording import merge
from .torch import RankResources, TorchDevice
from .worker import all_gather_objects, common_epoch


def resolve(target: str) -> tuple[Callable[..., Any], tuple, Any, Any]:
    """(program, args, simulator world or None, reference factory or None) for a target name."""
    scenarios = all_scenarios()
    if target in scenarios:
        s = scenarios[target]
        return s.program, s.args, s.world, s.reference
    if ":" in target:
        module, _, name = target.partition(":")
        return getattr(importlib.import_module(module), name), (), None, None
    raise SystemExit(f"unknown target {target!r}: give a scenario ({', '.join(scenarios)}) or module:function")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="torchrun ... -m simulator.backends.torchrun", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("target", help="a scenario name, or package.module:function")
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a communication is a hang")
    parser.add_argument("--save", type=output_file, help="rank 0 pickles the merged trace and the outputs to this file")
    args = parser.parse_args(argv)
    program, prog_args, sim_world, reference = resolve(args.target)
    keep_freed_memory()  # as TorchWorld's rank processes do (see heap.py)

    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if sim_world is not None and sim_world.size != world_size:
        raise SystemExit(f"{args.target} needs {sim_world.size} processes; torchrun started {world_size}")
    device = torch.device("cpu")
    if args.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    options = {}
    if sim_world is not None:
        options = {"send_mode": sim_world.send_mode, "strict": sim_world.strict}
    dist.init_process_group(args.backend, init_method="env://", timeout=timedelta(seconds=args.timeout))
    try:
        same_host = len(set(all_gather_objects(socket.gethostname(), world_size))) == 1
        dev = TorchDevice(
            rank,
            world_size,
            device=device,
            timeout=args.timeout,
            ordered_headers=args.backend == "nccl",
            resources=RankResources.join(world_size),
            **options,
        )
        dev.start_clock(common_epoch(device, same_host))
        dev.record.t_begin = dev.clock
        output = program(dev, *prog_args)
        gathered: list[Any] = [None] * world_size if rank == 0 else None
        dist.gather_object((output, dev.record), gathered, dst=0)
        verdict = [None]
        if rank == 0:
            verdict[0] = report(args, world_size, gathered, reference)
        dist.broadcast_object_list(verdict, src=0)
        if verdict[0] == "clean":  # every message was received: let the eager sends complete
            dev.settle()
    finally:
        dist.destroy_process_group()
    return 0


def report(args: argparse.Namespace, world_size: int, gathered: list, reference: Any) -> str:
    """Rank 0: merge, print the log and the check, save if asked. Returns "clean" if nothing was left unreceived."""
    outputs = [g[0] for g in gathered]
    trace = merge(world_size, [g[1] for g in gathered], outputs)
    print(f"{args.target} on {world_size} {args.backend} processes (measured times):")
    print("\n".join("  " + line for line in trace.log()))
    print("outputs: " + ", ".join(f"device {r}: {o}" for r, o in enumerate(outputs)))
    if reference is not None:
        print(check(trace, reference()))
    if args.save:
        with atomic_write(args.save, "wb") as f:  # whole or not at all
            pickle.dump({"trace": trace, "outputs": outputs}, f)
    left = trace.unreceived()
    if left:
        print(f"{len(left)} message(s) were never received", file=sys.stderr)
    return "dirty" if left else "clean"


if __name__ == "__main__":
    sys.exit(main())
