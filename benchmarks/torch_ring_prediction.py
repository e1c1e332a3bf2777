"""Does the simulator predict a real run? Ring all-reduces, simulated under a cost model calibrated in the
same run and measured on real gloo processes.

For each world size: calibrate on those very ranks (every rank sends to the next at once, as in a ring
step; additions; matrix products; see ``simulator.backends.calibrate``), then simulate and measure the
ring all-reduce of ``simulator.collectives``, message by message (``collectives="messages"``), at each
size. Both sides are timed alike (``simulator.backends.prediction``): the median over many repeats, the
sizes taken in turn on real ranks (as calibration takes its sizes), and each simulated repeat drawing its
message times from the calibration's measurements (``simulator.spread``). Messages go without shape
headers (every receive of the ring declares its shape; ``--headers`` sends them). The whole is repeated
``--runs`` times, each with a fresh calibration, and the table gives every run's predicted / measured and
their spread. The target is 0.7 to 1.3 in every run.

    python benchmarks/torch_ring_prediction.py [--ranks 2 3 4] [--kib 64 256 1024 4096 16384 65536] [--runs 3]
"""

from __future__ import annotations

import argparse

from simulator.backends.prediction import (
    Row,
    machine_line,
    measured_seconds_by_size,
    predicted_seconds,
    ring_all_reduces,
    spread_table,
    wait_for_quiet,
)
from simulator.units import binary_size

# 1 KiB .. 16 MiB: the ring's chunks; the 32 MiB chunks of 64 MiB on 2 ranks take the line's time. Two 32 MiB
# messages crossing at once, as the probe sends them, took 0.2 to 0.4 s here, 10 to 15 times the 16 MiB figure,
# while the ring's own 32 MiB steps took about 60 ms: at that size the probe is not what the ring does.
CALIBRATION_SIZES = tuple(1 << k for k in range(10, 25))

SIMULATED_REPEATS = 41  # each draws its own message times: the median of many predicts the measured median


def one_run(
    statistic: str, headers: bool, spread: bool, ranks: list[int], kib: list[int], repeats: int, verbose: bool
) -> list[Row]:
    from simulator.backends.calibrate import calibrate
    from simulator.backends.launch import TorchWorld

    rows = []
    for p in ranks:
        with TorchWorld(p, "gloo", timeout=120, keep_payloads=False, collectives="messages", headers=headers) as world:
            cal = calibrate(
                world=world, sizes=CALIBRATION_SIZES, repeats=15, statistic=statistic, spread=spread, pattern="ring"
            )
            if verbose:
                print(cal.summary(), flush=True)
            measured = measured_seconds_by_size(world, [k << 10 for k in kib], repeats)
            for n, seconds in measured.items():
                predicted = predicted_seconds(p, cal.cost, ring_all_reduces, n, repeats=SIMULATED_REPEATS)
                rows.append(Row(f"ring all-reduce {binary_size(n)}", p, predicted, seconds))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 3, 4])
    parser.add_argument("--kib", type=int, nargs="+", default=[64, 256, 1024, 4096, 16384, 65536])
    parser.add_argument("--runs", type=int, default=3, help="calibrate-predict-measure runs (default: 3)")
    parser.add_argument("--repeats", type=int, default=41, help="measured all-reduces per size and run (default: 41)")
    parser.add_argument("--max-wait", type=float, default=600, help="seconds to wait for a quiet machine")
    parser.add_argument("--statistic", choices=("median", "mean"), default="mean", help="of each calibrated size")
    parser.add_argument(
        "--spread", action="store_true", help="each simulated message draws its time from the measured ones"
    )
    parser.add_argument("--headers", action="store_true", help="send a shape header before each message")
    parser.add_argument("--verbose", action="store_true", help="print each calibration's fit")
    args = parser.parse_args()
    load = wait_for_quiet(max_wait=args.max_wait)
    runs = []
    for r in range(args.runs):
        runs.append(
            one_run(args.statistic, args.headers, args.spread, args.ranks, args.kib, args.repeats, args.verbose)
        )
        print(f"run {r + 1} of {args.runs} done", flush=True)
    print("\nring all-reduce, float64, gloo on this machine, predicted / measured in each run:")
    print(spread_table(runs))
    print(machine_line(load))


if __name__ == "__main__":
    main()
