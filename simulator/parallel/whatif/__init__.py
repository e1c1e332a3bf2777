"""What if we trained this model on that many GPUs? One training step, priced as real hardware runs it.

``whatif(model, setup, system)`` simulates one step of a transformer on a GPU system laid out as ``setup``
(tensor, context, pipeline, data and expert parallelism; any schedule the project has; recomputation;
sequence parallelism; the distributed optimizer and ZeRO) and reports where the time goes per device,
TFLOP/s per GPU and MFU, and memory by kind against each device's capacity. ``validate()`` holds it against
published measurements (``tables.py``). The numbers it prices with are measured, with their sources:
``simulator.cost.systems``. ``docs/whatif.md`` explains each cost.

| module | holds |
| --- | --- |
| model.py | ``Transformer``: a decoder's shapes, parameters; ``MODELS``: GPT-3, Megatron-LM's, Llama's |
| training_setup.py | ``TrainingSetup``: the parallel sizes, batch, schedule and techniques; where each group's ranks sit |
| layer.py | the ops of one layer (and of the embedding and output layer) on one rank: products, element-wise kernels, attention, collectives |
| price.py | seconds per pipeline action by category: compute, recomputation, unhidden communication |
| memory.py | bytes per device: weights, gradients, optimizer state, activations (walking the schedule) |
| step.py | the step on the engine: one device per pipeline rank, messages between stages, gradients |
| report.py | ``Report``: the breakdown, throughput, memory; as text or JSON |
| run.py | ``whatif``: the step simulated and reported |
| tables.py | the published tables (Narayanan et al. 2021 Table 1, Korthikanti et al. 2022 Table 5), sourced |
| outside.py | the out-of-sample rows: MT-NLG, BLOOM, Llama 3 Table 4, llm-foundry's FSDP runs, as published |
| validate.py | every row predicted and compared; the out-of-sample set apart, with its summary |
| band.py | an answer's band from the out-of-sample error, and the unpublished knobs re-asked |
| full.py | the older teaching what-if: every device of a GPT-3 1F1B step simulated (``Step3D``) |
"""

from __future__ import annotations

from .full import Step3D, gpt3_step
from .model import MODELS, Transformer, named_model
from .report import Report
from .run import whatif
from .training_setup import SetupError, TrainingSetup

__all__ = [
    "MODELS",
    "TrainingSetup",
    "SetupError",
    "Report",
    "Step3D",
    "Transformer",
    "gpt3_step",
    "named_model",
    "whatif",
]
