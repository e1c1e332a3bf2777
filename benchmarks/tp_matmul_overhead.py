"""What the simulation adds to the arithmetic: a column-parallel matmul against one np.matmul.

Y = X @ W with X and W of 4096 x 4096 float32, over 8 simulated devices. The simulated run is
counted whole, from the first message to the assembled result:

  1. device 0 holds X and W; it sends X to every device (Replicate) and each device its 512 columns
     of W (Shard(1)): 7 + 7 messages. X and W are read-only, so their pieces travel without a host
     copy (the simulator copies a payload only when the sender could still change it)
  2. each device computes its 4096 x 512 block of Y (a recorded op)
  3. the blocks are assembled on device 0 (7 messages) and put together

and compared with one ``np.matmul(X, W)`` of the same size, timed in the same process. The check
that the two results agree is outside the timed region. Target: the simulated run takes at most
1.25x the single matmul.

Run: python benchmarks/tp_matmul_overhead.py [--size N] [--devices P] [--repeat R]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from simulator import World
from simulator.parallel import tensor as tp
from simulator.tensors.mesh import DeviceMesh
from simulator.tensors.placements import R, S
from simulator.tensors.redistribute import assemble, distribute
from simulator.tensors.sharded import Layout


def column_parallel_run(dev, X, W):
    """The whole simulated run: distribute, compute the column block, assemble Y on device 0."""
    mesh = DeviceMesh.grid(dev.world_size)
    n = W.shape[1]
    x = distribute(dev, X if dev.rank == 0 else None, Layout(X.shape, mesh, (R,)), 0)
    w = distribute(dev, W if dev.rank == 0 else None, Layout(W.shape, mesh, (S(1),)), 0)
    y = tp.column_parallel(dev, x, w, n, gather=False)
    return assemble(dev, y, Layout((X.shape[0], n), mesh, (S(1),)), 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="take the best of this many runs of each")
    args = parser.parse_args()
    n, p = args.size, args.devices
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, n), dtype=np.float32)
    W = rng.standard_normal((n, n), dtype=np.float32)
    X.setflags(write=False)  # immutable inputs travel as they are: the simulation copies nothing it need not
    W.setflags(write=False)
    world = World(p, keep_payloads=False)

    single = simulated = float("inf")
    for _ in range(args.repeat):  # alternate, so both see the same machine conditions
        t0 = time.perf_counter()
        reference = np.matmul(X, W)
        single = min(single, time.perf_counter() - t0)
        t0 = time.perf_counter()
        result = world.run(column_parallel_run, X, W)
        simulated = min(simulated, time.perf_counter() - t0)
    np.testing.assert_allclose(result.outputs[0], reference, rtol=2e-3, atol=2e-3)
    messages = result.trace.messages
    moved = sum(m.nbytes for m in messages)
    print(f"{n} x {n} float32 matmul, column-parallel over {p} simulated devices (best of {args.repeat})")
    print(f"  one np.matmul            {single:8.3f} s")
    print(
        f"  whole simulated run      {simulated:8.3f} s   ({len(messages)} messages carrying {moved / 2**20:,.0f} MiB)"
    )
    print(f"  ratio                    {simulated / single:8.2f}x   (target: at most 1.25x)")
    print(f"  simulated time           {result.time * 1e3:8.3f} ms under the default cost model")


if __name__ == "__main__":
    main()
