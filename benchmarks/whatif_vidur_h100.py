"""Vidur's H100 profiles read product by product: why the down projections are left out of H100's table.

H100 prices its 16-bit products from Microsoft Vidur's H100 profiles of six models' linear layers
(``simulator/cost/products.py``, [VIDUR-H100]). This script reads those profiles from a checkout of
github.com/microsoft/vidur (commit 7d47513: data/profiling/compute/h100/*/*/mlp.csv) and prints, for each of the
four products a layer makes, how fast it ran at 1,024 rows or more against XLA's looped benchmark at the same
shape (``H100_BF16``) and against the fastest BF16 product a brute-force search found on an H100 SXM (794.5
TFLOP/s). The output product's input is ``torch.randn_like`` in Vidur's profiler (random data, as a
benchmark's); the down projection's is zero, from the profiler's dummy weights. It then rebuilds the table
products.py holds (the query-key-value, output and up products, 256 to 4,096 rows) and says whether it matches.
Nothing here is fitted: it is the eighth pass's check, made rerunnable (docs/whatif.md, Matrix products).

Run: python benchmarks/whatif_vidur_h100.py PATH/TO/vidur  (a second)
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from pathlib import Path

from simulator.cost.achieved import TILE
from simulator.cost.products import H100_BF16, H100_FP16_TFLOPS

PRODUCTS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
KEPT_ROWS = (256, 512, 1024, 2048, 4096)
MAMF_H100_BF16 = 794.5


def tile_share(dim: int) -> float:
    """The share of a dimension's 128-wide output tiles that hold real rows (XLA's grid points fill theirs)."""
    return dim / (TILE * math.ceil(dim / TILE))


def shapes(row: dict[str, str]) -> dict[str, tuple[int, int]]:
    """(n, k) of each product of one profiled layer at its tensor parallelism."""
    tp, width, heads = int(row["num_tensor_parallel_workers"]), int(row["n_embd"]), int(row["n_head"])
    head_dim, kv_heads, mlp = width // heads, int(row["n_kv_head"]), int(row["n_expanded_embd"])
    up = (2 if row["use_gated_mlp"] == "True" else 1) * mlp // tp
    return {
        "attn_pre_proj": ((heads + 2 * kv_heads) * head_dim // tp, width),
        "attn_post_proj": (width, heads * head_dim // tp),
        "mlp_up_proj": (up, width),
        "mlp_down_proj": (width, mlp // tp),
    }


def timed(vidur: Path) -> list[tuple[str, int, int, int, float]]:
    """(product, rows, n, k, TFLOP/s) of every profiled product whose rows are a multiple of 128."""
    out = []
    for path in sorted(vidur.glob("data/profiling/compute/h100/*/*/mlp.csv")):
        with path.open() as f:
            for row in csv.DictReader(f):
                rows = int(row["num_tokens"])
                if rows % 128:
                    continue
                for name, (n, k) in shapes(row).items():
                    ms = float(row[f"time_stats.{name}.median"])
                    out.append((name, rows, n, k, 2 * rows * n * k / (ms * 1e-3) / 1e12))
    return out


def main(vidur: Path) -> None:
    products = timed(vidur)
    if not products:
        raise SystemExit(
            f"no data/profiling/compute/h100/*/*/mlp.csv under {vidur}: give a checkout of microsoft/vidur"
        )
    print("product          timed  fastest  above 794.5  median of XLA's rate (p10-p90), 1,024 rows or more")
    for name in PRODUCTS:
        big = [(m, n, k, t) for p, m, n, k, t in products if p == name and m >= 1024]
        level = sorted(t * 1e12 / (H100_BF16.at(m, n, k) * tile_share(n) * tile_share(m)) for m, n, k, t in big)
        p10, p90 = level[len(level) // 10], level[(9 * len(level)) // 10]
        above = sum(t > MAMF_H100_BF16 for *_, t in big)
        fastest = max(t for *_, t in big)
        print(
            f"{name:15s} {len(big):6d} {fastest:8.1f} {above:12d}  {statistics.median(level):.2f} ({p10:.2f}-{p90:.2f})"
        )
    table: dict[tuple[int, int], dict[int, list[float]]] = {}
    for name, rows, n, k, tflops in products:
        if name != "mlp_down_proj" and rows in KEPT_ROWS:
            table.setdefault((n, k), {}).setdefault(rows, []).append(tflops)
    rebuilt = {nk: tuple((m, round(statistics.median(v), 1)) for m, v in sorted(d.items())) for nk, d in table.items()}
    same = rebuilt == H100_FP16_TFLOPS
    print(f"\nkept (n, k) pairs: {len(rebuilt)}; products.py's H100_FP16_TFLOPS {'matches' if same else 'DIFFERS'}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]))
