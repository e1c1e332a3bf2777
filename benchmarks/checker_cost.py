"""What checking a run costs beside running it: ``check(run, reference)`` per event against the run's own cost.

The run: a ring all-reduce over 256 devices that keeps its payloads (the checker needs them), each device
holding its term of x (``partial=True``); the reference: x on one device. Each round times the run and
then its check, in CPU seconds of this process; each figure is the median of ``--rounds`` rounds, with
the spread and the load (benchmarks/sidebyside.py). The checker reads the trace's columns and makes a
record only for an event it compares (simulator/checker/run_check.py). Target: the check costs no more per
event than the run.

Run: python benchmarks/checker_cost.py [--devices N] [--rounds R]
"""

from __future__ import annotations

import argparse

import numpy as np
from sidebyside import cpu_timed, load, loads, spread

from simulator import World
from simulator.checker import Reference, check


def program(dev, p):
    return dev.all_reduce(dev.hold("x", np.full(p, float(dev.rank)), partial=True))


def model(dev, p):
    return dev.hold("x", np.full(p, p * (p - 1) / 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    p = args.devices
    reference = Reference.of(model, p)
    runs, checks, ratios, before, after = [], [], [], [], []
    for _ in range(args.rounds):
        before.append(load())
        run, t_run = cpu_timed(World(p).run, program, p)
        report, t_check = cpu_timed(check, run, reference)
        after.append(load())
        assert report.ok, report.text()
        events = len(run.trace.events)
        runs.append(t_run / events * 1e6)
        checks.append(t_check / events * 1e6)
        ratios.append(t_check / t_run)
        del run, report
    print(f"ring all-reduce over {p} devices with payloads, {events:,} events; CPU us per event, median (min to max)")
    print(f"  the run:   {spread(runs)}")
    print(f"  its check: {spread(checks)}")
    print(f"  check / run: {spread(ratios)} (target: at most 1)")
    print(loads(before, after))


if __name__ == "__main__":
    main()
