"""Every 8-GPU run of MosaicML's FSDP benchmark table asked through the what-if, to see where its error lies.

The out-of-sample set (``validate``) takes one 2,048-token row a model and GPU from llm-foundry's benchmarking
README (scripts/train/benchmarking/README.md, commit b2a43a147, October 2023). The same table has each model at
512 to 65,536 tokens, run by the same software (composer 0.16, PyTorch 2.1, llm-foundry v0.3.0, the Triton
attention kernel). This script asks every one of those runs on 8 A100 80GB or H100 80GB GPUs with FULL_SHARD,
bf16 and at most 16,384 tokens (62 runs), laid out as the out-of-sample MosaicML rows are
(``simulator/parallel/whatif/outside.py``), and prints predicted over published throughput (above 1:
optimistic) with the share of the predicted step the attention kernel takes, and (ninth pass) how many times
their priced time the products (with recomputation and their slowdown beside collectives) would take for the
published step if everything else were priced right (where attention is under 30% of the predicted step). Last, as a diagnostic for each GPU, the two factors on the
products' and the attention kernel's time that best fit all its runs (least squares in relative error). Nothing
here is fed back into the model: it is the seventh and ninth passes' reading of where the H100 rows' gap lies
(docs/whatif.md).

Run: python benchmarks/whatif_mosaic_table.py  (about a minute)
"""

from __future__ import annotations

# system, model, sequence length, microbatch, gradient accumulation, activation checkpointing, tokens/s per GPU
RUNS = [
    ("dgx-h100", "30b", 8192, 1, 21, True, 1384),
    ("dgx-h100", "30b", 4096, 1, 21, True, 1802),
    ("dgx-h100", "30b", 2048, 3, 21, True, 2002),
    ("dgx-h100", "30b", 1024, 6, 21, True, 2084),
    ("dgx-h100", "13b", 16384, 3, 3, True, 2985),
    ("dgx-h100", "13b", 4096, 10, 3, True, 4717),
    ("dgx-h100", "13b", 2048, 2, 1, False, 4792),
    ("dgx-h100", "13b", 1024, 40, 3, True, 5502),
    ("dgx-h100", "7b", 8192, 8, 2, True, 6935),
    ("dgx-h100", "7b", 4096, 16, 2, True, 8611),
    ("dgx-h100", "7b", 2048, 6, 1, False, 10643),
    ("dgx-h100", "7b", 1024, 64, 2, True, 10203),
    ("dgx-h100", "3b", 16384, 1, 6, False, 11152),
    ("dgx-h100", "3b", 8192, 3, 6, False, 16578),
    ("dgx-h100", "3b", 4096, 5, 6, False, 20964),
    ("dgx-h100", "3b", 1024, 20, 6, False, 27046),
    ("dgx-h100", "3b", 512, 40, 6, False, 27965),
    ("dgx-h100", "1b", 16384, 2, 4, False, 19649),
    ("dgx-h100", "1b", 8192, 3, 4, False, 29157),
    ("dgx-h100", "1b", 4096, 7, 4, False, 38535),
    ("dgx-h100", "1b", 2048, 14, 1, False, 45455),
    ("dgx-h100", "1b", 1024, 18, 4, False, 48910),
    ("dgx-h100", "1b", 512, 56, 4, False, 52275),
    ("dgx-h100", "760m", 16384, 3, 2, False, 27815),
    ("dgx-h100", "760m", 8192, 6, 2, False, 41825),
    ("dgx-h100", "760m", 4096, 12, 2, False, 55459),
    ("dgx-h100", "760m", 2048, 24, 2, False, 63147),
    ("dgx-h100", "760m", 1024, 48, 2, False, 78581),
    ("dgx-h100", "760m", 512, 96, 2, False, 83749),
    ("dgx-a100", "30b", 8192, 1, 21, True, 574),
    ("dgx-a100", "30b", 4096, 1, 21, True, 814),
    ("dgx-a100", "30b", 2048, 3, 21, True, 916),
    ("dgx-a100", "30b", 1024, 6, 21, True, 946),
    ("dgx-a100", "30b", 512, 12, 21, True, 967),
    ("dgx-a100", "13b", 16384, 3, 3, True, 1431),
    ("dgx-a100", "13b", 8192, 5, 3, True, 1795),
    ("dgx-a100", "13b", 4096, 10, 3, True, 2060),
    ("dgx-a100", "13b", 2048, 2, 3, False, 2262),
    ("dgx-a100", "13b", 1024, 40, 3, True, 2330),
    ("dgx-a100", "7b", 16384, 4, 2, True, 2453),
    ("dgx-a100", "7b", 8192, 8, 2, True, 3206),
    ("dgx-a100", "7b", 4096, 16, 2, True, 3684),
    ("dgx-a100", "7b", 2048, 6, 2, False, 4641),
    ("dgx-a100", "7b", 1024, 64, 2, True, 4357),
    ("dgx-a100", "3b", 16384, 1, 6, False, 5529),
    ("dgx-a100", "3b", 8192, 3, 6, False, 7695),
    ("dgx-a100", "3b", 4096, 5, 6, False, 9457),
    ("dgx-a100", "3b", 2048, 10, 2, False, 10811),
    ("dgx-a100", "3b", 1024, 20, 6, False, 11580),
    ("dgx-a100", "3b", 512, 40, 6, False, 12127),
    ("dgx-a100", "1b", 16384, 2, 4, False, 9956),
    ("dgx-a100", "1b", 8192, 3, 4, False, 13814),
    ("dgx-a100", "1b", 4096, 7, 4, False, 17807),
    ("dgx-a100", "1b", 2048, 14, 4, False, 20513),
    ("dgx-a100", "1b", 1024, 18, 4, False, 22112),
    ("dgx-a100", "1b", 512, 56, 4, False, 23148),
    ("dgx-a100", "760m", 16384, 3, 2, False, 14274),
    ("dgx-a100", "760m", 8192, 6, 2, False, 20933),
    ("dgx-a100", "760m", 4096, 12, 2, False, 27351),
    ("dgx-a100", "760m", 2048, 24, 2, False, 32434),
    ("dgx-a100", "760m", 1024, 48, 2, False, 29765),
    ("dgx-a100", "760m", 512, 96, 2, False, 29446),
]


def main() -> None:
    import numpy as np

    from simulator.parallel.whatif import TrainingSetup, whatif
    from simulator.parallel.whatif.outside import mpt

    print(
        f"{'system':9} {'model':9} {'tokens':>6} {'mb':>3} {'acc':>3} ckpt  {'published':>9} {'predicted':>9} ratio attn"
        " products"
    )
    parts: dict[str, list[tuple[float, float, float, float]]] = {}  # published step, products, attention, the rest
    for machine, size, seq, mb, accum, ckpt, published in RUNS:
        layout = TrainingSetup(dp=8, zero=3, microbatch=mb, global_batch=8 * mb * accum,
                               recompute="full" if ckpt else "none", optimizer="unfused", cross_entropy="fused",
                               attention="triton", grad_accumulation="fsdp", train_metrics=2)  # fmt: skip
        report = whatif(mpt(size, seq), layout, machine)
        step = report.to_json()["breakdown"]["step"]
        predicted = layout.global_batch * seq / report.step_seconds / 8
        products = sum(step.get(kind, 0.0) for kind in ("matmul", "recompute", "contention"))
        attention = step["attention"]
        rest = report.step_seconds - products - attention
        published_step = layout.global_batch * seq / 8 / published
        parts.setdefault(machine, []).append((published_step, products, attention, rest))
        print(
            f"{machine:9} MPT-{size:5} {seq:6} {mb:3} {accum:3} {'yes ' if ckpt else 'no  '} {published:9,}"
            f" {predicted:9,.0f} {predicted / published:5.2f} {attention / report.step_seconds:4.2f}"
            + (
                f" {(published_step - attention - rest) / products:8.2f}"
                if attention < 0.3 * report.step_seconds
                else ""
            )
        )  # the products' factor says little where attention takes much of the step
    for machine, runs in parts.items():
        published_step, products, attention, rest = (np.array(column) for column in zip(*runs, strict=True))
        weight = 1.0 / published_step  # relative errors, so that long steps do not decide it
        fit = np.linalg.lstsq(np.column_stack([products, attention]) * weight[:, None],
                              (published_step - rest) * weight, rcond=None)[0]  # fmt: skip
        spread = (fit[0] * products + fit[1] * attention + rest) / published_step
        print(f"{machine}: products x{fit[0]:.2f}, attention x{fit[1]:.2f} of their priced time fit its runs best "
              f"(each run then within {spread.min():.2f}-{spread.max():.2f} of its published step)")  # fmt: skip


if __name__ == "__main__":
    main()
