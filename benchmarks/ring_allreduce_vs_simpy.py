"""A ring all-reduce over 1,024 devices (about two million messages): this engine's two paths against SimPy.

All sides run the same algorithm on the same data and cost model, and must agree on the result and on
the simulated end time:

  payloads     ``dev.all_reduce(x)`` in ``World(p, cost=COST)``, the default World, what a user's run (and the
               checker) takes: the ring booked whole with every payload kept, each message's running sum
               and each reduction's inputs and output (simulator/collectives/ring_payloads.py)
  booked       the same with ``World(keep_payloads=False)``: booked whole, metadata only, the trace the
               messages would make (simulator/collectives/booked.py)
  message      the same, ``World(keep_payloads=False, book_collectives=False)``: message by message (the
               path a ring takes where it cannot be booked: shared links, rendezvous sends, the isolation
               check's replays, partial names): each chunk sent, booked on its link and recorded, each
               reduction a recorded op
  SimPy        the independent model of benchmarks/simpy_peer.py (a Store holding (arrival, payload) per
               channel, SimPy's fastest idiom), recording the same metadata, run as its users run it
  SimPy no GC  the same with Python's garbage collector off (the engine turns it off while it runs)

Each side runs in a fresh process (its peak memory, ru_maxrss, is its own), in turns, for ``--rounds``
rounds; every figure is the median of the rounds' own side-by-side figures, with their spread and the
machine's load (benchmarks/sidebyside.py). Times are each process's CPU seconds for the run. Beside them:
the floor (benchmarks/floor.py: a heap push, a heap pop and a greenlet switch per message, nothing
recorded), and, in separate runs under tracemalloc, the bytes a finished message-by-message run keeps per
message and its transient peak (the most it held during the run, over what it keeps) at 256 and 512 devices,
and the same for the payloads side (its payloads included: each message's chunk and each reduction's output
are kept for the checker, so it keeps more than the metadata's 100 bytes; SimPy's peer copies every payload
but keeps none after its receive, so only the metadata sides compare with it byte for byte).
Targets: message by message at least 8x SimPy, its peak under a third of SimPy's, at most 100 bytes kept
per message and a transient peak at most 1.3x what is kept; booked at least 20x SimPy.

`make bench` runs it at 64, 256 and 1,024 devices (the bytes kept, at 256 and 512 devices, with the last: `--kept`
with no sizes leaves them out).

Run: python benchmarks/ring_allreduce_vs_simpy.py [--devices N] [--rounds R] [--kept N ...] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import simpy_peer
from sidebyside import cpu, load, loads, spread

from simulator import CostModel, World
from simulator.core.world import MAX_EVENTS_WITH_PAYLOADS

COST = CostModel()  # 1 us latency, 100 GB/s links, 100 TFLOP/s
ROOT = str(Path(__file__).resolve().parent.parent)


def engine_program(dev, n):
    return dev.all_reduce(np.full(n, float(dev.rank), np.float32))


def run_engine(p: int, n: int, booked: bool = True):
    world = World(p, cost=COST, keep_payloads=False) if booked else World(**_message_world(p))
    return _run(world, n)


def run_payloads(p: int, n: int):
    return _run(_payloads_world(p), n)


def _payloads_world(p: int) -> World:
    """The default World; over 1,024 devices (3.1 million events, over the 2 million a run that keeps payloads may
    record by default) with the limit raised, as its error tells a user to."""
    events = 3 * p * (p - 1)
    return World(p, cost=COST) if events < MAX_EVENTS_WITH_PAYLOADS else World(p, cost=COST, max_events=events + 1)


def _run(world: World, n: int):
    result = world.run(engine_program, n)
    return len(result.trace.messages), result.time, result.outputs[0]


def _message_world(p: int) -> dict:
    return {"size": p, "cost": COST, "keep_payloads": False, "book_collectives": False}


def run_simpy(p: int, n: int):
    return simpy_peer.ring_all_reduce(COST, p, n)


def run_simpy_no_gc(p: int, n: int):
    """SimPy with Python's garbage collector off, as the engine runs (its log of a tuple per message makes the
    collector scan more and more as a run grows: at 1,024 devices much of SimPy's time)."""
    gc.disable()
    return simpy_peer.ring_all_reduce(COST, p, n)


def kept_message(p: int, n: int, kind: str = "kept") -> None:
    """Run message by message (``kept``), in the default World (``kept_payloads``: booked whole, payloads kept) or
    message by message with payloads kept (``kept_message_payloads``: the like of the default World, chunk by chunk)
    under tracemalloc: the bytes the finished result keeps per message, and the most held during the run over that
    (imports and first-use caches warmed by a small run first)."""

    def world(p: int) -> World:
        if kind == "kept":
            return World(**_message_world(p))
        booked = _payloads_world(p)
        return booked if kind == "kept_payloads" else dataclasses.replace(booked, book_collectives=False)

    world(4).run(engine_program, 4)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    result = world(p).run(engine_program, n)
    gc.collect()
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    kept -= before
    print(json.dumps({"kept_per_message": kept / len(result.trace.messages), "peak_over_kept": (peak - before) / kept}))


KEPT = ("kept", "kept_payloads", "kept_message_payloads")  # the bytes kept: metadata, payloads booked, by message
SIDES = {
    "payloads": run_payloads,
    "booked": run_engine,
    "message": lambda p, n: run_engine(p, n, booked=False),
    "simpy": run_simpy,
    "simpy_nogc": run_simpy_no_gc,
    "baseline": run_engine,
}


def run_side(side: str, p: int, n: int) -> None:
    if side in KEPT:
        kept_message(p, n, side)
        return
    c0, t0 = cpu(), time.perf_counter()
    messages, sim_time, out = SIDES[side](p, n)
    wall, seconds = time.perf_counter() - t0, cpu() - c0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    digest = hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()[:16]
    print(json.dumps({"messages": messages, "sim_time": sim_time, "cpu": seconds, "wall": wall, "peak_mb": peak_mb,
                      "digest": digest, "first": float(out[0])}))  # fmt: skip


def spawn(side: str, p: int, n: int, root: str = ROOT) -> dict:
    """Run one side in a fresh process (``root``: the checkout whose simulator it imports)."""
    cmd = [sys.executable, __file__, "--side", side, "--devices", str(p), "--elements", str(n)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": root})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--elements", type=int, default=None, help="array length (default: one per device)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of side-by-side runs; figures are medians")
    parser.add_argument("--kept", type=int, nargs="*", default=[256, 512], help="devices for the bytes kept")
    parser.add_argument("--baseline", help="another checkout whose engine (booked) runs as a further side")
    parser.add_argument("--side", choices=[*SIDES, *KEPT], help=argparse.SUPPRESS)
    args = parser.parse_args()
    p = args.devices
    n = args.elements or p
    if args.side:
        run_side(args.side, p, n)
        return
    from floor import floor_rate

    print(f"ring all-reduce of {n} float32 over {p} devices, {2 * p * (p - 1):,} messages; each side in a fresh")
    print(f"process, CPU seconds; {args.rounds} rounds, each figure the median of the rounds (min to max)")
    sides = [("payloads", ROOT), ("booked", ROOT), ("message", ROOT), ("simpy", ROOT), ("simpy_nogc", ROOT)]
    if args.baseline:
        sides.append(("baseline", str(Path(args.baseline).resolve())))
    rounds: list[dict[str, dict]] = []
    before, after = [], []
    for _ in range(args.rounds):
        before.append(load())
        rounds.append({side: spawn(side, p, n, root) for side, root in sides})
        rounds[-1]["floor"] = {"cpu": 2 * p * (p - 1) / floor_rate(p, 2 * p * (p - 1), time.process_time)}
        after.append(load())
    for r in rounds:
        s = r["simpy"]
        for side, _ in sides:
            assert r[side]["messages"] == s["messages"], "message counts differ"
            assert r[side]["digest"] == s["digest"] and r[side]["first"] == p * (p - 1) / 2, "different sums"
            assert abs(r[side]["sim_time"] - s["sim_time"]) <= 1e-9 * s["sim_time"], "simulated end times differ"
    m = 2 * p * (p - 1)
    print(f"{'':<10} {'CPU s':>22} {'msg/s (median)':>15} {'peak MB':>22}")
    for side, _ in [*sides, ("floor", ROOT)]:
        cpus = [r[side]["cpu"] for r in rounds]
        peak = spread([r[side]["peak_mb"] for r in rounds], "{:.0f}") if side != "floor" else ""
        print(f"{side:<10} {spread(cpus, '{:.3g}'):>22} {m / sorted(cpus)[len(cpus) // 2]:>15,.0f} {peak:>22}")
    ratio = {side: [r["simpy"]["cpu"] / r[side]["cpu"] for r in rounds] for side, _ in sides if side != "simpy"}
    no_gc = {side: [r["simpy_nogc"]["cpu"] / r[side]["cpu"] for r in rounds] for side, _ in sides}
    mem = {side: [r[side]["peak_mb"] / r["simpy"]["peak_mb"] for r in rounds] for side, _ in sides}
    print(f"{'':<10} {'x SimPy':>22} {'x SimPy, collector off':>24} {'peak / SimPy':>22}")
    for side in ("payloads", "booked", "message"):
        print(f"{side:<10} {spread(ratio[side]):>22} {spread(no_gc[side]):>24} {spread(mem[side]):>22}")
    print(f"message by message: {spread(ratio['message'])}x SimPy's rate (target: at least 8x)")
    print(f"  against SimPy with its garbage collector off: {spread(no_gc['message'])}x")
    print(f"  its peak: {spread(mem['message'])} of SimPy's (target: at most 1/3)")
    print(f"  of the floor: {spread([r['floor']['cpu'] / r['message']['cpu'] for r in rounds])}")
    print(f"booked whole: {spread(ratio['booked'])}x SimPy's rate (target: at least 20x)")
    print(
        f"payloads kept (the default World, booked whole): {spread(ratio['payloads'])}x SimPy's rate; "
        f"{spread(no_gc['payloads'])}x SimPy with its collector off"
    )
    if args.baseline:
        print(f"the baseline: {spread(ratio['baseline'])}x SimPy's rate")
    for devices in args.kept:
        kept = [spawn("kept", devices, devices) for _ in range(args.rounds)]
        print(
            f"message by message, {devices} devices: {spread([k['kept_per_message'] for k in kept], '{:.1f}')} bytes"
            f" kept per message (target: at most 100), transient peak {spread([k['peak_over_kept'] for k in kept])}x"
            " what it keeps (target: at most 1.3)"
        )
        for side, what in [("kept_payloads", "booked whole"), ("kept_message_payloads", "message by message")]:
            kept = [spawn(side, devices, devices) for _ in range(args.rounds)]
            print(
                f"payloads kept, {what}, {devices} devices: {spread([k['kept_per_message'] for k in kept], '{:.1f}')}"
                f" bytes kept per message, payloads included (no target: SimPy keeps none), transient peak"
                f" {spread([k['peak_over_kept'] for k in kept])}x what it keeps"
            )
    print(loads(before, after + [load()]))


if __name__ == "__main__":
    main()
