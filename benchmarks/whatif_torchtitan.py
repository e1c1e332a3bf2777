"""torchtitan's published FSDP2 runs asked through the what-if, as docs/whatif.md reads them (ninth pass).

None of these is in the out-of-sample set: the H100 runs ran on Grand Teton's 96 GB HBM2e H100s at a 500 W power
limit (docs/performance.md at d4c86e375 and at 3faaa1a0d, both footnoted), a GPU whose rates no measurement gives,
so they are asked on a DGX H100 (700 W, HBM3) as a bound; the April 2024 A100 runs (docs/performance.md at
1ea476e9f) name neither the A100's form nor the network of their 8 nodes, so they are asked with DGX A100's
network as a cross-check. Every layout is read from the commit's train_configs and code: FSDP2 over every GPU
(ZeRO-3, bf16 gathers), eager, foreach AdamW (priced as PyTorch's unfused Adam), the checkpointing the table names
(`op` is torchtitan's op-level policy, ``--recompute op``). Prints predicted over published tokens/s a GPU (above 1:
optimistic). Nothing here is fitted or fed back into the model.

Run: python benchmarks/whatif_torchtitan.py  (a few seconds)
"""

from __future__ import annotations

# label, system, GPU memory (GB), model, tokens, tp, dp, local batch, recompute, published tokens/s per GPU
RUNS = [
    ("Dec 2024 T1 FSDP", "dgx-h100", 96, "llama3-8b", 8192, 1, 8, 2, "op", 5762),
    ("Dec 2024 T3 FSDP", "dgx-h100", 96, "llama3-8b", 8192, 1, 128, 2, "op", 5605),  # 400 Gb/s a GPU between hosts
    ("Aug 2024 405B 2D", "dgx-h100", 94, "llama3-405b", 8192, 8, 16, 2, "full", 109),
    ("Apr 2024 8B op", "dgx-a100", 80, "llama3-8b", 8192, 1, 64, 1, "op", 2973),
    ("Apr 2024 70B full", "dgx-a100", 80, "llama3-70b", 8192, 1, 64, 1, "full", 331),
    ("Apr 2024 13B none", "dgx-a100", 80, "llama2-13b", 4096, 1, 64, 2, "none", 2162),
    ("Apr 2024 13B op", "dgx-a100", 80, "llama2-13b", 4096, 1, 64, 2, "op", 1904),
    ("Apr 2024 70B op", "dgx-a100", 80, "llama2-70b", 4096, 1, 64, 1, "op", 355),
    ("Apr 2024 70B full", "dgx-a100", 80, "llama2-70b", 4096, 1, 64, 2, "full", 353),
]


def main() -> None:
    from dataclasses import replace

    from simulator.cost.systems import system, with_memory, with_network
    from simulator.parallel.whatif import TrainingSetup, named_model, whatif

    print(f"{'run':18} {'system':9} {'model':12} {'recompute':9} {'published':>9} {'predicted':>9} ratio")
    for label, machine, gb, name, seq, tp, dp, batch, recompute, published in RUNS:
        layout = TrainingSetup(tp=tp, dp=dp, zero=3, microbatch=batch, global_batch=dp * batch, recompute=recompute,
                               sequence_parallel=tp > 1, optimizer="unfused", grad_accumulation="fsdp")  # fmt: skip
        gpus = with_memory(system(machine), gb)
        if label.startswith("Dec 2024"):  # Grand Teton: "400 Gb/s per GPU" between hosts (the page's Hardware)
            gpus = with_network(gpus, nics_per_node=8, nic_gbps=400)
        report = whatif(replace(named_model(name), seq=seq), layout, gpus)
        predicted = batch * seq / report.step_seconds / tp
        print(
            f"{label:18} {machine:9} {name:12} {recompute:9} {published:9,} {predicted:9,.0f} {predicted / published:5.2f}"
        )


if __name__ == "__main__":
    main()
