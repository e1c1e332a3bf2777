"""The torch backend's all-reduce against calling torch.distributed directly, 64 MiB on gloo.

All run in the same rank processes, in alternating order, each preceded by a barrier:
``dev.all_reduce(x)`` (the simulator's API: NumPy in, a new read-only NumPy array out, recorded in
the trace as one op); ``dev.all_reduce(y, in_place=True)`` on an array y given up to it (the result
lands in y, as torch's does in its tensor; y is made beforehand, outside the timing, as the
tensor of the next call is); ``torch.distributed.all_reduce(t)`` on a tensor made once beforehand
(in place, nothing recorded: the strict baseline); the same on a copy of x into a tensor made once
(what a direct caller who must keep x pays at least: the functional call's price over the in-place
one is this one copy); and on a fresh copy of x. Each round's time is the slowest rank's; the figures
are medians, and the ratio is given both as the ratio of the medians and as the median of each round's
ratio (neighbours in time, so a machine whose load drifts affects both alike). The target is at most
1.1 for the in-place call by the median of the rounds' ratios, in every one of ``--runs`` consecutive
runs (fresh ranks each); the functional call's ratio is printed beside it.

    python benchmarks/torch_allreduce_overhead.py [--ranks 2] [--mib 64] [--repeats 15] [--runs 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def race(dev, nbytes: int, repeats: int) -> dict[str, list[float]]:
    """Rank program: time the backend's all_reduce and torch's, alternating."""
    import torch
    import torch.distributed as dist

    x = np.ones(nbytes // 8)
    direct = torch.from_numpy(np.ones(nbytes // 8))
    kept = torch.empty(nbytes // 8, dtype=torch.float64)
    given: list[np.ndarray] = []  # the next in-place call's array, made before its barrier
    calls = {
        "backend": lambda: dev.all_reduce(x),
        "backend_in_place": lambda: dev.all_reduce(given.pop(), in_place=True),
        "direct": lambda: dist.all_reduce(direct),
        "direct_kept": lambda: dist.all_reduce(kept.copy_(torch.from_numpy(x))),  # keeps x, as the backend does
        "direct_copy": lambda: dist.all_reduce(torch.from_numpy(x).clone()),
    }
    times: dict[str, list[float]] = {k: [] for k in calls}
    out = None
    for i in range(repeats + 1):  # the first round warms up
        for kind in calls if i % 2 else reversed(calls):
            if kind == "backend_in_place":
                given.append(np.ones(nbytes // 8))
            dist.barrier()
            t0 = time.perf_counter()
            result = calls[kind]()
            if i:
                times[kind].append(time.perf_counter() - t0)
            if kind == "backend":
                out, result = result, None
            if kind == "backend_in_place":
                assert result[0] == dev.world_size and not result.flags.writeable  # the sum, in the array given
    assert out[0] == dev.world_size  # the backend's result is the sum
    return times


def one_run(ranks: int, mib: int, repeats: int) -> tuple[float, float]:
    """One run on fresh ranks: prints its figures, returns the in-place and the functional call's ratios to
    torch's in-place all-reduce (medians of the rounds' ratios)."""
    from simulator.real.launch import TorchWorld

    with TorchWorld(ranks, "gloo", timeout=120, keep_payloads=False) as world:
        outputs = world.run(race, mib << 20, repeats).outputs
    # a collective ends when its slowest rank ends: take the max over ranks of each round
    rounds = {k: np.max([o[k] for o in outputs], axis=0) for k in outputs[0]}
    med = {k: float(np.median(v)) for k, v in rounds.items()}

    def paired(kind: str, baseline: str = "direct") -> float:
        # the rounds alternate the order of the calls, so each round's ratio compares neighbours in time
        return float(np.median(rounds[kind] / rounds[baseline]))

    print(f"all_reduce of {mib} MiB float64 on {ranks} gloo ranks, median of {repeats} rounds:")
    print(f"  torch.distributed.all_reduce, in place:            {med['direct'] * 1e3:8.1f} ms")
    print(f"  TorchDevice.all_reduce(in_place=True):             {med['backend_in_place'] * 1e3:8.1f} ms")
    print(f"  torch.distributed.all_reduce on a kept copy:       {med['direct_kept'] * 1e3:8.1f} ms")
    print(f"  torch.distributed.all_reduce on a fresh copy:      {med['direct_copy'] * 1e3:8.1f} ms")
    print(f"  TorchDevice.all_reduce (x kept, a new result):     {med['backend'] * 1e3:8.1f} ms")
    in_place, functional = paired("backend_in_place"), paired("backend")
    print(f"  medians of the rounds' ratios: in place / torch in place {in_place:.3f};")
    print(
        f"  x kept / torch in place {functional:.3f}; x kept / torch on a kept copy {paired('backend', 'direct_kept'):.3f}"
    )
    return in_place, functional


def main() -> None:
    from simulator.calibration.prediction import machine_line, wait_for_quiet

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--runs", type=int, default=3, help="consecutive runs, each on fresh ranks (default: 3)")
    parser.add_argument("--max-wait", type=float, default=600, help="seconds to wait for a quiet machine")
    args = parser.parse_args()
    load = wait_for_quiet(max_wait=args.max_wait)
    runs = [one_run(args.ranks, args.mib, args.repeats) for _ in range(args.runs)]
    ok = "ok" if all(in_place <= 1.1 for in_place, _ in runs) else "OVER 1.1"
    print(f"TorchDevice.all_reduce(in_place=True) / torch in place, each run: {_figures(r[0] for r in runs)}  {ok}")
    print(f"TorchDevice.all_reduce (x kept) / torch in place, each run:      {_figures(r[1] for r in runs)}")
    print(machine_line(load))


def _figures(ratios) -> str:
    return " ".join(f"{r:.3f}" for r in ratios)


if __name__ == "__main__":
    main()
