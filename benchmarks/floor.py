"""The floor: what one message costs at the least in this design, measured on this machine.

Every message in the engine ends, in the worst case, with the receiver being woken: a heap push
(when the message will arrive), a heap pop (the scheduler picks the earliest device) and a greenlet
switch (to that device). This script does only that, in a loop, with nothing recorded: N greenlets
pass a token round a ring (N = 2 is ping-pong), each hop one ``heappush``, one ``heappop`` and one
``switch``. No engine can do a blocking message in this design for less; the other benchmarks print
their rate beside this one, so "x% of the floor" can be read off directly.

Run: python benchmarks/floor.py [--messages N]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from heapq import heappop, heappush

from greenlet import getcurrent, greenlet


def floor_rate(devices: int, messages: int, clock: Callable[[], float] = time.perf_counter) -> float:
    """Messages per second of the bare loop: per message one heap push, one heap pop, one switch (timed by
    ``clock``: wall time, or ``time.process_time`` for CPU time beside other CPU-timed figures)."""
    heap: list[tuple[float, int, int]] = []
    greenlets: list[greenlet] = []
    hops = [0]
    main = getcurrent()

    def body(rank: int) -> None:
        main.switch()  # started from the main greenlet (nested starts would nest stacks), then wait
        nxt = (rank + 1) % devices
        t = 0.0
        seq = 0
        while hops[0] < messages:
            hops[0] += 1
            t += 1e-6
            seq += 1
            heappush(heap, (t, seq, nxt))  # the receiver is woken when the message arrives
            _, _, r = heappop(heap)  # the scheduler picks the earliest device
            greenlets[r].switch()  # ... and resumes it
        main.switch()

    greenlets.extend(greenlet(lambda r=r: body(r), parent=main) for r in range(devices))
    for g in greenlets:
        g.switch()
    t0 = clock()
    greenlets[0].switch()
    dt = clock() - t0
    return hops[0] / dt


def best_floor(devices: int, messages: int, repeat: int = 3) -> float:
    """The best of ``repeat`` runs (a busy machine only ever slows the loop down)."""
    return max(floor_rate(devices, messages) for _ in range(repeat))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    args = parser.parse_args()
    for devices in (2, 1024):
        print(f"floor, {devices:>5} devices: {best_floor(devices, args.messages):>12,.0f} messages/s", flush=True)


if __name__ == "__main__":
    main()
