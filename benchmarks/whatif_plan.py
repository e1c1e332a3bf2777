"""How fast the what-if plans: the two steps issue 27 names, and the whole validation, timed with the machine's load.

- 1T parameters (Narayanan et al. 2021's largest row: tp 8 x pp 64 x dp 6 = 3,072 A100s, 512 microbatches of one
  sequence per pipeline, full recomputation);
- GPT-3 175B on 4,096 H100s (tp 8 x pp 16 x dp 32, 16 microbatches per pipeline, as ``whatif_gpt3.py`` runs
  it with every device simulated);
- ``validate()``: the 18 published rows.

One device per pipeline rank is simulated and stands for its replicas and tensor-parallel ranks, so a step
costs what its pipeline's messages and actions cost, not what its device count would. Each is run
``--repeats`` times in this process; printed: the wall time of each, the load average before and after (other
work shares the machine), and the simulated step. Target (issue 27): each step under 60 s on the 2-core
development machine.

Run: python benchmarks/whatif_plan.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from simulator.parallel.whatif import TrainingSetup, named_model, whatif
    from simulator.parallel.whatif.tables import NARAYANAN_2021
    from simulator.parallel.whatif.validate import validate

    cases = [
        (
            "1T, tp 8 x pp 64 x dp 6 = 3,072 A100s, 512 microbatches",
            lambda: whatif(
                named_model("megatron-1t"),
                TrainingSetup(tp=8, pp=64, dp=6, global_batch=3072, **NARAYANAN_2021),
                "dgx-a100",
            ),
        ),
        (
            "GPT-3 175B, tp 8 x pp 16 x dp 32 = 4,096 H100s, 16 microbatches",
            lambda: whatif(named_model("gpt3-175b"), TrainingSetup(tp=8, pp=16, dp=32, global_batch=512), "dgx-h100"),
        ),
        ("validate(): 18 published rows", validate),
    ]
    print(f"{'case':<66} {'wall s':>8} {'load before/after':>18} {'simulated':>12}")
    for label, run in cases:
        for _ in range(args.repeats):
            before = os.getloadavg()[0]
            t0 = time.perf_counter()
            out = run()
            wall = time.perf_counter() - t0
            after = os.getloadavg()[0]
            simulated = f"{out.step_seconds:.2f} s step" if hasattr(out, "step_seconds") else f"{len(out)} rows"
            print(f"{label:<66} {wall:>8.2f} {before:>8.2f} / {after:<7.2f} {simulated:>12}", flush=True)
    print(f"cores: {os.cpu_count()}; target: each step under 60 s")


if __name__ == "__main__":
    main()
