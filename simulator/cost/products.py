"""Matrix products measured by shape: what a product's rows, columns and reduction length cost, not only its FLOPs.

Two products of the same FLOPs need not run at the same rate: one that reduces over a short k spends more of
its time loading tiles and writing its output than multiplying. A rate read by FLOPs from square products
(``Achieved.matmul``) misses that; on H100, whose tensor cores are three times A100's, those fixed costs weigh
more (docs/whatif.md).

[XLA-H100]: OpenXLA's matrix-product performance table for H100 (``sm_90``), xla/service/gpu/model/
matmul_interpolator_data.h, as regenerated in commit 71feeddf (October 2025) by xla/tools/matmul_perf_table_gen.cc:
each ``bf16[b,m,k] x bf16[b,k,n]`` product compiled by XLA and timed on the GPU as the median of its kernel's
runs, for b in 1, 2, 4 and m, n, k in 256 to 4096. Products of b x m rows run as one of that many rows (the
table's b = 2 and 4 products with m up to 2048 are kept out of the grid and land within a few percent of it:
tests/cost/test_products.py), so the grid's rows are b = 1 up to 4096 and b = 2 and 4 of m = 4096 (8,192 and
16,384 rows). Rates in TFLOP/s, BF16 in and out.

The table's timer (xla/service/gpu/model/hlo_op_profiler_cuda.cc) takes the median over every kernel a run
launches, so a product that runs as more than one kernel is mis-timed: its H100 FP8 entries reach 2,593 TFLOP/s,
above the 1,979 of FP8's dense peak, and are not used. Its BF16 entries are one kernel each at these sizes and
agree with the others measured: the same table's two earlier runs (May and August 2025) within 1-2% (median),
and [TPT-79]'s squares within 1% at 4096^3 and 8192^3 (tests/cost/test_products.py).
"""

from __future__ import annotations

from .achieved import ShapeRates

GRID = (256, 512, 1024, 2048, 4096)  # the table's n and k; its rows add 8,192 and 16,384

# rows: (one tuple per n in GRID, each the rates at k in GRID), TFLOP/s
H100_BF16_TFLOPS = {
    256: ((6.7, 11.5, 18.9, 31.9, 90.9), (12.4, 23.0, 41.1, 63.9, 93.1), (23.7, 43.8, 75.1, 119.6, 177.1),
          (43.8, 83.1, 141.6, 222.6, 296.3), (82.6, 146.2, 237.6, 345.9, 418.4)),
    512: ((12.3, 23.0, 41.5, 61.7, 92.8), (23.6, 43.6, 73.4, 116.3, 187.5), (45.7, 85.4, 146.5, 231.0, 300.9),
          (84.5, 147.5, 241.8, 342.8, 460.4), (141.3, 243.6, 381.3, 530.0, 661.6)),
    1024: ((23.6, 43.7, 69.8, 116.1, 187.2), (45.5, 84.3, 144.0, 235.5, 312.1), (80.9, 149.1, 252.8, 359.8, 472.6),
           (144.3, 244.0, 384.0, 529.5, 665.7), (219.7, 347.7, 494.4, 639.1, 751.9)),
    2048: ((45.3, 79.0, 142.8, 231.4, 333.9), (84.3, 150.1, 257.6, 354.1, 458.1), (145.6, 244.9, 386.8, 535.3, 663.6),
           (219.7, 348.6, 498.0, 641.0, 752.2), (303.3, 449.3, 596.5, 725.5, 752.3)),
    4096: ((84.5, 144.9, 229.0, 314.3, 398.9), (141.9, 240.1, 377.5, 531.0, 662.0), (223.0, 354.6, 497.6, 643.7, 751.7),
           (308.2, 449.6, 604.6, 727.5, 759.4), (398.6, 551.8, 685.2, 735.6, 780.2)),
    8192: ((143.1, 238.8, 378.1, 524.8, 597.5), (218.6, 348.6, 495.7, 636.5, 741.0), (308.2, 453.1, 598.5, 721.8, 746.6),
           (400.1, 548.7, 684.3, 730.6, 779.0), (467.5, 613.2, 691.8, 759.2, 804.2)),
    16384: ((210.7, 341.5, 489.4, 577.0, 611.3), (304.0, 451.2, 596.2, 710.1, 720.6), (396.5, 547.5, 677.7, 716.5, 773.5),
            (463.4, 612.7, 690.2, 758.2, 804.7), (505.2, 620.4, 722.3, 759.5, 788.7)),
}  # fmt: skip

H100_BF16 = ShapeRates(
    rows=tuple(float(r) for r in H100_BF16_TFLOPS),
    cols=tuple(float(g) for g in GRID),
    depth=tuple(float(g) for g in GRID),
    rates=tuple(tuple(tuple(t * 1e12 for t in by_k) for by_k in by_n) for by_n in H100_BF16_TFLOPS.values()),
    source="[XLA-H100] XLA's sm_90 matmul table, BF16, rows (b x m) x n x k from 256 to 16,384 x 4096 x 4096",
)
