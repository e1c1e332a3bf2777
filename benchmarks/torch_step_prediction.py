"""Training steps predicted from a calibrated cost model and measured on real gloo processes.

The two training programs of the seed scenarios, with real compute: a 1F1B pipeline of two stages
(``Pipeline`` with ``make_schedule("1f1b", 2, m)``) and two data-parallel replicas (``DataParallel``),
on an MLP large enough that its matrix products take real time. Each run calibrates on the very ranks
(messages both ways at once, additions, matrix products), simulates each step under that model with
the cost model's FLOP rate and memory bandwidth setting every op's time (no fixed action costs), then
measures the same step; nothing of the step itself is measured to make the prediction.

The data-parallel step all-reduces its gradients after the backward (``overlap=False``): through this
backend a gloo request cannot be tested without waiting for it (torch marks it complete only once
waited on), so the overlapped variant never moves its ring during the backward on real ranks, while a
simulation, where a test sees a message that has arrived, would.

    python benchmarks/torch_step_prediction.py [--widths 256 512 512 512 64] [--batch 64] [--runs 3]
"""

from __future__ import annotations

import argparse

from simulator.calibration.prediction import (
    SIMULATED_REPEATS,
    Row,
    add_prediction_options,
    calibrated_world,
    machine_line,
    measured_seconds,
    predicted_seconds,
    spread_table,
    training_steps,
    wait_for_quiet,
)
from simulator.parallel.data import DataParallel
from simulator.parallel.mlp import MLP
from simulator.parallel.pipeline import Pipeline
from simulator.parallel.schedules import make_schedule

CALIBRATION_SIZES = tuple(1 << k for k in range(10, 25))  # 1 KiB .. 16 MiB: activations and gradient buckets


def steps(mlp: MLP, microbatches: int) -> dict[str, object]:
    return {
        f"1F1B pipeline, {microbatches} microbatches": Pipeline(
            mlp, make_schedule("1f1b", 2, microbatches), costs=None
        ),
        "data parallel, 2 microbatches": DataParallel(mlp, 2, microbatches=2, overlap=False),
    }


def one_run(args: argparse.Namespace, mlp: MLP) -> list[Row]:
    params = mlp.init(seed=0)
    x, t = mlp.data(args.batch, seed=1)
    rows = []
    with calibrated_world(args, 2, CALIBRATION_SIZES, "exchange") as (world, cal):
        for what, step in steps(mlp, args.microbatches).items():
            step_args = (step, (params, x, t))
            measured = measured_seconds(world, training_steps, *step_args, repeats=args.repeats)
            predicted = predicted_seconds(
                2, cal.cost, training_steps, *step_args, repeats=SIMULATED_REPEATS, program_time=not args.free_program
            )
            rows.append(Row.of(what, 2, predicted, measured))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[256, 512, 512, 512, 64], help="the MLP's widths")
    parser.add_argument("--batch", type=int, default=64, help="rows per step (default: 64)")
    parser.add_argument("--microbatches", type=int, default=4, help="the pipeline's microbatches (default: 4)")
    add_prediction_options(parser, 31, "steps")
    args = parser.parse_args()
    mlp = MLP(tuple(args.widths))
    load = wait_for_quiet(max_wait=args.max_wait)
    runs = []
    for r in range(args.runs):
        runs.append(one_run(args, mlp))
        print(f"run {r + 1} of {args.runs} done", flush=True)
    print(f"\none training step of an MLP {mlp.widths}, batch {args.batch}, 2 gloo ranks (2 stages, 2 replicas):")
    print(spread_table(runs))
    print(machine_line(load))


if __name__ == "__main__":
    main()
