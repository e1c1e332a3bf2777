"""Run a scenario or rank program under ``torchrun``: one machine or several, env:// initialisation.

Each process torchrun starts runs this module: it runs the program on a real rank
(``simulator.real.torchrun``), and rank 0 merges the trace, checks it against the scenario's
single-device reference and prints the event log. On one machine:

    torchrun --standalone --nproc-per-node 2 -m simulator.cli.torchrun split

On two machines (run on each; node 0's address reachable from node 1; the port free on node 0):

    torchrun --nnodes 2 --nproc-per-node 1 --node-rank 0 --master-addr 10.0.0.1 --master-port 29500 \\
        -m simulator.cli.torchrun split              # on node 0
    torchrun --nnodes 2 --nproc-per-node 1 --node-rank 1 --master-addr 10.0.0.1 --master-port 29500 \\
        -m simulator.cli.torchrun split              # on node 1

The target is a scenario name (``python -m simulator list``) or ``package.module:function`` (a rank
program that takes only the device). ``--backend nccl`` uses one GPU per process (LOCAL_RANK).
"""

from __future__ import annotations

import argparse
import importlib
import pickle
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..checker import check
from ..core.files import atomic_write
from ..real.recording import merge
from ..real.torchrun import run_rank
from ..teach.examples import all_scenarios
from .types import output_file


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
        prog="torchrun ... -m simulator.cli.torchrun", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("target", help="a scenario name, or package.module:function")
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds before a communication is a hang")
    parser.add_argument("--save", type=output_file, help="rank 0 pickles the merged trace and the outputs to this file")
    args = parser.parse_args(argv)
    program, prog_args, sim_world, reference = resolve(args.target)
    options = {} if sim_world is None else {"send_mode": sim_world.send_mode, "strict": sim_world.strict}

    def report(world_size: int, outputs: list[Any], records: list[Any]) -> bool:
        """Rank 0: merge, print the log and the check, save if asked. True if every message was received."""
        trace = merge(world_size, records, outputs)
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
        return not left

    size = None if sim_world is None else sim_world.size
    run_rank(program, prog_args, report, backend=args.backend, timeout=args.timeout, size=size, options=options)
    return 0


if __name__ == "__main__":
    sys.exit(main())
