"""Messages per second: this engine against an equivalent SimPy model and the floor, in the same run.

Two workloads, each with alpha-beta links and every message's metadata recorded:
  ping-pong  two devices bounce one 8-byte array back and forth
  ring       1,024 devices each pass an 8-byte array to the next, round after round

The SimPy model is written the way SimPy's own documentation models latency (its "Event Latency"
example): a Cable whose put() starts a process that waits the delay, then puts the message into the
receiver's Store; the receiver gets from its Store. Both sides copy the payload (private memory) and
book the link (a message waits until its link is free), and both record the same metadata.

The floor (benchmarks/floor.py) is a heap push, a heap pop and a greenlet switch per message with
nothing recorded: no blocking message can cost less in this design. Each side runs ``--repeat`` times,
alternating, and keeps its best (a busy machine only slows a run down).

Also printed: the host bytes a finished metadata-only ring pass keeps per message (512 and 1,024
devices; measured with tracemalloc, in a separate run).

Run: python benchmarks/engine_throughput.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc

import numpy as np
import simpy
from floor import floor_rate

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


# ---- SimPy -----------------------------------------------------------------------------------
class Cable:
    """SimPy's documented latency pattern, plus alpha-beta link booking and a metadata log."""

    def __init__(self, env, p, log):
        self.env = env
        self.inbox = {}  # (src, dst) -> Store
        self.free = {}  # (src, dst) -> time the link is next free
        self.log = log

    def store(self, src, dst):
        key = (src, dst)
        if key not in self.inbox:
            self.inbox[key] = simpy.Store(self.env)
        return self.inbox[key]

    def put(self, src, dst, value):
        payload = np.array(value)
        payload.setflags(write=False)
        now = self.env.now
        start = max(now, self.free.get((src, dst), 0.0))
        done = start + payload.nbytes / COST.bandwidth
        self.free[(src, dst)] = done
        self.log.append(
            (len(self.log), src, dst, 0, payload.shape, payload.dtype, payload.nbytes, now, start, done + COST.latency)
        )
        self.env.process(self._deliver(self.store(src, dst), payload, done + COST.latency - now))

    def _deliver(self, store, payload, delay):
        yield self.env.timeout(delay)
        yield store.put(payload)

    def get(self, src, dst):
        return self.store(src, dst).get()


def simpy_run(workload, devices, n):
    env = simpy.Environment()
    log = []
    cable = Cable(env, devices, log)

    def ping_pong_proc(rank):
        x = np.zeros(1)
        for _ in range(n):
            if rank == 0:
                cable.put(0, 1, x)
                x = yield cable.get(1, 0)
            else:
                x = yield cable.get(0, 1)
                cable.put(1, 0, x)

    def ring_proc(rank):
        x = np.zeros(1)
        nxt, prv = (rank + 1) % devices, (rank - 1) % devices
        for _ in range(n):
            cable.put(rank, nxt, x)
            x = yield cable.get(prv, rank)

    proc = ping_pong_proc if workload == "ping-pong" else ring_proc
    for r in range(devices):
        env.process(proc(r))
    env.run()
    return len(log)


# ---- measurement -----------------------------------------------------------------------------
def timed(fn, *args):
    t0 = time.perf_counter()
    messages = fn(*args)
    return messages, time.perf_counter() - t0


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
    parser.add_argument("--quick", action="store_true", help="smaller workloads, one repetition")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side, alternating; the best counts")
    args = parser.parse_args()
    repeat = 1 if args.quick else args.repeat
    workloads = [
        ("ping-pong", 2, ping_pong, 20_000 if args.quick else 100_000),
        ("ring", 1024, ring, 20 if args.quick else 100),
    ]
    print(
        f"{'workload':<10} {'messages':>9} {'engine msg/s':>13} {'SimPy msg/s':>12} {'ratio':>6} {'floor msg/s':>12} {'of floor':>9}"
    )
    for name, devices, program, n in workloads:
        best: dict[str, float] = {}
        for _ in range(repeat):  # alternate the sides, so that a busy spell slows them alike
            m1, t1 = timed(engine_run, program, devices, n)
            m2, t2 = timed(simpy_run, name, devices, n)
            m3 = m1
            t3 = m3 / floor_rate(devices, m3)
            assert m1 == m2, (m1, m2)
            for side, t in (("engine", t1), ("simpy", t2), ("floor", t3)):
                best[side] = min(best.get(side, t), t)
        r1, r2, r3 = (m1 / best[s] for s in ("engine", "simpy", "floor"))
        print(
            f"{name:<10} {m1:>9,} {r1:>13,.0f} {r2:>12,.0f} {r1 / r2:>5.2f}x {r3:>12,.0f} {r1 / r3:>8.0%}", flush=True
        )
    print("\nhost bytes a finished metadata-only ring pass keeps per message (target: at most 120)")
    for devices in (512, 1024):
        rounds = 20 if args.quick else 100
        print(
            f"  ring pass, {devices:>5} devices, {devices * rounds:>7,} messages: {kept_bytes_per_message(devices, rounds):6.1f} bytes"
        )


if __name__ == "__main__":
    main()
