"""The 16-device 3-D step with one BLAS thread (the default while devices run) and with BLAS's own threads.

The step is ``scale_3d_step.py --quick``'s: dp x pp x tp = 2 x 4 x 2, an MLP of 9 layers 256 wide, 8
microbatches per replica, 1F1B, metadata only. ``World(blas_threads=1)`` (the default) holds BLAS to one
thread while the devices run; ``blas_threads=None`` leaves it as it is (OpenBLAS starts one per core, and
its threads spin waiting for work). Each setting runs ``--repeat`` times, alternating; printed: every wall
time, the best of each, and the machine's load before and after (the difference grows with the load).

Run: python benchmarks/blas_threads.py [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import time

from threadpoolctl import threadpool_info

from simulator import CostModel
from simulator.parallel.compose import Parallel3D
from simulator.parallel.mlp import MLP
from simulator.tensors.mesh import DeviceMesh


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    mesh = DeviceMesh.grid((2, 4, 2), ("dp", "pp", "tp"))
    mlp = MLP((256,) * 9)
    params = mlp.init(seed=0)
    x, t = mlp.data(2 * 8 * 16, seed=1)
    job = Parallel3D(mlp, mesh, "1f1b", microbatches=8)
    cost = CostModel(latency=2e-6, bandwidth=50e9, flops=1e12)
    own = [(i["internal_api"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; BLAS as loaded: {own}")
    walls: dict[str, list[float]] = {"1": [], "None": []}
    for _ in range(args.repeat):
        for threads in (1, None):
            t0 = time.perf_counter()
            job.world(cost=cost, keep_payloads=False, blas_threads=threads).run(job, params, x, t)
            walls[str(threads)].append(time.perf_counter() - t0)
            print(f"blas_threads={threads!s:<5} {walls[str(threads)][-1]:7.2f} s")
    print(f"best: one thread {min(walls['1']):.2f} s, BLAS's own {min(walls['None']):.2f} s; ", end="")
    print(f"load average now {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
