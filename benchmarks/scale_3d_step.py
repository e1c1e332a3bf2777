"""One training step of a 256-device 3-D parallel configuration, with a metadata-only trace.

The mesh is dp x pp x tp = 8 x 8 x 4: eight replicas, each an eight-stage 1F1B pipeline, each stage
a pair of MLP layers split over four devices (Megatron column/row). Every device runs its real rank
program: real NumPy arithmetic on its shards, every message through the engine, tensor-parallel
all-reduces, pipeline sends, and the overlapped gradient all-reduce across replicas. The trace keeps
metadata only (no payloads), as a large run would.

Printed: the wall time of the simulation, the host process's peak resident memory (and how much the
run added to it), the size of the trace, the simulated step time and busy fraction, and the
simulated peak memory of the fullest and emptiest device.

Run: python benchmarks/scale_3d_step.py [--quick]   (--quick: 2 x 4 x 2 = 16 devices)
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

from simulator import CostModel
from simulator.parallel.compose import Parallel3D
from simulator.parallel.measure import bubble
from simulator.parallel.mlp import MLP
from simulator.tensors.mesh import DeviceMesh
from simulator.views.memory import memory_timeline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 devices instead of 256")
    args = parser.parse_args()
    dp, pp, tp = (2, 4, 2) if args.quick else (8, 8, 4)
    microbatches, width, rows_per_microbatch = 8, 256, 16
    mesh = DeviceMesh.grid((dp, pp, tp), ("dp", "pp", "tp"))
    mlp = MLP((width,) * (2 * pp + 1))
    params = mlp.init(seed=0)
    x, t = mlp.data(dp * microbatches * rows_per_microbatch, seed=1)
    job = Parallel3D(mlp, mesh, "1f1b", microbatches=microbatches)
    cost = CostModel(latency=2e-6, bandwidth=50e9, flops=1e12)  # a modest device: compute and links both show

    print(f"mesh dp x pp x tp = {dp} x {pp} x {tp} = {mesh.size()} devices; MLP of {mlp.layers} layers, {width} wide;")
    print(f"{microbatches} microbatches of {rows_per_microbatch} rows per replica; 1F1B; metadata-only trace")
    before = peak_rss()
    t0 = time.perf_counter()
    result = job.world(cost=cost, keep_payloads=False).run(job, params, x, t)
    wall = time.perf_counter() - t0
    after = peak_rss()

    trace = result.trace
    mem = memory_timeline(trace)
    peaks = [mem.peak(r) for r in range(trace.world_size)]
    b = bubble(trace)
    print(f"wall time              {wall:8.2f} s")
    print(f"host peak memory       {after / 1e6:8.1f} MB resident (the run added {(after - before) / 1e6:.1f} MB)")
    print(f"trace                  {len(trace.events):8d} events, {len(trace.messages)} messages, {len(trace.ops)} ops")
    print(f"events per second      {len(trace.events) / wall:8.0f}")
    print(f"simulated step         {result.time * 1e3:8.3f} ms, devices busy {100 * (1 - b.mean_fraction):.0f}%")
    full, empty = peaks.index(max(peaks)), peaks.index(min(peaks))
    print(
        f"simulated peak memory  {max(peaks) / 1e6:8.2f} MB on device {full} (dp, pp, tp = {mesh.coordinate(full)}), "
        f"{min(peaks) / 1e6:.2f} MB on device {empty} ({mesh.coordinate(empty)})"
    )


def peak_rss() -> int:
    """The process's peak resident memory so far, in bytes (Linux reports kB, macOS bytes)."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


if __name__ == "__main__":
    main()
