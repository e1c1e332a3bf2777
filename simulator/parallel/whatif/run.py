"""``whatif(model, layout, system)``: one training step simulated (``step.py``) and reported (``report.py``)."""

from __future__ import annotations

from ...cost.systems import System, system
from .memory import device_memory
from .model import Transformer
from .report import Report
from .step import simulate
from .training_setup import TrainingSetup


def whatif(model: Transformer, layout: TrainingSetup, on: System | str = "dgx-h100") -> Report:
    """One step of ``model`` laid out as ``layout`` on the system ``on`` (a ``System`` or its name)."""
    if not isinstance(on, (System, str)):
        raise ValueError(f"whatif(on={on!r}): give a System or a system's name (dgx-a100, dgx-h100)")
    sys_ = system(on) if isinstance(on, str) else on
    result, program = simulate(model, layout, sys_)
    step = result.time
    stages = []
    for r in range(layout.pp):
        seconds = dict(program.times[r].seconds)
        seconds["idle"] = step - result.outputs[r]
        stages.append(seconds)
    memory = [device_memory(model, layout, program.schedule, r, sys_.memory) for r in range(layout.pp)]
    # MFU against the peak of the products' number format: H100's FP8 dense peak is twice its BF16 one (1,979
    # against 989 TFLOP/s, the H100 datasheet)
    peak = sys_.peak_flops * (2 if layout.precision == "fp8" else 1)
    return Report(model, layout, sys_.name, peak, step, stages, memory, simulated_devices=layout.pp)
