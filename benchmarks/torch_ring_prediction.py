"""Does the simulator predict a real run? Ring all-reduces, simulated under a cost model calibrated in the
same run and measured on real gloo processes.

For each world size: calibrate on those very ranks (every rank sends to the next at once, as in a ring
step; additions; matrix products; see ``simulator.calibration.calibrate``), then simulate and measure the
ring all-reduce of ``simulator.collectives``, message by message (``collectives="messages"``), at each
size. Both sides are timed alike (``simulator.calibration.prediction``): each repeat after a barrier, from
the last rank's start to the last rank's end, the median over many repeats, the sizes taken in turn on real
ranks (as calibration takes its sizes and times its messages). With ``--spread`` each simulated repeat
draws its message times from the calibration's measurements (``simulator.cost.spread``). Messages go without shape
headers (every receive of the ring declares its shape; ``--headers`` sends them). The whole is repeated
``--runs`` times, each with a fresh calibration, and the table gives every run's predicted / measured and
their spread. The target is 0.7 to 1.3 in every run.

    python benchmarks/torch_ring_prediction.py [--ranks 2 3 4] [--kib 64 256 1024 4096 16384 65536] [--runs 3]
"""

from __future__ import annotations

import argparse

from simulator.calibration.prediction import (
    SIMULATED_REPEATS,
    Row,
    add_prediction_options,
    calibrated_world,
    machine_line,
    measured_seconds_by_size,
    predicted_seconds,
    ring_all_reduces,
    spread_table,
    wait_for_quiet,
)
from simulator.cost.units import binary_size

# 1 KiB .. 32 MiB: the ring's chunks, up to the 32 MiB of 64 MiB on 2 ranks. (Before the probes settled each
# eager send, every message was copied into fresh memory and 32 MiB messages took 0.2 to 0.4 s.)
CALIBRATION_SIZES = tuple(1 << k for k in range(10, 26))
# additions as large as the ring's (32 MiB on 2 ranks), not only up to calibration's usual 4 MiB
ADD_SIZES = (1 << 10, 8 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 32 << 20)


def one_run(args: argparse.Namespace) -> list[Row]:
    rows = []
    for p in args.ranks:
        with calibrated_world(args, p, CALIBRATION_SIZES, "ring", ADD_SIZES) as (world, cal):
            measured = measured_seconds_by_size(world, [k << 10 for k in args.kib], args.repeats)
            for n, seconds in measured.items():
                predicted = predicted_seconds(
                    p, cal.cost, ring_all_reduces, n, repeats=SIMULATED_REPEATS, program_time=not args.free_program
                )
                rows.append(Row.of(f"ring all-reduce {binary_size(n)}", p, predicted, seconds))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--kib", type=int, nargs="+", default=[64, 256, 1024, 4096, 16384, 65536])
    add_prediction_options(parser, 41, "all-reduces per size")
    args = parser.parse_args()
    load = wait_for_quiet(max_wait=args.max_wait)
    runs = []
    for r in range(args.runs):
        runs.append(one_run(args))
        print(f"run {r + 1} of {args.runs} done", flush=True)
    print("\nring all-reduce, float64, gloo on this machine, predicted / measured in each run:")
    print(spread_table(runs))
    print(machine_line(load))


if __name__ == "__main__":
    main()
