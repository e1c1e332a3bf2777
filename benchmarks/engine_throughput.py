"""Messages per second: this engine against an independent SimPy model and the floor, side by side.

Two workloads, each with alpha-beta links and every message's metadata recorded:
  ping-pong  two devices bounce one 8-byte array back and forth
  ring       1,024 devices each pass an 8-byte array to the next, round after round

The SimPy model is benchmarks/simpy_peer.py: a Store per channel holding (arrival, payload), SimPy's fastest
idiom for messages. Both sides copy the payload (private memory) and book the link (a message waits until
its link is free), and both record the same metadata.

The floor (benchmarks/floor.py) is a heap push, a heap pop and a greenlet switch per message with
nothing recorded: no blocking message can cost less in this design; "of the floor" is its time over the
engine's. Each round runs the engine, SimPy and the floor in turn, in CPU seconds of this process; each
figure is the median of ``--rounds`` rounds' own ratios, with their spread and the load
(benchmarks/sidebyside.py). Targets: ping-pong at least 5x SimPy and half the floor.

Also printed: the host bytes a finished metadata-only ring pass keeps per message (512 and 1,024
devices; measured with tracemalloc, in a separate run).

Run: python benchmarks/engine_throughput.py [--quick] [--rounds R]
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

import numpy as np
import simpy_peer
from floor import floor_rate
from sidebyside import cpu_timed, load, loads, spread

from simulator import CostModel, World

COST = CostModel()  # 1 us latency, 100 GB/s links


# ---- this engine -----------------------------------------------------------------------------
def ping_pong(dev, n):
    x = np.zeros(1)
    for _ in range(n):
        if dev.rank == 0:
            dev.send(x, dst=1)
            x = dev.recv(src=1)
        else:
            x = dev.recv(src=0)
            dev.send(x, dst=0)


def ring(dev, rounds):
    p = dev.world_size
    x = np.zeros(1)
    for _ in range(rounds):
        dev.send(x, dst=(dev.rank + 1) % p)
        x = dev.recv(src=(dev.rank - 1) % p)


def engine_run(program, devices, n):
    result = World(devices, cost=COST, keep_payloads=False).run(program, n)
    return len(result.trace.messages)


def simpy_run(workload, devices, n):
    return simpy_peer.ping_pong(COST, n) if workload == "ping-pong" else simpy_peer.ring_pass(COST, devices, n)


# ---- measurement -----------------------------------------------------------------------------
def kept_bytes_per_message(devices: int, rounds: int) -> float:
    """Host bytes a finished metadata-only ring pass keeps (its RunResult), per message (tracemalloc)."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    result = World(devices, cost=COST, keep_payloads=False).run(ring, rounds)
    gc.collect()  # the engine is gone; what is left is what the result keeps
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return kept / len(result.trace.messages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller workloads, one round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of side-by-side runs; figures are medians")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    workloads = [
        ("ping-pong", 2, ping_pong, 20_000 if args.quick else 100_000),
        ("ring", 1024, ring, 20 if args.quick else 100),
    ]
    print(f"CPU seconds; each figure the median of {rounds} rounds (min to max)")
    print(f"{'workload':<10} {'messages':>9} {'engine us/msg':>22} {'x SimPy (Store)':>22} {'of the floor':>22}")
    before, after = [], []
    for name, devices, program, n in workloads:
        per_msg, vs_simpy, of_floor = [], [], []
        for _ in range(rounds):  # the sides in turn, so that a busy spell slows them alike
            before.append(load())
            m1, t1 = cpu_timed(engine_run, program, devices, n)
            m2, t2 = cpu_timed(simpy_run, name, devices, n)
            assert m1 == m2, (m1, m2)
            t3 = m1 / floor_rate(devices, m1, time.process_time)
            after.append(load())
            per_msg.append(t1 / m1 * 1e6)
            vs_simpy.append(t2 / t1)
            of_floor.append(t3 / t1)
        print(f"{name:<10} {m1:>9,} {spread(per_msg):>22} {spread(vs_simpy):>22} {spread(of_floor):>22}", flush=True)
    print("targets: ping-pong at least 5x SimPy and 0.5 of the floor")
    print("\nhost bytes a finished metadata-only ring pass keeps per message (target: at most 120)")
    for devices in (512, 1024):
        n = 20 if args.quick else 100
        print(
            f"  ring pass, {devices:>5} devices, {devices * n:>7,} messages: {kept_bytes_per_message(devices, n):6.1f} bytes"
        )
    print(loads(before, after + [load()]))


if __name__ == "__main__":
    main()
