"""What checking a run costs beside running it: ``check(run, reference)`` against the run's own cost, on three workloads.

- partial all-reduce: a ring all-reduce over 256 devices that keeps its payloads (the checker needs them), each
  device holding its term of x (``partial=True``); the reference: x on one device. Mostly a collective's own
  chunks, checked where the collective ends.
- named ring: the ring all-reduce written by hand over 32 devices, as the README writes it: each device holds its
  vector ``x[r]``, and every receive names what it carries, a running sum ``x[3]+x[4]+x[5]`` of one chunk on its
  way round, then the finished chunk of ``v``. Every message is compared.
- context parallel: the teaching scenarios cp-ring-balanced and cp-ring-contiguous (ring attention over four
  devices, one training step), checked as ``Scenario.run`` checks them: values and the declared split.
- pipelines: the teaching scenarios pipeline-1f1b (four stages on four devices) and pipeline-zbv (two stages per
  device in a V), with their split, whose rules ask of every op's inputs whether they are values kept elsewhere.

Each round times the run and then its check, in CPU seconds of this process, the check on the run as it comes: a
ring booked whole makes its payloads' objects (a view a message, a tuple a reduction) only when something reads
them, and the check takes what it needs of them from the ring's rows (``value_columns.LateOrigins``), so neither
pays for them. Each figure is the median of ``--rounds`` rounds, with the spread and the load
(benchmarks/sidebyside.py). A round before them, untimed, runs and checks each workload once: what a process pays
only the first time (a scenario's first step, the first world of a size) would otherwise stand in one round's
figures alone; and each round starts with the garbage collector's debt paid (``gc.collect()``, untimed), so that a
full collection of what earlier rounds left does not land in one round's run. Target: check / run at most 1 on every
workload.

A second table sweeps every teaching scenario that has a reference (``simulator.teach.examples``), as
``Scenario.run`` checks it (values and the declared split): check / run with the reference reused from round to
round (a grader checking many runs of one exercise: what the reference works out once is kept), and with a fresh
reference each round (``Scenario.run``, which builds its reference anew: nothing kept), the building of the
reference itself untimed. A scenario that should FAIL is checked too (``expect`` says which): a failing check
explains its divergence (what the wrong value is, where it first appears), and its cost is given apart.

Run: python benchmarks/checker_cost.py [--devices N] [--ring N] [--rounds R] [--no-sweep]
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import Callable
from typing import Any

import numpy as np
from sidebyside import cpu_timed, load, loads, spread

from simulator import World
from simulator.checker import Reference, check
from simulator.teach.examples import all_scenarios, get
from simulator.teach.examples.context import SCENARIOS


def partial_program(dev, p):
    return dev.all_reduce(dev.hold("x", np.full(p, float(dev.rank)), partial=True))


def partial_model(dev, p):
    return dev.hold("x", np.full(p, p * (p - 1) / 2))


def vectors(p: int) -> np.ndarray:
    """Device r's vector x[r]: 2p small integers as floats (two elements a chunk)."""
    return (np.arange(p * 2 * p, dtype=np.float64).reshape(p, 2 * p) % 7) - 3


def ring_model(dev, p):
    xs = vectors(p)
    for r in range(p):
        dev.hold(f"x[{r}]", xs[r])
    return dev.compute("v", lambda: xs.sum(axis=0))


def named_ring(dev, p):
    """The ring all-reduce by hand: p - 1 steps of reduce-scatter, p - 1 of all-gather, every receive named."""
    r = dev.rank
    x = dev.hold(f"x[{r}]", vectors(p)[r])
    size = x.size // p
    chunks = [x[c * size : (c + 1) * size] for c in range(p)]
    right, left = (r + 1) % p, (r - 1) % p
    for s in range(p - 1):  # chunk (r - s - 1) arrives holding the sum of x over devices r - s - 1 .. r - 1
        out_c, in_c = (r - s) % p, (r - s - 1) % p
        dev.send(chunks[out_c], right)
        terms = "+".join(f"x[{(in_c + k) % p}]" for k in range(s + 1))
        chunks[in_c] = dev.recv(left, name=terms, index=np.s_[in_c * size : (in_c + 1) * size]) + chunks[in_c]
    for s in range(p - 1):  # the finished chunks go round
        out_c, in_c = (r - s + 1) % p, (r - s) % p
        dev.send(chunks[out_c], right)
        chunks[in_c] = dev.recv(left, name="v", index=np.s_[in_c * size : (in_c + 1) * size])
    return np.concatenate(chunks)


def workloads(devices: int, ring: int) -> list[tuple[str, Callable[[], Any], Callable[[Any], Any]]]:
    """(title, run it, check its result) per workload."""
    out = []
    ref = Reference.of(partial_model, devices)
    out.append((f"partial all-reduce, {devices} devices", lambda: World(devices).run(partial_program, devices),
                lambda run, ref=ref: check(run, ref)))  # fmt: skip
    ring_ref = Reference.of(ring_model, ring)
    out.append((f"named ring, {ring} devices", lambda: World(ring).run(named_ring, ring),
                lambda run: check(run, ring_ref)))  # fmt: skip
    for sc in [*SCENARIOS, get("pipeline-1f1b"), get("pipeline-zbv")]:
        if sc.expect != "match":
            continue
        sc_ref = sc.reference()
        out.append((f"{sc.name} (with its split)", lambda sc=sc: sc.world.run(sc.program, *sc.args),
                    lambda run, sc=sc, sc_ref=sc_ref: check(run, sc_ref, split=sc.split)))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=256, help="devices of the partial all-reduce")
    parser.add_argument("--ring", type=int, default=32, help="devices of the named ring")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-sweep", dest="sweep", action="store_false", help="leave out every scenario's sweep")
    args = parser.parse_args()
    print("check(run, reference) against the run, CPU us per event: median (min to max) of the rounds")
    print(f"{'':<34} {'events':>8} {'run':>20} {'check':>20} {'check / run':>18}")
    before, after = [], []
    for title, run_it, check_it in workloads(args.devices, args.ring):
        assert check_it(run_it()).ok  # the untimed round
        runs, checks, ratios = [], [], []
        for _ in range(args.rounds):
            gc.collect()
            before.append(load())
            run, t_run = cpu_timed(run_it)
            report, t_check = cpu_timed(check_it, run)
            after.append(load())
            assert report.ok, report.text()
            events = len(run.trace.events)
            runs.append(t_run / events * 1e6)
            checks.append(t_check / events * 1e6)
            ratios.append(t_check / t_run)
            del run, report
        print(f"{title:<34} {events:>8,} {spread(runs):>20} {spread(checks):>20} {spread(ratios):>18}")
    print("target: check / run at most 1 on every workload")
    print(loads(before, after))
    if args.sweep:
        sweep(args.rounds)


def sweep(rounds: int) -> None:
    """Every teaching scenario with a reference, checked as Scenario.run checks it: check / run per scenario."""
    print()
    print("every teaching scenario, checked with its split: check / run, median (min to max) of the rounds")
    print(f"{'':<30} {'verdict':>8} {'run, ms':>20} {'reference reused':>20} {'fresh reference':>20}")
    before, after = [], []
    for sc in all_scenarios().values():
        if sc.reference is None or sc.expect == "error":
            continue
        want_ok = sc.expect == "match"
        kept = sc.reference()

        def run_it(sc=sc):
            return sc.world.run(sc.program, *sc.args)

        def check_it(run, ref, sc=sc):
            return check(run, ref, split=sc.split)

        assert check_it(run_it(), kept).ok is want_ok  # the untimed round
        runs, reused, fresh = [], [], []
        for _ in range(rounds):
            new_ref = sc.reference()  # (built untimed: Scenario.run builds it anew each time)
            gc.collect()
            before.append(load())
            run, t_run = cpu_timed(run_it)  # (each check its own run: neither finds what the other settled)
            report, t_kept = cpu_timed(check_it, run, kept)
            run_2, t_run_2 = cpu_timed(run_it)
            report_fresh, t_fresh = cpu_timed(check_it, run_2, new_ref)
            after.append(load())
            assert report.ok is want_ok and report_fresh.text() == report.text(), sc.name
            runs.append(t_run * 1e3)
            reused.append(t_kept / t_run)
            fresh.append(t_fresh / t_run_2)
            del run, run_2, report, report_fresh, new_ref
        verdict = "passed" if want_ok else "FAILED"
        print(f"{sc.name:<30} {verdict:>8} {spread(runs):>20} {spread(reused):>20} {spread(fresh):>20}")
    print("target: check / run at most 1 on every scenario that passes (one that FAILS explains its divergence)")
    print(loads(before, after))


if __name__ == "__main__":
    main()
