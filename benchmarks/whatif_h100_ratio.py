"""How much faster an H100 runs a step than an A100, measured and as the what-if prices it, part by part (ninth pass).

Two sets of runs where the same software ran the same layout on both GPUs:

- MosaicML's llm-foundry rows of the out-of-sample set (``outside.py``, [MOSAIC]): each model's A100 and H100 rows,
  per microbatch (the two GPUs' steps hold different numbers of microbatches of the same size). For each part of
  the predicted step (matrix products, attention, element-wise kernels, ...) the A100 seconds over the H100 seconds:
  which parts carry the predicted ratio, against the published one.
- Megatron-LM's own speed tests (NVIDIA/Megatron-LM tests/functional_tests/test_cases/gpt/gpt3_7b_tp4_pp1_memory_speed
  and gpt3_7b_tp1_pp4_memory_speed, the same model_config.yaml for both GPUs, golden values of DGX A100 and DGX H100
  as both stood at commit adc69dba2d, October 2025, when they moved from NVIDIA's CI artifacts into the repository:
  "iteration-time" at steps 10 and 20; the files do not name the containers, and the tests' recipe now runs them on
  H100 only, so the A100 values may come from an older one). Transformer Engine picks the attention kernel: with the tests'
  ``--deterministic-mode`` (``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0``) it turns cuDNN's fused attention off below sm90
  and gives it "preference on Hopper+ for performance reasons" (transformer_engine/pytorch/attention/
  dot_product_attention/utils.py, ``get_attention_backend``), so the A100 ran FlashAttention-2 and the H100 cuDNN's
  kernel. The what-if prices both with FlashAttention-2's measured rate; cuDNN's kernels ran forward and backward
  together 1.45 times faster than FlashAttention-2 on an H100 at 4,096 causal tokens and head dimension 128 in
  June 2024 (pytorch/pytorch pull request 128888: 182 against 334 us forward, 712 against 963 backward) and 1.7-2.3
  times for training shapes in 2026 (huggingface/transformers pull request 48163), which is printed as a
  sensitivity, not priced. The tests set ``NCCL_ALGO=Ring``, which leaves NVLink
  SHARP unused, so the H100's all-reduces are asked at the ring's rate (``H100_RING``, 370 GB/s at most).

Prints seconds and ratios; nothing here is fitted or fed back into the model.

Run: python benchmarks/whatif_h100_ratio.py  (a few seconds)
"""

from __future__ import annotations

from dataclasses import replace

# Megatron-LM's 7B speed tests: name, layout arguments, A100 and H100 iteration seconds (golden values at adc69dba2d)
MEGATRON_TESTS = [
    ("gpt3_7b_tp4_pp1", dict(tp=4, microbatch=2), (2.57769, 2.596), (1.12041, 1.1186)),
    ("gpt3_7b_tp1_pp4", dict(pp=4, microbatch=1, schedule="interleaved-1f1b", virtual_stages=8), (2.9368, 2.94791),
     (1.21699, 1.20992)),
]  # fmt: skip
# cuDNN attention over FlashAttention-2 on H100: PyTorch pull request 128888, transformers pull request 48163
CUDNN_OVER_FA2_H100 = (1.45, 2.3)


def mosaic() -> None:
    from simulator.parallel.whatif import whatif
    from simulator.parallel.whatif.outside import outside_rows

    rows = [r for r in outside_rows() if r.label.startswith("MPT")]
    sizes = sorted({r.label.split()[0] for r in rows if "H100" in r.label})
    for size in sizes:
        pair = {r.system: r for r in rows if r.label.split()[0] == size}
        per_mb = {}
        for machine, row in pair.items():
            report = whatif(row.model, row.layout, machine)
            n = row.layout.microbatches
            parts = {k: v / n for k, v in report.to_json()["breakdown"]["step"].items() if v}
            tokens = row.layout.microbatch * row.model.seq
            per_mb[machine] = (report.step_seconds / n, tokens / row.published, parts)
        (a_step, a_pub, a_parts), (h_step, h_pub, h_parts) = per_mb["dgx-a100"], per_mb["dgx-h100"]
        print(f"{size}: a microbatch of {pair['dgx-h100'].layout.microbatch} sequences, seconds on A100 / H100")
        print(f"  {'published':14} {a_pub:8.4f} {h_pub:8.4f}  ratio {a_pub / h_pub:5.2f}")
        print(f"  {'predicted':14} {a_step:8.4f} {h_step:8.4f}  ratio {a_step / h_step:5.2f}")
        for part in sorted(set(a_parts) | set(h_parts), key=lambda k: -a_parts.get(k, 0.0)):
            a, h = a_parts.get(part, 0.0), h_parts.get(part, 0.0)
            ratio = f"{a / h:5.2f}" if a and h else "    -"
            print(f"    {part:12} {a:8.4f} {h:8.4f}  ratio {ratio}")


def megatron() -> None:
    from simulator.cost.systems import H100_RING, System, system
    from simulator.parallel.whatif import TrainingSetup, whatif
    from simulator.parallel.whatif.model import Transformer

    model = Transformer(layers=32, hidden=4096, heads=32, kv_heads=8, seq=8192, vocab=131072, tied=False)
    flags = dict(dp=2, global_batch=8, recompute="none", zero=1, grad_fusion=False, attention="flash")
    h100 = system("dgx-h100")
    ring = replace(h100.achieved, bus=dict(h100.achieved.bus, all_reduce=H100_RING))  # NCCL_ALGO=Ring
    h100 = System(h100.cost, ring)
    print("\nMegatron-LM's 7B speed tests (seconds a step; ratio A100 over H100)")
    print(f"  {'test':16} {'A100 pub':>8} {'pred':>6} {'H100 pub':>8} {'pred':>6} {'ratio pub':>9} {'pred':>5}"
          "  pred with H100 attention x1.45, x2.3")  # fmt: skip
    for name, layout, a_pub, h_pub in MEGATRON_TESTS:
        setup = TrainingSetup(**layout, **flags)
        a = whatif(model, setup, "dgx-a100").step_seconds
        h = whatif(model, setup, h100).step_seconds
        faster = []
        for factor in CUDNN_OVER_FA2_H100:
            cudnn = System(h100.cost, replace(h100.achieved, attention=h100.achieved.attention * factor))
            faster.append(a / whatif(model, setup, cudnn).step_seconds)
        ap, hp = sum(a_pub) / 2, sum(h_pub) / 2
        print(f"  {name:16} {ap:8.3f} {a:6.3f} {hp:8.3f} {h:6.3f} {ap / hp:9.2f} {a / h:5.2f}  "
              f"{faster[0]:.2f}, {faster[1]:.2f}")  # fmt: skip


if __name__ == "__main__":
    mosaic()
    megatron()
