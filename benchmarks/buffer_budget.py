"""How soon the byte budget stops a sender that never waits: 10,000 eager sends of a writable 8 MB array.

Device 0 sends the same writable array 10,000 times (every send copies it) and device 1 receives them,
after device 0 has finished: eager sends return at once, so device 0 runs to the end first. Without a
bound the copies filled memory (80 GB; under a 6 GiB cap the run died with MemoryError after up to 84 s).
``World.max_buffered_bytes`` (default 512 MiB, or a quarter of the machine's memory if less) ends the run
with a BufferLimitError instead, once the copies held pass it. Printed: seconds to the error and its first
line, with keep_payloads on (the trace keeps every copy) and off (copies wait in the mailbox), with
the machine's load (copying 512 MiB takes seconds on a busy machine; most of it is the first touch of
fresh pages).

Then a message whose copy alone passes the budget, a ``np.broadcast_to`` view of 8 bytes standing for 512 MiB
under a 1 MiB budget and for 8 GiB under the default one: weighed before it is copied, so refused at once with
the budget's error (it was copied for 16.7 s and then refused, and the 8 GiB one ended in a raw MemoryError).
Printed: CPU seconds to the error, median of ``--repeat`` (min to max), and the first words of the error.

Run: python benchmarks/buffer_budget.py [--repeat N] [--sends N] [--mb N]
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import time

import numpy as np

from simulator import World
from simulator.core.errors import BufferLimitError


def flood(dev, sends: int, mb: int) -> None:
    x = np.ones(mb * 10**6 // 8)  # writable: every send copies it
    for _ in range(sends):
        if dev.rank == 0:
            dev.send(x, dst=1)
        else:
            dev.recv(src=0)


def send_view(dev, elements: int) -> None:
    if dev.rank == 0:
        dev.send(np.broadcast_to(np.float64(1.0), (elements,)), dst=1)
    else:
        dev.recv(src=0)


def views(repeat: int) -> None:
    for elements, budget in ((64 << 20, 1 << 20), (1 << 30, None)):
        times, said = [], ""
        for _ in range(repeat):
            t0 = time.process_time()
            try:
                World(2, max_buffered_bytes=budget).run(send_view, elements)
                said = "finished (no error)"
            except (BufferLimitError, MemoryError) as exc:
                said = f"{type(exc).__name__}: {str(exc).split(';')[0][:100]}"
            times.append(time.process_time() - t0)
        times.sort()
        print(
            f"a view of {elements * 8 >> 20:,} MiB: {times[len(times) // 2]:.4f} s CPU ({times[0]:.4f} to {times[-1]:.4f}); {said}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sends", type=int, default=10_000)
    parser.add_argument("--mb", type=int, default=8)
    args = parser.parse_args()
    print(
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; budget {World(2).max_buffered_bytes:,} bytes"
    )
    for keep in (True, False):
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            try:
                World(2, keep_payloads=keep).run(flood, args.sends, args.mb)
                said = "finished (no error)"
            except BufferLimitError as exc:
                said = str(exc).split(";")[0][:110]
            seconds = time.perf_counter() - t0
            gc.collect()  # the failed run's copies, before the next run (which pauses the collector)
            print(f"keep_payloads={keep!s:<5}  {seconds:5.2f} s  {said}")
    views(args.repeat)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"peak memory {peak:.2f} GiB; load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
