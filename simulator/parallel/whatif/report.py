"""Where the time goes: one step's time, throughput and memory, per device and for the step, as text or JSON.

Every device of a pipeline rank runs the same timeline (``step.py``), so a rank's figures are each of its
devices' figures. A device's step time splits into ``KINDS``: compute (``matmul``, ``attention``,
``elementwise``, ``recompute``, ``optimizer``), the communication no compute hides (``tp``: tensor-parallel
all-reduces; ``sp_cp``: the all-gathers and reduce-scatters that replace them under sequence parallelism,
and context parallelism's exchanges; ``ep``: expert-parallel all-to-alls; ``pp``: pipeline sends;
``dp``: gradient reduction and weight gathering), ``bubble`` (waiting for the neighbouring stage inside the
schedule) and ``idle`` (done before the slowest device). The step's breakdown is the devices' average.

Throughput: model FLOPs are 3 x (2 s x the parameters a token meets in products + 4 s^2 h per layer) + 6 s h V
per sequence (the papers' count: Narayanan et al. 2021, section 5.1; Korthikanti et al. 2022, section 6; a
mixture of experts counts the experts a token visits); hardware FLOPs add what recomputation re-runs (a whole
forward of every layer under full recomputation, the attention core's 4 s^2 h under selective, the key product,
the output projection and w3 (a GeLU MLP's fc2) under torchtitan's op-level policy). TFLOP/s per GPU
and MFU use model FLOPs; ``hardware_tflops_per_gpu`` is what Narayanan et al. 2021 report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .memory import GIB, Memory
from .model import Transformer
from .training_setup import TrainingSetup

COMPUTE_KINDS = ("matmul", "attention", "elementwise", "recompute", "contention", "launch", "optimizer")
COMM_KINDS = ("tp", "sp_cp", "ep", "pp", "dp")
KINDS = COMPUTE_KINDS + COMM_KINDS + ("bubble", "idle")
LABELS = {
    "matmul": "matrix products", "attention": "fused attention", "elementwise": "element-wise kernels",
    "recompute": "recomputation", "contention": "products slowed by overlapped comm.",
    "launch": "GPU waiting for kernel launches", "optimizer": "optimizer step", "tp": "tensor-parallel all-reduces",
    "sp_cp": "sequence/context-parallel comm.", "ep": "expert-parallel all-to-all", "pp": "pipeline sends",
    "dp": "data-parallel gradients", "bubble": "pipeline bubble", "idle": "idle (waiting for the slowest)",
}  # fmt: skip
_LABEL_WIDTH = max(map(len, LABELS.values()))  # the numbers' columns start past the longest label


def _to_fit(lay: TrainingSetup) -> str:
    """What would make room, less what the layout already does (full recomputation, sequence parallelism, ...)."""
    ways = [
        ("more recomputation (--recompute full)", lay.recompute != "full"),
        ("a higher --zero", lay.dp > 1 and lay.zero < (2 if lay.pp > 1 else 3)),
        ("--dp > 1 with --zero (ZeRO shards over the data-parallel ranks)", lay.dp == 1),
        ("--sequence-parallel", lay.tp > 1 and not lay.sequence_parallel),
        ("a larger tp or pp", True),
        ("a smaller --microbatch", lay.microbatch > 1),
    ]
    chosen = [way for way, useful in ways if useful]
    return ", ".join(chosen[:-1]) + f" or {chosen[-1]}" if len(chosen) > 1 else chosen[0]


def model_flops(model: Transformer, sequences: int) -> float:
    """Model FLOPs of a forward and backward over ``sequences`` sequences (see the module docstring)."""
    s, h, d = model.seq, model.hidden, model.head_dim
    attention = h * (model.heads + 2 * model.kv) * d + h * h
    mlp = model.mlp_params - model.bias * (model.inner * (2 if model.mlp == "swiglu" else 1) + h)
    per_token = attention + (model.top_k * mlp + h * model.experts if model.experts else mlp)
    layer = 2 * s * per_token + 4 * s * s * h
    return 3.0 * sequences * (model.layers * layer + 2 * s * h * model.vocab)


def recompute_flops(model: Transformer, layout: TrainingSetup, sequences: int) -> float:
    """The FLOPs recomputation adds (see the module docstring)."""
    if layout.recompute == "none":
        return 0.0
    s, h = model.seq, model.hidden
    if layout.recompute == "selective":
        return sequences * model.layers * 4 * s * s * h if layout.attention == "unfused" else 0.0
    if layout.recompute == "op":  # the key product, the output projection, and w3 (SwiGLU) or fc2 (price.op_recomputed)
        per_token = h * model.kv * model.head_dim + model.heads * model.head_dim * h + h * model.inner
        return sequences * model.layers * 2 * s * per_token
    layer = model_flops(model, sequences) / 3 - sequences * 2 * s * h * model.vocab
    return layer


def tflops_text(tflops: float) -> str:
    """TFLOP/s as a report prints them: whole numbers, and three digits below 10 (a step of a few tokens runs at a
    fraction of one, which rounding would print as 0)."""
    return f"{tflops:.0f}" if tflops >= 10 else f"{tflops:.3g}"


@dataclass
class Report:
    """One step's figures (see the module docstring). ``stages[r]`` is pipeline rank r's seconds by kind."""

    model: Transformer
    layout: TrainingSetup
    system: str
    peak_flops: float
    step_seconds: float
    stages: list[dict[str, float]]
    memory: list[Memory]
    simulated_devices: int = 0

    @property
    def devices(self) -> int:
        return self.layout.devices

    @property
    def model_flops(self) -> float:
        return model_flops(self.model, self.layout.global_batch)

    @property
    def hardware_flops(self) -> float:
        return self.model_flops + recompute_flops(self.model, self.layout, self.layout.global_batch)

    @property
    def tflops_per_gpu(self) -> float:
        return self.model_flops / self.step_seconds / self.devices / 1e12

    @property
    def hardware_tflops_per_gpu(self) -> float:
        return self.hardware_flops / self.step_seconds / self.devices / 1e12

    @property
    def mfu(self) -> float:
        return self.tflops_per_gpu * 1e12 / self.peak_flops

    @property
    def breakdown(self) -> dict[str, float]:
        """The step's seconds by kind: the average over pipeline ranks (all ranks have equally many devices)."""
        return {k: sum(st.get(k, 0.0) for st in self.stages) / len(self.stages) for k in KINDS}

    @property
    def fits(self) -> bool:
        return all(m.over == 0 for m in self.memory)

    def to_json(self) -> dict[str, Any]:
        lay = self.layout
        return {
            "model": self.model.name or "custom",
            "system": self.system,
            "layout": {k: list(v) if isinstance(v, tuple) else v for k, v in vars(lay).items()},
            "devices": self.devices,
            "step_seconds": self.step_seconds,
            "tflops_per_gpu": self.tflops_per_gpu,
            "hardware_tflops_per_gpu": self.hardware_tflops_per_gpu,
            "mfu": self.mfu,
            "memory_gib": [{"pipeline_rank": r, **m.gib()} for r, m in enumerate(self.memory)],
            "fits": self.fits,
            "breakdown": {
                "step": self.breakdown,
                "pipeline_ranks": [{k: st.get(k, 0.0) for k in KINDS} for st in self.stages],
            },
        }

    def text(self) -> str:
        lay, m = self.layout, self.model
        lines = [
            f"{m.name or 'model'}: {m.layers} layers, hidden {m.hidden}, {m.heads} heads, {m.seq} tokens, "
            f"{m.params / 1e9:.1f} B parameters on {self.devices:,} {self.system} GPUs "
            f"(tp {lay.tp} x cp {lay.cp} x pp {lay.pp} x dp {lay.dp}{f', experts over ep {lay.ep} of the dp ranks' if lay.ep > 1 else ''}; "
            f"{lay.microbatches} microbatch{'es' if lay.microbatches != 1 else ''} of {lay.microbatch}, "
            f"schedule {lay.schedule}"
            f"{f' with {lay.virtual_stages} stages per rank' if lay.virtual_stages > 1 else ''}, recompute "
            f"{lay.recompute}{', sequence parallel' if lay.sequence_parallel else ''}"
            f"{f', ZeRO-{lay.zero}' if lay.zero else ''})",
            f"step {self.step_seconds:.3f} s: {tflops_text(self.tflops_per_gpu)} TFLOP/s per GPU, MFU {self.mfu:.{1 if self.mfu >= 0.01 else 2}%} of the "
            f"{self.peak_flops / 1e12:.0f} TFLOP/s peak ({tflops_text(self.hardware_tflops_per_gpu)} TFLOP/s counting "
            "recomputation)",
            "",
            "where the time goes (seconds per device, communication only where no computation hides it; average over "
            "the pipeline ranks, its share of the step, and the first and the last pipeline rank's):",
            f"  {'':<{_LABEL_WIDTH}} {'average':>9}  {'share':>6}   {'first rank':>10} {'last rank':>9}",
        ]
        first, last = self.stages[0], self.stages[-1]
        for k, v in self.breakdown.items():
            if v > 0 or first.get(k, 0) > 0 or last.get(k, 0) > 0:
                lines.append(f"  {LABELS[k]:<{_LABEL_WIDTH}} {v:9.3f}  {v / self.step_seconds:6.1%}   "
                             f"{first.get(k, 0):10.3f} {last.get(k, 0):9.3f}")  # fmt: skip
        if lay.tp > lay.node_size:  # priced so, but rarely meant: say why its all-reduces cost what they cost
            lines.append(f"  (tp {lay.tp} spans {-(-lay.tp // lay.node_size)} nodes of {lay.node_size} GPUs: its "
                         "all-reduces cross the network between nodes; Megatron-LM keeps tp within a node)")  # fmt: skip
        lines += ["", "memory per device (GiB): weights, gradients, optimizer state, activations + CUDA context and NCCL "
                  "buffers = total of capacity"]  # fmt: skip
        fullest = max(range(len(self.memory)), key=lambda r: self.memory[r].needed)
        for r in sorted({0, fullest, len(self.memory) - 1}):
            g = self.memory[r].gib()
            lines.append(f"  pipeline rank {r:>3}: {g['params']:7.1f} {g['grads']:7.1f} {g['optimizer']:7.1f} "
                         f"{g['activations']:7.1f} + {g['framework']:4.1f} = {g['needed']:7.1f} of {g['capacity']:.3g}")  # fmt: skip
        worst = self.memory[fullest]
        if worst.over > 0:
            lines.append(
                f"DOES NOT FIT: pipeline rank {fullest}'s devices need {worst.needed / GIB:.1f} GiB, "
                f"{worst.over / GIB:.1f} GiB more than their {worst.capacity / GIB:.3g} GiB; try {_to_fit(lay)}"
            )
        return "\n".join(lines)
