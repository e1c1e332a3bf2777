"""Exports and figures of a five-million-message run: Chrome trace and timeline, in seconds.

The run: a ring all-reduce over 1,584 devices, 5,013,936 messages and 2.5 million reduction ops,
metadata only. Printed: the simulation's time, then the Chrome Trace export's (written as it is
made, each device's tracks thinned to fit a million events: simulator/views/plot/chrome_thin.py), its
file size and event count, and the timeline figure's (a pixel row per device: simulator/views/plot/busy.py),
with the host's peak memory after each. Before the columnar trace the same export took 1,019 s and
13.4 GiB and kept 27 events.

Run: python benchmarks/export_scale.py [--devices N] [--out DIR]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

from simulator import World
from simulator.views.plot.busy import plot_busy
from simulator.views.plot.chrome_trace import write_chrome_trace
from simulator.views.plot.style import save_figure


def program(dev, n):
    return dev.all_reduce(np.full(n, float(dev.rank), np.float32))


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=1584)
    parser.add_argument("--out", help="folder for the trace and the figure (default: a temporary one)")
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp())
    p = args.devices
    t0 = time.perf_counter()
    run = World(p, keep_payloads=False).run(program, p)
    print(
        f"simulated {len(run.trace.messages):,} messages in {time.perf_counter() - t0:.1f} s; peak {peak_mb():.0f} MB"
    )
    t0 = time.perf_counter()
    info = write_chrome_trace(run, out / "ring.trace.json")
    size = info.path.stat().st_size / 1e6
    print(
        f"Chrome trace: {time.perf_counter() - t0:.1f} s, {info.events:,} events (the run has about "
        f"{info.run_events:,}), {size:.0f} MB; peak {peak_mb():.0f} MB"
    )
    t0 = time.perf_counter()
    fig = plot_busy(run, title=f"Ring all-reduce over {p:,} devices")
    save_figure(fig, out / "ring_timeline", formats=("png",))
    print(f"timeline figure: {time.perf_counter() - t0:.1f} s; peak {peak_mb():.0f} MB ({out})")


if __name__ == "__main__":
    main()
