"""Does the simulator predict a real run? Ring all-reduces, simulated under a cost model calibrated in the
same run and measured on real gloo processes.

For each world size: calibrate on those very ranks (every rank sends to the next at once, as in a ring
step; additions; matrix products; see ``simulator.backends.calibrate``), then simulate and measure the
ring all-reduce of ``simulator.collectives``, message by message (``collectives="messages"``), at each
size. Both sides are timed alike (``simulator.backends.prediction``). The whole is repeated ``--runs``
times, each with a fresh calibration, and the table gives every run's predicted / measured and their
spread. The target is 0.7 to 1.3 in every run.

    python benchmarks/torch_ring_prediction.py [--ranks 2 3 4] [--kib 64 256 1024 4096 16384 65536] [--runs 3]
"""

from __future__ import annotations

import argparse

from simulator.backends.prediction import (
    Row,
    machine_line,
    measured_seconds,
    predicted_seconds,
    ring_all_reduces,
    spread_table,
    wait_for_quiet,
)
from simulator.units import binary_size

CALIBRATION_SIZES = tuple(1 << k for k in range(10, 26))  # 1 KiB .. 32 MiB: every chunk a ring below sends

SIMULATED_REPEATS = 41  # each draws its own message times: the median of many predicts the measured median


def one_run(statistic: str, headers: bool, ranks: list[int], kib: list[int], repeats: int, verbose: bool) -> list[Row]:
    from simulator.backends.calibrate import calibrate
    from simulator.backends.launch import TorchWorld

    rows = []
    for p in ranks:
        with TorchWorld(p, "gloo", timeout=120, keep_payloads=False, collectives="messages", headers=headers) as world:
            cal = calibrate(world=world, sizes=CALIBRATION_SIZES, repeats=15, statistic=statistic, pattern="ring")
            if verbose:
                print(cal.summary(), flush=True)
            for k in kib:
                n = k << 10
                measured = measured_seconds(world, ring_all_reduces, n, repeats=repeats)
                predicted = predicted_seconds(p, cal.cost, ring_all_reduces, n, repeats=SIMULATED_REPEATS)
                rows.append(Row(f"ring all-reduce {binary_size(n)}", p, predicted, measured))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--kib", type=int, nargs="+", default=[64, 256, 1024, 4096, 16384, 65536])
    parser.add_argument("--runs", type=int, default=3, help="calibrate-predict-measure runs (default: 3)")
    parser.add_argument("--repeats", type=int, default=41, help="measured all-reduces per size and run (default: 41)")
    parser.add_argument("--max-wait", type=float, default=600, help="seconds to wait for a quiet machine")
    parser.add_argument("--statistic", choices=("median", "mean"), default="mean", help="of each calibrated size")
    parser.add_argument("--headers", action="store_true", help="send a shape header before each message")
    parser.add_argument("--verbose", action="store_true", help="print each calibration's fit")
    args = parser.parse_args()
    load = wait_for_quiet(max_wait=args.max_wait)
    runs = []
    for r in range(args.runs):
        runs.append(one_run(args.statistic, args.headers, args.ranks, args.kib, args.repeats, args.verbose))
        print(f"run {r + 1} of {args.runs} done", flush=True)
    print("\nring all-reduce, float64, gloo on this machine, predicted / measured in each run:")
    print(spread_table(runs))
    print(machine_line(load))


if __name__ == "__main__":
    main()
