"""How fast the message-by-message ring all-reduce could be at best: its bare per-message work against SimPy.

The message path (``World(keep_payloads=False, book_collectives=False)``) runs a ring all-reduce's steps in
``simulator.core.lanes.RingLane.pass_along``. Some of what a step does no design of that path can drop, because
the step's result and the trace are made of it:

  the reduction    a reduce-scatter step adds the part it received into its block (``np.add``, the call SimPy's
                   model makes too) and seals the sum read-only (``setflags`` and a view: a sent value must not
                   change after the send)
  the rows         every message, receive and reduction is one packed row appended to the trace (struct
                   ``pack`` and ``bytearray.extend``), and one code appended to the event log
  the mailbox      each message goes through its channel's queue (``deque.append`` and ``popleft``)

This script does only that, for every message of a ring all-reduce of p float32 over p devices, one device
after another (no clock, no link, no check, no scheduling, no greenlet), and runs SimPy's model
(benchmarks/simpy_peer.py, as its users run it) in the same process, in turns. SimPy's time over the bare work
is the most the message path could reach against SimPy if everything else it does cost nothing; issue 41
asks for 8x. The engine's own message path is timed beside them.

Run: python benchmarks/message_path_bound.py [--devices N ...] [--rounds R]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections import deque

import numpy as np
import simpy_peer
from sidebyside import cpu_timed, load, loads, spread

from simulator import CostModel, World
from simulator.core.rows import EV_RECV, EV_SEND, MSG, OP, RECV
from simulator.tensors.placements import chunk_bounds

COST = CostModel()


def bare_work(p: int, n: int) -> int:
    """The irreducible work of a ring all-reduce's messages (see the module); returns the messages."""
    msgs, recvs, ops, log = bytearray(), bytearray(), bytearray(), bytearray()
    pack_msg, pack_recv, pack_op = MSG.pack, RECV.pack, OP.pack
    bounds = chunk_bounds(n, p)
    mailbox: deque = deque()
    row = 0
    for rank in range(p):
        flat = np.full(n, float(rank), np.float32)
        value = flat[bounds[0] : bounds[1]]
        for step in range(2 * (p - 1)):
            mailbox.append((row, value))
            msgs.extend(pack_msg(rank, rank, 1, 0, 0, step, 0, 0.0, 0.0, 0.0))
            log.append(EV_SEND)
            got_row, got = mailbox.popleft()
            recvs.extend(pack_recv(got_row, 0.0))
            log.append(EV_RECV)
            row += 1
            if step < p - 1:
                j = step % p
                out = np.add(got, flat[bounds[j] : bounds[j + 1]])
                out.setflags(write=False)
                value = out.view()
                ops.extend(pack_op(0, rank, 0, 0, 0.0, 0.0, out.size, 0))
            else:
                value = got
    return row


def engine_message_path(p: int, n: int) -> int:
    world = World(p, cost=COST, keep_payloads=False, book_collectives=False)
    world.run(lambda dev, m: dev.all_reduce(np.full(m, float(dev.rank), np.float32)), n)
    return 2 * p * (p - 1)


def simpy_model(p: int, n: int) -> int:
    return simpy_peer.ring_all_reduce(COST, p, n)[0]


SIDES = {"bare work": bare_work, "message path": engine_message_path, "SimPy": simpy_model}


def measure(p: int, rounds: int) -> None:
    for fn in SIDES.values():  # one untimed round: what a process pays the first time only
        fn(p, p)
    times: dict[str, list[float]] = {name: [] for name in SIDES}
    before, after = [], []
    for _ in range(rounds):
        before.append(load())
        for name, fn in SIDES.items():
            gc.collect()
            messages, seconds = cpu_timed(fn, p, p)
            times[name].append(seconds)
        after.append(load())
    us = {name: [1e6 * t / messages for t in ts] for name, ts in times.items()}
    print(f"{p} devices, {messages:,} messages, {rounds} rounds (CPU us a message: median (min to max))")
    for name in SIDES:
        print(f"  {name:<13} {spread(us[name], '{:.2f}')} us")
    ceiling = [s / b for s, b in zip(times["SimPy"], times["bare work"], strict=True)]
    reached = [s / m for s, m in zip(times["SimPy"], times["message path"], strict=True)]
    print(f"  SimPy / bare work: {spread(ceiling)}x (the most the message path could reach; target 8x)")
    print(f"  SimPy / message path: {spread(reached)}x")
    rest = statistics.median(us["message path"]) - statistics.median(us["bare work"])
    print(f"  the message path's work beyond the bare work: {rest:.2f} us a message")
    print(f"  {loads(before, after)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, nargs="+", default=[64, 256], help="ring sizes (default: 64 256)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds per size (default: 5)")
    args = ap.parse_args()
    for p in args.devices:
        measure(p, args.rounds)


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"({time.perf_counter() - t0:.0f} s)")
