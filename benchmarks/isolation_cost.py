"""What the isolation check costs: ``check(..., isolation=...)`` against the run it checks, in runs.

Two workloads, each checked without and with the isolation check (``simulator.checker.isolation``):

- an exercise: ring-all-reduce over 4 devices, graded as ``grade`` checks one input set (the split, the
  student's own names, isolation from the exercise's inputs: ``Differential.of_inputs``);
- a 32-device program: a ring written with send and recv, every device given its vector by ``PerDevice``
  (``check(..., isolation=True)``: two reruns per bit of the rank, 10 for 32 devices).

For each: the runs a check makes (the run itself and the reruns: at most N+1), the check without isolation and
the isolation check alone (``check_isolation``, what ``isolation=`` adds), in units of one run's CPU time. The
reruns share the reference, the split and the world with the check (they are compared with the run, not with
the model): what each adds is its own run and one walk over its events. Medians of ``--rounds`` rounds, with the spread and the load
(benchmarks/sidebyside.py).

Run: python benchmarks/isolation_cost.py [--rounds R]
"""

from __future__ import annotations

import argparse

import numpy as np
from sidebyside import cpu_timed, load, loads, spread

from simulator import PerDevice, World
from simulator.checker import Differential, Reference, check
from simulator.checker.isolation import check_isolation
from simulator.teach.exercises import ring


def ring_by_hand(dev, x):
    """The exercise's ring all-reduce: reduce-scatter then all-gather, with running sums under names of its own."""
    p, r = dev.world_size, dev.rank
    right, left = (r + 1) % p, (r - 1) % p
    chunks = list(np.split(dev.hold(f"x[{r}]", x), p))
    for s in range(p - 1):
        dev.send(chunks[(r - s) % p], right)
        got = dev.recv(left, shape=chunks[0].shape, dtype=np.float64)
        c = (r - s - 1) % p
        chunks[c] = dev.compute(f"acc{s}", np.add, got, chunks[c])
    for s in range(p - 1):
        dev.send(chunks[(r + 1 - s) % p], right)
        chunks[(r - s) % p] = dev.recv(left, shape=chunks[0].shape, dtype=np.float64)
    return dev.compute("v", np.concatenate, chunks)


def passing_ring(dev, x):
    """Every device ends with the sum of all the vectors: each passes what it got to the right, p - 1 times."""
    p, r = dev.world_size, dev.rank
    total = passing = dev.hold(f"x[{r}]", x)
    for s in range(p - 1):
        dev.send(passing, dst=(r + 1) % p)
        passing = dev.recv(src=(r - 1) % p, shape=x.shape, dtype=x.dtype)
        total = dev.compute("acc" if s == p - 2 else f"running{s}", np.add, total, passing)  # own names on the way
    return total


def ring_model(xs):
    def model(dev):
        for r, x in enumerate(xs):
            dev.hold(f"x[{r}]", x)
        return dev.compute("acc", lambda *v: np.sum(v, axis=0), *xs)

    return model


def exercise_case():
    """(run once, check without isolation, check with it) for the ring-all-reduce exercise on its own inputs."""
    exercise = ring.ring_all_reduce()
    inputs = exercise.inputs(None)
    split = exercise.split(inputs)
    reference = exercise.reference(inputs)

    def run():
        return exercise.run_program(ring_by_hand, inputs, split)

    def plain(r):
        return check(r, reference, split=split, own_names=True)

    def isolated(r):
        start = lambda new: exercise.start_program(ring_by_hand, new, split)  # noqa: E731
        return check_isolation(r, Differential.of_inputs(exercise.size, inputs, split, start))

    return f"exercise ring-all-reduce, {exercise.size} devices", exercise.size, run, plain, isolated


def large_case(p: int = 32):
    xs = [np.full(8, float(r + 1)) for r in range(p)]
    reference = Reference.of(ring_model(xs))

    def run():
        return World(p).run(passing_ring, PerDevice(xs))

    def plain(r):
        return check(r, reference, own_names=True)

    def isolated(r):
        return check_isolation(r, Differential.of_run(r))

    return f"a ring written with send and recv, {p} devices", p, run, plain, isolated


def measure(case, rounds: int) -> None:
    title, n, run, plain, isolated = case
    isolated(run())  # warm-up: imports and first-call costs are not the check's
    t_runs, plain_ratio, iso_ratio, per_rerun = [], [], [], []
    before, after = [], []
    for _ in range(rounds):
        before.append(load())
        result, t_run = cpu_timed(run)
        report, t_plain = cpu_timed(plain, result)
        found, t_iso = cpu_timed(isolated, result)
        after.append(load())
        assert report.ok and not found.leaks and not found.unchecked, (report.text(), found)
        t_runs.append(t_run * 1e3)
        plain_ratio.append(t_plain / t_run)
        iso_ratio.append(t_iso / t_run)
        per_rerun.append(t_iso / t_run / found.runs)
        runs = 1 + found.runs
    print(f"{title}: {runs} runs per check with isolation (at most N+1 = {n + 1})")
    print(f"  one run:                           {spread(t_runs)} ms CPU")
    print(f"  the check without isolation / run: {spread(plain_ratio)}")
    print(f"  the isolation check / run:         {spread(iso_ratio)} (its {runs - 1} reruns and their walks)")
    print(f"  ... per rerun:                     {spread(per_rerun)} runs (a rerun, and the walk that compares it)")
    print(loads(before, after))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print("isolation check cost, medians of", args.rounds, "rounds (min to max), CPU time of this process")
    measure(exercise_case(), args.rounds)
    measure(large_case(), args.rounds)


if __name__ == "__main__":
    main()
