"""NVIDIA aiconfigurator's H100 table of PyTorch products by shape, held against what H100 is priced from.

H100 prices its 16-bit products from Vidur's profiles of models' layers (``simulator/cost/products.py``), at most
4,096 rows. aiconfigurator (github.com/ai-dynamo/aiconfigurator) publishes, for SGLang 0.5.9 on an "NVIDIA H100
80GB HBM3", the time of ``torch.nn.functional.linear`` on random normal operands at 1 to 32,768 rows and 32 to
65,536 columns and reduction lengths (aic-core/src/aiconfigurator_core/systems/data/h100_sxm/gemm/sglang/0.5.9/
gemm_perf.parquet; collector/sglang/collect_gemm.py as of the collecting commit 2d9299bbe: six operand pairs
replayed in one CUDA graph, 3 warm-ups and 6 runs, the time per product). This script checks that table against
the anchors (the brute-force BF16 maximum on an H100 SXM, 794.5 TFLOP/s; XLA's looped table ``H100_BF16``) and
against the profiles priced (``H100_FP16_TFLOPS``; A100's, ``A100_FP16_TFLOPS``, against the same harness's
A100-SXM4-80GB table), and prints how its rates move past 4,096 rows. A diagnostic:
nothing is fed back (docs/whatif.md, Matrix products).

Run: python benchmarks/whatif_aic_h100.py PATH/TO/aiconfigurator  (needs pyarrow, which the project does not)
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from simulator.cost.products import A100_FP16_TFLOPS, GRID, H100_BF16, H100_FP16_TFLOPS

TABLE = "aic-core/src/aiconfigurator_core/systems/data/{gpu}/gemm/sglang/0.5.9/gemm_perf.parquet"
MAMF_H100_BF16 = 794.5


def rates(checkout: Path, gpu: str = "h100_sxm") -> dict[tuple[int, int, int], float]:
    """TFLOP/s of each 16-bit (rows, n, k) the table of ``gpu`` holds."""
    import pyarrow.parquet as pq  # only this diagnostic needs it

    d = pq.read_table(checkout / TABLE.format(gpu=gpu)).to_pydict()
    cols = zip(d["gemm_dtype"], d["m"], d["n"], d["k"], d["latency"], strict=True)
    return {(m, n, k): 2 * m * n * k / (ms * 1e-3) / 1e12 for dtype, m, n, k, ms in cols if dtype == "bfloat16"}


def spread(values: list[float]) -> str:
    v = sorted(values)
    return f"{statistics.median(v):.2f} ({v[len(v) // 10]:.2f}-{v[(9 * len(v)) // 10]:.2f}, {len(v)} products)"


def main(checkout: Path) -> None:
    t = rates(checkout)
    best = max(t, key=t.get)
    print(f"16-bit products: {len(t)}; fastest {t[best]:.0f} TFLOP/s at {best}; above {MAMF_H100_BF16}: "
          f"{sum(r > MAMF_H100_BF16 for r in t.values())}")  # fmt: skip
    print("squares:", ", ".join(f"{s}^3 {t[(s, s, s)]:.0f}" for s in (2048, 4096, 8192, 16384)))
    print("\nover XLA's looped table at its own points, n and k of 1,024 to 4,096 (median, p10-p90):")
    for m in (1024, 2048, 4096, 8192, 16384):
        print(
            f"  {m:6d} rows: "
            + spread([t[(m, n, k)] / (H100_BF16.at(m, n, k) / 1e12) for n in GRID[2:] for k in GRID[2:]])
        )
    same = [
        v / t[(m, n, k)] for (n, k), pts in H100_FP16_TFLOPS.items() for m, v in pts if m >= 1024 and (m, n, k) in t
    ]
    print("\nthe priced profiles over this table at the same shapes, 1,024 rows or more: " + spread(same))
    a100 = rates(checkout, "a100_sxm")
    same = [
        v / a100[(m, n, k)]
        for (n, k), pts in A100_FP16_TFLOPS.items()
        for m, v in pts
        if m >= 1024 and (m, n, k) in a100
    ]
    print(
        f"on A100 (fastest {max(a100.values()):.1f}), Vidur's A100 profiles over the same harness's table: "
        + spread(same)
    )
    print("\nrate at rows over rate at 4,096 rows, n and k of 1,024 to 16,384:")
    sizes = (1024, 2048, 4096, 8192, 16384)
    for m in (8192, 16384, 32768):
        print(f"  {m:6d} rows: " + spread([t[(m, n, k)] / t[(4096, n, k)] for n in sizes for k in sizes]))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]))
