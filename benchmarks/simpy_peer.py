"""The independent SimPy models the engine is measured against, written in SimPy's fastest idiom for messages.

A message is one item in the receiver's ``simpy.Store``: the sender books the link (alpha-beta: the
message starts when the link is free, takes nbytes / B on it and alpha more to arrive), copies the payload
(each device has private memory), records the message's metadata, and puts ``(arrival, payload)`` into the
Store at once; the receiver gets the item and, if it has not arrived yet, waits until it does. (An earlier
model started a process per message that waited the delay and then put the payload, SimPy's "Event
Latency" example: 1.55 to 1.8 times slower than this one.) Reductions are a NumPy operation plus a timeout
for their compute time, recorded like messages. Both sides must agree on every result and end time.
"""

from __future__ import annotations

import numpy as np
import simpy

from simulator import CostModel
from simulator.tensors.placements import chunk_bounds


class Network:
    """Stores by (src, dst), alpha-beta link booking and a metadata log."""

    def __init__(self, env: simpy.Environment, cost: CostModel) -> None:
        self.env, self.cost = env, cost
        self.stores: dict[tuple[int, int], simpy.Store] = {}
        self.free: dict[tuple[int, int], float] = {}
        self.log: list[tuple] = []

    def store(self, src: int, dst: int) -> simpy.Store:
        s = self.stores.get((src, dst))
        if s is None:
            s = self.stores[(src, dst)] = simpy.Store(self.env)
        return s

    def put(self, src: int, dst: int, value, tag: int = 0, step: int = -1, chunk: int = -1) -> None:
        payload = np.array(value)  # the receiver gets its own copy
        payload.setflags(write=False)
        now = self.env.now
        start = max(now, self.free.get((src, dst), 0.0))
        done = start + payload.nbytes / self.cost.bandwidth
        self.free[(src, dst)] = done
        arrive = done + self.cost.latency
        self.log.append((src, dst, tag, payload.shape, payload.dtype, payload.nbytes, step, chunk, now, start, arrive))
        self.store(src, dst).put((arrive, payload))

    def get(self, src: int, dst: int):
        """A process's receive: ``x = yield from net.get(src, dst)``."""
        arrive, payload = yield self.store(src, dst).get()
        if arrive > self.env.now:
            yield self.env.timeout(arrive - self.env.now)
        return payload


def ping_pong(cost: CostModel, n: int) -> int:
    """Two devices bounce one 8-byte array n times each way; returns the messages."""
    env = simpy.Environment()
    net = Network(env, cost)

    def device(rank: int):
        x = np.zeros(1)
        for _ in range(n):
            if rank == 0:
                net.put(0, 1, x)
                x = yield from net.get(1, 0)
            else:
                x = yield from net.get(0, 1)
                net.put(1, 0, x)

    for r in range(2):
        env.process(device(r))
    env.run()
    return len(net.log)


def ring_pass(cost: CostModel, p: int, rounds: int) -> int:
    """p devices pass an 8-byte array to the next, round after round; returns the messages."""
    env = simpy.Environment()
    net = Network(env, cost)

    def device(rank: int):
        x = np.zeros(1)
        nxt, prv = (rank + 1) % p, (rank - 1) % p
        for _ in range(rounds):
            net.put(rank, nxt, x)
            x = yield from net.get(prv, rank)

    for r in range(p):
        env.process(device(r))
    env.run()
    return len(net.log)


def ring_all_reduce(cost: CostModel, p: int, n: int) -> tuple[int, float, np.ndarray]:
    """A ring all-reduce of n float32 over p devices (reduce-scatter ring, then all-gather ring), as
    ``simulator.collectives.ring`` does it; returns the messages, the simulated end time and device 0's result."""
    env = simpy.Environment()
    net = Network(env, cost)
    ops: list[tuple] = []
    results: list = [None] * p
    bounds = chunk_bounds(n, p)

    def device(rank: int):
        x = np.full(n, float(rank), np.float32)
        chunks = [x[bounds[j] : bounds[j + 1]] for j in range(p)]
        right, left = (rank + 1) % p, (rank - 1) % p
        for s in range(p - 1):  # reduce-scatter
            out_j, in_j = (rank - s - 1) % p, (rank - s - 2) % p
            net.put(rank, right, chunks[out_j], 1, s, out_j)
            got = yield from net.get(left, rank)
            chunks[in_j] = np.add(got, chunks[in_j])
            seconds = cost.compute_time(chunks[in_j].size)
            ops.append((rank, "all_reduce.sum", env.now, env.now + seconds, chunks[in_j].size))
            yield env.timeout(seconds)
        for s in range(p - 1):  # all-gather
            out_j, in_j = (rank - s) % p, (rank - s - 1) % p
            net.put(rank, right, chunks[out_j], 1, p - 1 + s, out_j)
            chunks[in_j] = yield from net.get(left, rank)
        results[rank] = np.concatenate(chunks)

    for r in range(p):
        env.process(device(r))
    env.run()
    return len(net.log), env.now, results[0]
