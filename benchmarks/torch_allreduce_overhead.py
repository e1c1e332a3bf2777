"""The torch backend's all-reduce against calling torch.distributed directly, 64 MiB on gloo.

All run in the same rank processes, in alternating order, each preceded by a barrier:
``dev.all_reduce(x)`` (the simulator's API: NumPy in, a new read-only NumPy array out, recorded in
the trace as one op); ``torch.distributed.all_reduce(t)`` on a tensor made once beforehand (in
place, nothing recorded: the strict baseline); and the same on a fresh copy of x (what a direct
caller who must keep x pays). Each round's time is the slowest rank's; the figures are medians, and
the ratio is given both as the ratio of the medians and as the median of each round's ratio
(neighbours in time, so a machine whose load drifts affects both alike). The target is at most 1.1.

    python benchmarks/torch_allreduce_overhead.py [--ranks 2] [--mib 64] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def race(dev, nbytes: int, repeats: int) -> dict[str, list[float]]:
    """Rank program: time the backend's all_reduce and torch's, alternating."""
    import torch
    import torch.distributed as dist

    x = np.ones(nbytes // 8)
    direct = torch.from_numpy(np.ones(nbytes // 8))
    calls = {
        "backend": lambda: dev.all_reduce(x),
        "direct": lambda: dist.all_reduce(direct),
        "direct_copy": lambda: dist.all_reduce(torch.from_numpy(x).clone()),  # keeps x, as the backend does
    }
    times: dict[str, list[float]] = {k: [] for k in calls}
    out = None
    for i in range(repeats + 1):  # the first round warms up
        for kind in calls if i % 2 else reversed(calls):
            dist.barrier()
            t0 = time.perf_counter()
            result = calls[kind]()
            if i:
                times[kind].append(time.perf_counter() - t0)
            if kind == "backend":
                out, result = result, None
    assert out[0] == dev.world_size  # the backend's result is the sum
    return times


def main() -> None:
    from simulator.backends.launch import TorchWorld

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    with TorchWorld(args.ranks, "gloo", timeout=120, keep_payloads=False) as world:
        outputs = world.run(race, args.mib << 20, args.repeats).outputs
    # a collective ends when its slowest rank ends: take the max over ranks of each round
    rounds = {k: np.max([o[k] for o in outputs], axis=0) for k in outputs[0]}
    med = {k: float(np.median(v)) for k, v in rounds.items()}
    # the rounds alternate the order of the calls, so each round's ratio compares neighbours in time
    paired = float(np.median(rounds["backend"] / rounds["direct"]))
    print(f"all_reduce of {args.mib} MiB float64 on {args.ranks} gloo ranks, median of {args.repeats} rounds:")
    print(f"  torch.distributed.all_reduce, in place:        {med['direct'] * 1e3:8.1f} ms")
    print(f"  torch.distributed.all_reduce on a fresh copy:  {med['direct_copy'] * 1e3:8.1f} ms")
    print(f"  TorchDevice.all_reduce (native):               {med['backend'] * 1e3:8.1f} ms")
    print(
        f"  backend / in place: {med['backend'] / med['direct']:.3f} (medians), {paired:.3f} (median of the rounds' ratios)"
    )
    print(f"  backend / fresh copy: {med['backend'] / med['direct_copy']:.3f}")


if __name__ == "__main__":
    main()
    print(f"(machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end)")
