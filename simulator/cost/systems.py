"""GPU systems as published: a preset's peaks and links, and what kernels and NCCL were measured to reach on them.

``system("dgx-a100")`` is what the what-if (``simulator.parallel.whatif``) plans with: the ``CostModel`` of
``presets`` (datasheet peaks, nodes of 8 GPUs, one network port per GPU) and an ``Achieved`` (measured rates,
``simulator.cost.achieved``). Every measured figure says where it comes from; where no measurement was found
the figure says what it assumes instead.

Sources, shortened in the fields below:

- [AZ-A100] / [AZ-H100]: Microsoft Azure's AI benchmarking guide, results of ND A100 v4 (8 x A100-SXM4-80GB,
  CUDA 12.5, NCCL 2.18.5) and ND H100 v5 (8 x H100 80GB HBM3, CUDA 12.6), github.com/samuel-bohman/
  AI-benchmarking-guide, Azure_Results/ND_A100_v4_results.md and ND_H100_v5_results.md: cuBLASLt GEMMs,
  STREAM-style HBM copy, nccl-tests all_reduce bus bandwidth inside one node, FlashAttention-2.
- [TPT-79]: zzc0721/torch-performance-test-data issue 79 (2025-10-18): torch.matmul on an NVIDIA H100 80GB
  HBM3 (PyTorch 2.7.0, CUDA 12.8), square products; BF16: 176.6, 676.6, 788.7, 797.5 and 719.7 TFLOP/s at
  1024, 2048, 4096, 8192 and 10240. The largest, longest-running product is the slowest of the large ones; the
  maximum, 797.5, agrees with [MAMF]'s best BF16 shape on H100 SXM, 794.5.
- [VIDUR-A100]: Microsoft's Vidur simulator's A100 profiles of eight models' linear layers (``simulator.cost.
  products``): FP16 products of 256 to 32,768 rows, 78 (n, k) pairs, as the models ran them. A100 prices a 16-bit
  product at the median of its four nearest measured shapes; [AZ-A100]'s squares stay in its description.
- [XLA-H100]: OpenXLA's H100 matrix-product table by shape (``simulator.cost.products``): BF16 products of 256 to
  16,384 rows, 256 to 4,096 columns and reduction lengths, each timed on its own. H100 priced a 16-bit product
  from it until the eighth pass (2026-12-06); it stays as the benchmark the profiles below are held against.
- [VIDUR-H100]: Vidur's H100 SXM profiles of six models' query-key-value, output and up products (``simulator.
  cost.products``; the down projections, fed zeros by the profiler's dummy weights, left out): FP16 products of
  256 to 4,096 rows, 48 (n, k) pairs. H100 prices a 16-bit product at the median of its four nearest measured
  shapes; beyond [TPT-79]'s fastest square (8192^3) at the share [TPT-79] falls to from the size the shapes
  were measured at.
- [MAMF]: S. Bekman, "Machine Learning Engineering", compute/accelerator/README.md, Maximum Achievable Matmul
  FLOPS table (mamf-finder.py, best of a search over shapes): A100 SXM 271.2, H100 SXM 794.5 BF16 TFLOP/s.
- [NCCL-412]: NVIDIA/nccl issue 412, S. Jeaugey (NCCL's maintainer): an 8 GB all_reduce gets "24GB/s
  inter-node" per 200 Gb/s HDR port.
- [NCCL-TESTS-150]: NVIDIA/nccl-tests issue 150, all_reduce_perf between two A100 nodes, one GPU each:
  about 19 us for the smallest messages.
- [MSCCLPP-NDMV4]: microsoft/mscclpp, docs/performance-ndmv4.md: nccl-tests on Azure NDm A100 v4 (8 x A100 80GB,
  one 200 Gb/s HDR port a GPU), NCCL 2.17.1, in-place bus bandwidth at 1 GB. Between 2 nodes with one GPU each:
  all-gather 15.84 GB/s, all-reduce 18.65, all-to-all 15.48 (MSCCL++'s own all-gather 23.30 on the same port);
  with 8 GPUs a node: all-gather 177.05 and all-reduce 183.82 (186.01 and 188.18 at 4 GB), 22-24 GB/s a port.
- [OVERLAP]: "Characterizing Compute-Communication Overlap in GPU-Accelerated Distributed Deep Learning:
  Performance and Power Implications" (arXiv:2507.03114, July 2025): GPT and Llama training kernels on 4
  A100s, H100s, MI250s and MI210s run on average 18.9% slower (at most 40%) while a collective overlaps them
  than alone. NCCL's kernels take whole SMs: an all-gather of 24 blocks holds 24 of an H100's 132 SMs (18%;
  NVIDIA developer forum, "Compute-communication overlap causes severe GEMM performance degradation", 2025).
- [LAUNCH]: NVIDIA's Nsight Systems user guide profiles a PyTorch element-wise op on a Tesla V100: about 20 us
  from the op's launch on the CPU to its kernel's start (as quoted in "Every CUDA kernel pays a launch tax",
  groundy.com, 2025).
- [TRITON-REG]: triton-lang/triton, python/test/regression/test_performance.py, ``elementwise_data['a100']``:
  an fp16 element-wise add of N elements (3 N x 2 bytes moved) reaches 0.315, 0.580, 0.782 and 0.850 of the
  A100's DRAM bandwidth at N = 1, 4, 16 and 64 Mi elements (the project's performance regression test).
- [FA2-A100-CAUSAL]: liangan1/GPU_travel, performance/flash-attn/README.md: FlashAttention-2 (Dao-AILab/
  flash-attention main) forward on an A100, 32 heads, causal against not at the same shapes: 143.70 against
  179.11 TFLOP/s at 16 x 1,024 tokens, 156.27 against 184.04 at 1 x 4,096 (a causal kernel's FLOPs counted as
  half the score matrix). The non-causal rates agree with [AZ-A100]'s 179.5.
- [FA2-H100-CAUSAL]: Dao-AILab/flash-attention pull request 1791 (2025-07-31), hopper/benchmark_attn.py on an
  H100, head dim 128, 8,192 tokens: FlashAttention-2 forward 369.9 TFLOP/s without the mask and 284.1 with it,
  its backward 287.1 with it (so a causal backward runs at its forward's rate, as the what-if assumes).
- [NCCL-TESTS-212]: NVIDIA/nccl-tests issue 212, S. Jeaugey: on H100 "NCCL can get an effective NVLink
  bandwidth of 370GB/s" for operations other than the NVLink-SHARP all-reduce (peak busbw about 480 GB/s).
- [FA2-RELEASE]: the FlashAttention-2 release's benchmarks (T. Dao, arXiv:2307.08691, the forward + backward
  figures; Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png and flash2_h100_fwd_bwd_benchmark.png,
  commit 4f285b35, July 2023): TFLOP/s of FlashAttention (flash-attn 1's CUDA kernels) and FlashAttention-2,
  forward and backward together, on an A100 80GB SXM4 and an H100 80GB SXM5, 16k tokens a batch at 512 to 16k
  tokens a sequence, head dimensions 64 and 128, with and without the causal mask. flash-attn's Triton kernel,
  which llm-foundry copied, is the first generation's too: its own notes put its forward and backward together
  "slightly slower" than the CUDA kernels (flash_attn/flash_attn_triton.py, v1.0.9), llm-foundry's TUTORIAL.md
  "slightly faster", and the same A100 figures time a "FlashAttention Triton" kernel (which implementation, they do
  not say) within 10% of FlashAttention's at head dimension 128, causal.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

from .achieved import Achieved, Curve
from .model import CostModel
from .presets import dgx_a100, dgx_h100
from .products import A100_FP16, H100_FP16

T = 1e12  # FLOP/s per TFLOP/s
GBS = 1e9  # bytes/s per GB/s
SIZES_1K_TO_8G = tuple(1024 * 2**k for k in range(24))  # nccl-tests -b 1K -e 8G -f 2


@dataclass(frozen=True)
class System:
    """A machine as the what-if prices it: the cost model (peaks, links, memory) and what kernels reach."""

    cost: CostModel
    achieved: Achieved

    @property
    def name(self) -> str:
        return self.cost.name

    @property
    def peak_flops(self) -> float:
        return self.cost.flops

    @property
    def memory(self) -> float:
        return self.cost.memory or float("inf")

    def describe(self) -> str:
        a = self.achieved
        best = max(rate for _, rate in a.matmul.points)
        shapes = " (by shape)" if a.matmul_shapes is not None else ""
        return (
            f"{self.cost.describe()}; measured: matrix products{shapes} up to {best / T:.0f} TFLOP/s, "
            f"memory {a.memory_bandwidth / 1e12:.2f} TB/s, all-reduce up to {a.bus['all_reduce'].points[-1][1] / GBS:.0f} "
            f"GB/s bus bandwidth in a node, {a.nic_bandwidth / GBS:.0f} GB/s per port between nodes"
        )


def _square(points: tuple[tuple[int, float], ...]) -> tuple[tuple[float, float], ...]:
    """(n, TFLOP/s) of n x n x n products as (FLOPs, FLOP/s)."""
    return tuple((2.0 * n**3, tflops * T) for n, tflops in points)


def _bus(gbs: tuple[float, ...]) -> tuple[tuple[float, float], ...]:
    return tuple((float(n), g * GBS) for n, g in zip(SIZES_1K_TO_8G, gbs))


OVERLAP_SLOWDOWN = 0.189  # [OVERLAP]
LAUNCH_SECONDS = 20e-6  # [LAUNCH]

A100_MATMUL = Curve(
    _square(((1024, 119.4), (2048, 221.8), (4096, 228.0), (8192, 253.7), (16384, 256.5))),
    "[AZ-A100] cuBLASLt FP16 GEMM, m = n = k",
)
A100_ALL_REDUCE = Curve(
    _bus(
        (
            0.04,
            0.08,
            0.17,
            0.33,
            0.67,
            1.37,
            2.70,
            5.15,
            10.11,
            19.24,
            36.22,
            53.54,
            71.43,
            89.99,
            109.22,
            132.77,
            166.63,
            174.18,
            213.87,
            221.58,
            228.10,
            230.22,
            230.48,
            231.58,
        )
    ),  # fmt: skip
    "[AZ-A100] nccl-tests all_reduce_perf, 8 GPUs, in-place bus bandwidth, 1 kB to 8 GB",
)
H100_FP8_MATMUL = ((1024, 274.1), (2048, 1011.3), (4096, 1216.9), (8192, 1290.1), (16384, 1377.3), (32768, 1382.2))
H100_FP8_CURVE = Curve(_square(H100_FP8_MATMUL), "[AZ-H100] cuBLASLt FP8 GEMM, m = n = k")
H100_MATMUL = Curve(
    _square(((1024, 176.62), (2048, 676.59), (4096, 788.72), (8192, 797.51), (10240, 719.72))),
    "[TPT-79] torch.matmul BF16 on H100 80GB HBM3, m = n = k; beyond 10240^3 the largest product's rate",
)
A100_MEMORY_SHARE = Curve(
    tuple((3 * 2 * n * 2**20, share / 0.850) for n, share in ((1, 0.315), (4, 0.580), (16, 0.782), (64, 0.850))),
    "[TRITON-REG] element-wise add on A100, share of its largest size's bandwidth by bytes moved",
)
A100_CAUSAL = Curve(((1024, 143.70 / 179.11), (4096, 156.27 / 184.04)), "[FA2-A100-CAUSAL] causal over unmasked rate")
H100_CAUSAL = Curve(((8192, 284.1 / 369.9),), "[FA2-H100-CAUSAL] causal over unmasked rate, 8,192 tokens")
FA2_RELEASE_LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)


def _first_gen(first: tuple[float, ...], second: tuple[float, ...], what: str) -> Curve:
    """FlashAttention's over FlashAttention-2's TFLOP/s, causal, forward and backward, at each of the lengths."""
    return Curve(tuple((n, a / b) for n, a, b in zip(FA2_RELEASE_LENGTHS, first, second, strict=True)), what)


A100_FIRST_GEN = {
    64: _first_gen((58, 70, 77, 87, 92, 97), (88, 119, 140, 156, 165, 171), "[FA2-RELEASE] A100, causal, d 64"),
    128: _first_gen((55, 62, 69, 76, 80, 83), (99, 133, 155, 173, 182, 189), "[FA2-RELEASE] A100, causal, d 128"),
}
H100_FIRST_GEN = {
    64: _first_gen((104, 123, 136, 138, 149, 156), (141, 192, 232, 257, 273, 284), "[FA2-RELEASE] H100, causal, d 64"),
    128: _first_gen((98, 109, 108, 126, 135, 137), (163, 221, 265, 294, 308, 328), "[FA2-RELEASE] H100, causal, d 128"),
}
H100_ALL_REDUCE = Curve(
    _bus(
        (
            0.07,
            0.14,
            0.27,
            0.53,
            0.95,
            1.71,
            2.72,
            5.40,
            10.86,
            21.35,
            43.70,
            81.93,
            128.73,
            172.13,
            234.45,
            295.53,
            361.78,
            400.61,
            423.38,
            438.46,
            466.35,
            472.36,
            475.54,
            478.87,
        )
    ),  # fmt: skip
    "[AZ-H100] nccl-tests all_reduce_perf (NVLink SHARP), 8 GPUs, in-place bus bandwidth, 1 kB to 8 GB",
)
H100_RING = H100_ALL_REDUCE.scaled(
    370 / 478.87,
    "[AZ-H100]'s all-reduce curve scaled to the 370 GB/s NCCL reaches without NVLink SHARP [NCCL-TESTS-212]",
)

A100_ACHIEVED = Achieved(
    matmul=A100_MATMUL,
    matmul_shapes=A100_FP16,
    memory_bandwidth=1.61e12,
    bus={"all_reduce": A100_ALL_REDUCE},
    nic_bandwidth=24 * GBS,
    nic_latency=19e-6,
    nic_one_per_node={
        "all_gather": 15.84 * GBS,
        "reduce_scatter": 15.84 * GBS,
        "all_to_all": 15.48 * GBS,
        "all_reduce": 18.65 * GBS,
    },
    node_size=8,
    attention=179.5 * T,
    causal_share=A100_CAUSAL,
    first_gen_share=A100_FIRST_GEN,
    memory_share=A100_MEMORY_SHARE,
    overlap_slowdown=OVERLAP_SLOWDOWN,
    launch_seconds=LAUNCH_SECONDS,
    sources={
        "matmul_shapes": "[VIDUR-A100] 16-bit products by shape, as eight models' linear layers ran them",
        "memory_bandwidth": "[AZ-A100] HBM copy, 1.61 TB/s (79% of the 2.04 TB/s datasheet peak)",
        "bus": "[AZ-A100]; other collectives read the all-reduce curve (nccl-tests defines busbw to compare them)",
        "nic_bandwidth": "[NCCL-412] 24 GB/s per 200 Gb/s HDR port (96% of its 25 GB/s)",
        "nic_latency": "[NCCL-TESTS-150] about 19 us for a small all-reduce between two nodes",
        "nic_one_per_node": "[MSCCLPP-NDMV4] one GPU a node, 1 GB: all-gather 15.84 GB/s, all-reduce 18.65, "
        "all-to-all 15.48 (also a pipeline send's rate: nccl-tests' all-to-all is NCCL's grouped sends and "
        "receives); reduce-scatter, not measured there, as all-gather (the same ring, the same bytes a step; "
        "NVIDIA/nccl issue 1281 reports the two within 3% on H100)",
        "attention": "[AZ-A100] FlashAttention-2 forward, head dim 64, batch 2, 8,192 tokens, not causal",
        "causal_share": "[FA2-A100-CAUSAL] 80% at 1,024 tokens, 85% at 4,096 (kept beyond)",
        "first_gen_share": "[FA2-RELEASE] FlashAttention over FlashAttention-2, causal: 45% at 2,048 tokens and head "
        "dimension 128, 55% at 64",
        "memory_share": "[TRITON-REG] 37% of the copy bandwidth at 6 MB moved, 68% at 25 MB, 92% at 100 MB, all at 400 MB",
        "overlap_slowdown": "[OVERLAP] 18.9% average slowdown of compute beside a collective (A100, H100, MI250, MI210)",
        "launch_seconds": "[LAUNCH] about 20 us from a PyTorch op's launch to its kernel's start",
    },
)

H100_ACHIEVED = Achieved(
    matmul=H100_MATMUL,
    memory_bandwidth=2.90e12,
    bus={"all_reduce": H100_ALL_REDUCE, "all_gather": H100_RING, "reduce_scatter": H100_RING, "all_to_all": H100_RING},
    nic_bandwidth=48 * GBS,
    nic_latency=19e-6,
    node_size=8,
    attention=327.9 * T,
    causal_share=H100_CAUSAL,
    first_gen_share=H100_FIRST_GEN,
    overlap_slowdown=OVERLAP_SLOWDOWN,
    matmul_fp8=H100_FP8_CURVE,
    launch_seconds=LAUNCH_SECONDS,
    matmul_shapes=H100_FP16,
    sources={
        "matmul_shapes": "[VIDUR-H100] 16-bit products by shape, as six models' linear layers ran them (no down "
        "projections); past 8192^3 the fall of [TPT-79]'s largest square, from the size they were measured at",
        "memory_bandwidth": "[AZ-H100] HBM copy, 2.90 TB/s (87% of the 3.35 TB/s datasheet peak)",
        "bus": "[AZ-H100] all-reduce; all-gather, reduce-scatter and all-to-all at [NCCL-TESTS-212]'s 370 GB/s",
        "nic_bandwidth": "assumed: 96% of a 400 Gb/s NDR port's 50 GB/s, the share [NCCL-412] gives for HDR",
        "nic_latency": "assumed as measured on A100 nodes [NCCL-TESTS-150]",
        "attention": "[AZ-H100] FlashAttention-2 forward, batch 2, 8,192 tokens, not causal",
        "causal_share": "[FA2-H100-CAUSAL] 77% at 8,192 tokens (the one length measured, kept at every length)",
        "first_gen_share": "[FA2-RELEASE] FlashAttention over FlashAttention-2, causal: 41% at 2,048 tokens and head "
        "dimension 128, 59% at 64",
        "overlap_slowdown": "[OVERLAP] 18.9% average slowdown of compute beside a collective (A100, H100, MI250, MI210)",
        "launch_seconds": "[LAUNCH] about 20 us from a PyTorch op's launch to its kernel's start",
    },
)


def dgx_a100_system() -> System:
    """NVIDIA DGX A100 (80 GB) nodes, as in Selene where the Megatron-LM papers measured."""
    return System(dgx_a100(), A100_ACHIEVED)


def dgx_h100_system() -> System:
    """NVIDIA DGX H100 nodes."""
    return System(dgx_h100(), H100_ACHIEVED)


NIC_SHARE = 24 / 25  # what NCCL carries of a port's line rate between nodes [NCCL-412]


PLAUSIBLE = 1e6  # the largest port rate (Gb/s) and GPU memory (GB) a what-if takes


def with_network(base: System, nics_per_node: int | None = None, nic_gbps: float | None = None) -> System:
    """``base`` with another network between nodes: ``nics_per_node`` ports (None: one per GPU) of ``nic_gbps``
    Gb/s line rate each (None: the preset's), carrying the share [NCCL-412] measured (96%) in collectives; a rate
    measured for groups of one GPU a node keeps its share of the preset's port on the port given."""
    if nics_per_node is None and nic_gbps is None:
        return base
    if nic_gbps is not None and not 1 <= nic_gbps <= PLAUSIBLE:  # beyond, times overflow or are meaningless
        raise ValueError(
            f"--nic-gbps {nic_gbps!r}: give a port's line rate in Gb/s, from 1 to {PLAUSIBLE:,.0f} (e.g. 200 for HDR)"
        )
    if nics_per_node is not None and (isinstance(nics_per_node, bool) or nics_per_node < 1):
        raise ValueError(f"--nics-per-node {nics_per_node!r}: give a whole number of ports >= 1")
    a = base.achieved
    bandwidth = a.nic_bandwidth if nic_gbps is None else nic_gbps / 8 * GBS * NIC_SHARE
    ports = a.nics_per_node if nics_per_node is None else nics_per_node
    sources = dict(a.sources)
    count = ports or a.node_size
    what = f"{count} port{'s' * (count != 1)} a node of {bandwidth * 8 / GBS / NIC_SHARE:.0f} Gb/s"
    sources["nic_bandwidth"] = f"given: {what}, at the 96% of line rate [NCCL-412] measured"
    one_per_node = a.nic_one_per_node
    if one_per_node and bandwidth != a.nic_bandwidth:  # NCCL's measured share of the port, on the port given
        scale = bandwidth / a.nic_bandwidth
        one_per_node = {kind: rate * scale for kind, rate in one_per_node.items()}
        sources["nic_one_per_node"] = f"{sources.get('nic_one_per_node', '')}; the same shares of the port given"
    achieved = replace(a, nic_bandwidth=bandwidth, nics_per_node=ports, nic_one_per_node=one_per_node, sources=sources)
    cost = replace(base.cost, name=f"{base.cost.name} ({what})")
    return System(cost, achieved)


def with_memory(base: System, gigabytes: float | None) -> System:
    """``base`` with ``gigabytes`` of memory per GPU as the product names it, e.g. 40 for A100 40GB (None: the preset's).

    A GPU's "GB" is 2^30 bytes: nvidia-smi reports A100 40GB as 40,960 MiB and A100 80GB as 81,920 MiB
    (modal-labs/modal-client PR 2797)."""
    if gigabytes is None:
        return base
    if not 0 < gigabytes <= PLAUSIBLE:  # 1e300 GB overflowed to an infinite capacity
        raise ValueError(
            f"--gpu-memory {gigabytes!r}: give the GPU's memory in GB, > 0 and at most 1,000,000 (e.g. 40 for A100 40GB)"
        )
    cost = replace(base.cost, memory=gigabytes * 2**30, name=f"{base.cost.name} ({gigabytes:g} GB)")
    return System(cost, base.achieved)


SYSTEMS: dict[str, Callable[[], System]] = {"dgx-a100": dgx_a100_system, "dgx-h100": dgx_h100_system}


def references() -> dict[str, str]:
    """Each source this module's rates cite, by its key (``"AZ-A100"``): the entry in full, as the docstring's
    list of sources gives it, on one line."""
    listed = (__doc__ or "").split("Sources, shortened in the fields below:", 1)[-1]
    found = {}
    for entry in re.split(r"\n- (?=\[)", listed)[1:]:
        keys, text = entry.split(":", 1)
        for key in re.findall(r"\[([A-Z0-9-]+)\]", keys):
            text = re.sub(r"``[^`]+``", lambda m: "".join(m[0].split()), text)  # a name wrapped at its dot
            found[key] = " ".join(re.sub(r"(?<=\w/)\n\s*", "", text).split())  # a path wrapped at its slash
    return found


def system(name: str) -> System:
    """The system called ``name`` (see ``SYSTEMS``)."""
    try:
        return SYSTEMS[name]()
    except KeyError:
        raise ValueError(f"no system named {name!r}; choose one of {', '.join(SYSTEMS)}") from None
