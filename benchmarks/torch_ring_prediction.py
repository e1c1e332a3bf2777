"""Does the simulator predict a real run? A ring all-reduce, simulated with a calibrated cost model
and measured on real gloo processes.

For each world size: calibrate the cost model on those very ranks (ping-pong in pairs, all pairs at
once, and the speed of elementwise addition; see ``simulator.backends.calibrate``); run the ring
all-reduce of ``simulator.collectives`` message by message on the real ranks (``collectives=
"messages"``), ``--runs`` times, and take the median measured time; simulate the same program under
the calibrated cost model; report predicted / measured. The target is 0.7 to 1.3.

    python benchmarks/torch_ring_prediction.py [--ranks 2 4] [--mib 1 4] [--runs 7]

The machine matters: ranks that share too few cores wait for the operating system's scheduler, not
for the network, and no alpha-beta model describes that (see the report in the README).
"""

from __future__ import annotations

import argparse
import os

import numpy as np


def ring_all_reduce(dev, nbytes: int) -> None:
    """Rank program: one ring all-reduce of ``nbytes`` of float64 (the message algorithm, step by step)."""
    dev.all_reduce(np.ones(nbytes // 8), algorithm="ring")


STATISTICS = {"median": np.median, "mean": np.mean}


def measure(ranks: int, mib: list[int], runs: int, pattern: str, statistic: str) -> list[tuple[int, int, float, float]]:
    from simulator import World
    from simulator.backends.calibrate import calibrate
    from simulator.backends.launch import TorchWorld

    rows = []
    with TorchWorld(ranks, "gloo", timeout=120, keep_payloads=False, collectives="messages") as world:
        sizes = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)
        cal = calibrate(world=world, sizes=sizes, repeats=15, pattern=pattern, statistic=statistic)
        print(cal.summary())
        for m in mib:
            nbytes = m << 20
            measured = float(STATISTICS[statistic]([world.run(ring_all_reduce, nbytes).time for _ in range(runs)]))
            predicted = World(ranks, cost=cal.cost, keep_payloads=False).run(ring_all_reduce, nbytes).time
            rows.append((ranks, m, predicted, measured))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--mib", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--pattern", default="exchange", choices=("pingpong", "exchange"))
    parser.add_argument("--statistic", default="mean", choices=("median", "mean"))
    args = parser.parse_args()
    rows = [row for n in args.ranks for row in measure(n, args.mib, args.runs, args.pattern, args.statistic)]
    print("\nring all-reduce, float64, gloo on this machine:")
    print("  ranks   size    predicted    measured   predicted/measured")
    for ranks, m, predicted, measured in rows:
        ok = "ok" if 0.7 <= predicted / measured <= 1.3 else "OUT OF 0.7-1.3"
        print(
            f"  {ranks:>5}  {m:>3} MiB  {predicted * 1e3:8.2f} ms  {measured * 1e3:8.2f} ms  {predicted / measured:8.2f}  {ok}"
        )


if __name__ == "__main__":
    main()
    print(f"(machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end)")
