"""How cheap can a ping-pong message be in this design? The engine beside stripped-down models of it.

In ping-pong every receive blocks, so every message ends with the receiver being resumed: one greenlet
switch, which no engine of greenlet devices avoids. The models below run the benchmark's own program
(``engine_throughput.ping_pong``) on two greenlets started from the scheduler, as the engine's devices are,
each doing less than the engine does:

  handover   send does nothing; recv switches to the other device: the program's loop and the switch
  minimal    send books the link (alpha-beta, as the engine does) and hands the message to the receive
             posted for it, or queues it; recv takes a queued message, or posts itself and switches.
             Nothing is checked and nothing recorded
  recorded   minimal, plus what the engine writes per message: a packed message row, a packed receive
             row, and a log byte for each of the two events

No engine that books links and matches messages in Python, with a switch per blocking receive, can cost
less than ``minimal``; "of the floor" is the floor's time (``floor.py``) over each one's, as in
``engine_throughput.py``. Each round runs every side in turn, in CPU seconds; figures are medians of the
rounds with their spread, and the load.

Run: python benchmarks/pingpong_ceiling.py [--rounds R] [--messages N]
"""

from __future__ import annotations

import argparse
import struct
import time
from collections import deque

import numpy as np
import simpy_peer
from engine_throughput import COST, engine_run, ping_pong
from floor import floor_rate
from greenlet import getcurrent, greenlet
from sidebyside import cpu_timed, load, loads, spread

MSG, RECV = struct.Struct("<HHiiiiiddd"), struct.Struct("<id")  # the engine's row layouts (core/rows.py)
INV_BW, LATENCY = 1 / COST.bandwidth, COST.latency


class Handover:
    """A device whose receive only switches to the other device."""

    def __init__(self, rank: int, devices: list) -> None:
        self.rank, self.devices, self.sent = rank, devices, 0

    def send(self, value, dst: int) -> None:
        self.sent += 1

    def recv(self, src: int):
        self.devices[src].greenlet.switch()
        return self.devices[src].value


class Minimal:
    """A device that books its links and matches messages, and records them when ``record``."""

    def __init__(self, rank: int, devices: list, rows: tuple[bytearray, bytearray, bytearray] | None) -> None:
        self.rank, self.devices, self.sent, self.clock = rank, devices, 0, 0.0
        self.link_free: dict[int, float] = {}
        self.mail = {src: deque() for src in range(2)}  # messages that came before their receive
        self.waiting: int | tuple | None = None  # blocked in recv: the source, then the message it was handed
        self.rows = rows

    def send(self, value, dst: int) -> None:
        t = self.clock
        start = self.link_free.get(dst, 0.0)
        if start < t:
            start = t
        self.link_free[dst] = done = start + value.nbytes * INV_BW
        arrive = done + LATENCY
        if self.rows is not None:
            self.rows[0].extend(MSG.pack(self.rank, dst, 0, 0, -1, -1, -1, t, start, arrive))
            self.rows[2].append(0)
        message = (self.sent, value, arrive)
        self.sent += 1
        peer = self.devices[dst]
        if peer.waiting == self.rank:
            peer.waiting = message  # handed to the posted receive; the receiver runs next
        else:
            peer.mail[self.rank].append(message)

    def recv(self, src: int):
        queued = self.mail[src]
        if queued:
            row, value, arrive = queued.popleft()
        else:
            self.waiting = src
            self.devices[src].greenlet.switch()
            row, value, arrive = self.waiting
            self.waiting = None
        if arrive > self.clock:
            self.clock = arrive
        if self.rows is not None:
            self.rows[1].extend(RECV.pack(row, self.clock))
            self.rows[2].append(1)
        return value


def model_run(kind: str, n: int) -> int:
    """``ping_pong`` on two model devices; returns the messages sent."""
    main = getcurrent()
    devices: list = []
    rows = (bytearray(), bytearray(), bytearray()) if kind == "recorded" else None
    for rank in range(2):
        dev = Handover(rank, devices) if kind == "handover" else Minimal(rank, devices, rows)
        dev.value = np.zeros(1)

        def body(dev=dev) -> None:
            main.switch()  # started from the scheduler, as the engine's devices are
            ping_pong(dev, n)
            main.switch()

        dev.greenlet = greenlet(body, parent=main)
        devices.append(dev)
    for dev in devices:
        dev.greenlet.switch()
    devices[0].greenlet.switch()  # returns when device 0's program ends (device 1's last send came before)
    return sum(dev.sent for dev in devices)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of side-by-side runs; figures are medians")
    parser.add_argument("--messages", type=int, default=200_000, help="messages per run (half each way)")
    args = parser.parse_args()
    n = args.messages // 2
    sides = ["engine", "recorded", "minimal", "handover", "simpy"]
    per_msg: dict[str, list[float]] = {s: [] for s in sides + ["floor"]}
    before, after = [], []
    for _ in range(args.rounds):
        before.append(load())
        for side in sides:
            if side == "engine":
                m, t = cpu_timed(engine_run, ping_pong, 2, n)
            elif side == "simpy":
                m, t = cpu_timed(simpy_peer.ping_pong, COST, n)
            else:
                m, t = cpu_timed(model_run, side, n)
            assert abs(m - 2 * n) <= 1, (side, m)  # (the handover's first receive switches before a send)
            per_msg[side].append(t / m * 1e6)
        per_msg["floor"].append(1e6 / floor_rate(2, 2 * n, time.process_time))
        after.append(load())
    print(f"ping-pong, 2 devices, {2 * n:,} messages; CPU us a message, median of {args.rounds} rounds (min to max)")
    print(f"  {'':<9} {'us a message':>22}   {'of the floor':>22}   {'x SimPy (Store)':>22}")
    for side in sides[:-1] + ["floor"]:
        shares = [f / s for f, s in zip(per_msg["floor"], per_msg[side])]
        vs_simpy = [p / s for p, s in zip(per_msg["simpy"], per_msg[side])]
        print(f"  {side:<9} {spread(per_msg[side]):>22}   {spread(shares):>22}   {spread(vs_simpy):>22}")
    print(f"  {'SimPy':<9} {spread(per_msg['simpy']):>22}")
    print("the goals of engine_throughput.py for the engine: 0.5 of the floor, 5x SimPy")
    print(loads(before, after + [load()]))


if __name__ == "__main__":
    main()
