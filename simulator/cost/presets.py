"""Cost models of real machines, and two with round numbers for the classroom (``teaching`` is the default).

Each preset is a function returning a ``CostModel``; ``PRESETS`` maps a short name to it. Bandwidths
are per direction (vendors often quote the sum of both directions); FLOP/s are dense (no sparsity)
tensor-core peaks, which real kernels reach only in part. Link latencies are not on any datasheet:
they are order-of-magnitude estimates of the small-message latency a communication library sees,
so treat them as assumptions to vary, not as measurements.
"""

from __future__ import annotations

from collections.abc import Callable

from .model import CostModel, FullyConnected, TwoLevel

GB = 1e9
MiB = 2**20


def dgx_h100() -> CostModel:
    """NVIDIA DGX H100 nodes: 8 H100 SXM GPUs on NVLink 4, one 400 Gb/s InfiniBand port per GPU."""
    return CostModel(
        # NVLink 4: 900 GB/s total per GPU (H100 datasheet), i.e. 450 GB/s in each direction.
        bandwidth=450 * GB,
        # estimate: a few microseconds for a small NVLink message through NCCL.
        latency=2e-6,
        # H100 SXM, BF16 dense tensor core: 989 TFLOP/s (datasheet quotes 1979 with sparsity).
        flops=989e12,
        # H100 SXM "80 GB" HBM3 at 3.35 TB/s (datasheet); what a program can use is the total nvidia-smi reports,
        # 81,559 MiB (79.6 GiB): printed in NVIDIA/nccl issue 1264 and listed in modal-labs/modal-client PR 2797.
        memory=81559 * MiB,
        memory_bandwidth=3.35e12,
        topology=TwoLevel(
            node_size=8,  # 8 GPUs per DGX H100 (DGX H100 datasheet)
            # ConnectX-7, 400 Gb/s InfiniBand NDR per GPU (DGX H100 datasheet): 50 GB/s each way.
            inter_bandwidth=50 * GB,
            inter_latency=5e-6,  # estimate: RDMA over one switch plus library overhead
        ),
        name="DGX H100",
    )


def dgx_a100() -> CostModel:
    """NVIDIA DGX A100 nodes: 8 A100 SXM 80GB GPUs on NVLink 3, one 200 Gb/s InfiniBand port per GPU."""
    return CostModel(
        # NVLink 3: 600 GB/s total per GPU (A100 datasheet), i.e. 300 GB/s in each direction.
        bandwidth=300 * GB,
        latency=2e-6,  # estimate, as for DGX H100
        # A100, BF16 dense tensor core: 312 TFLOP/s (A100 datasheet; 624 with sparsity).
        flops=312e12,
        memory=81920 * MiB,  # A100 80GB: nvidia-smi's total, 81,920 MiB (modal-labs/modal-client PR 2797)
        memory_bandwidth=2.039e12,  # A100 80GB SXM: HBM2e at 2,039 GB/s (datasheet)
        topology=TwoLevel(
            node_size=8,  # 8 GPUs per DGX A100 (DGX A100 datasheet)
            # ConnectX-6, 200 Gb/s InfiniBand HDR per GPU (DGX A100 datasheet): 25 GB/s each way.
            inter_bandwidth=25 * GB,
            inter_latency=5e-6,  # estimate
        ),
        name="DGX A100",
    )


def pcie4_workstation() -> CostModel:
    """A workstation whose GPUs talk over PCIe 4.0 x16 (no NVLink), e.g. four RTX A6000 cards."""
    return CostModel(
        # PCIe 4.0 x16: 16 GT/s x 16 lanes with 128b/130b coding = 31.5 GB/s each way (PCI-SIG).
        bandwidth=31.5 * GB,
        latency=10e-6,  # estimate: peer copies through the PCIe root complex
        # RTX A6000: 38.7 TFLOP/s FP32 (datasheet); FP32 because such cards are often used that way.
        flops=38.7e12,
        memory=48 * GB,  # RTX A6000: 48 GB GDDR6 (datasheet)
        topology=FullyConnected(),
        name="PCIe 4.0 workstation",
    )


def classroom() -> CostModel:
    """Round numbers that make timelines easy to read: 1 us latency, 1 GB/s links, 1 GFLOP/s devices.

    A float64 element is 8 bytes, so a message of k elements takes 1 us + 8k ns, and an op producing
    k elements (one FLOP each) takes k ns.
    """
    return CostModel(latency=1e-6, bandwidth=1 * GB, flops=1e9, name="classroom")


def teaching() -> CostModel:
    """What a ``World(n)`` gets when no cost model is chosen: round numbers at which a student's small
    arrays make every op and every message visible in a timeline.

    Links of 1 us latency and 1 GB/s (a message of k float64 takes 1 us + 8k ns); devices of 10 GFLOP/s
    that spend 0.5 us launching each op (an op of f FLOPs takes 0.5 us + f / 10 ns), as a GPU spends
    microseconds launching each kernel. Not a real machine: choose a preset (``dgx-h100``, ...) or a
    calibrated model for real numbers.
    """
    return CostModel(latency=1e-6, bandwidth=1 * GB, flops=10e9, op_latency=0.5e-6, name="teaching default")


PRESETS: dict[str, Callable[[], CostModel]] = {
    "dgx-h100": dgx_h100,
    "dgx-a100": dgx_a100,
    "pcie4-workstation": pcie4_workstation,
    "classroom": classroom,
    "teaching": teaching,
}


def preset(name: str) -> CostModel:
    """The cost model called ``name`` (see ``PRESETS``).

    Args:
        name: a key of ``PRESETS`` (``"teaching"``, ``"dgx-h100"``, ...).

    Examples:
        >>> from simulator import World, preset
        >>> cost = preset("dgx-h100")
        >>> World(8, cost="dgx-h100").cost == cost
        True
    """
    try:
        return PRESETS[name]()
    except KeyError:
        raise ValueError(f"no cost-model preset named {name!r}; choose one of {sorted(PRESETS)}") from None
