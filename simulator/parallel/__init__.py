"""Parallelism strategies written as rank programs, each checked against one device.

Each module builds only on those below it (import-linter checks the order; schedules never import a strategy):

===============================  =================================================================================
zero, compose, compose5d,        ZeRO 1-3; data, pipeline and tensor parallelism on a 3-D mesh; all five dimensions
whatif/, measure, pipeline_split of a transformer together; the what-if that plans a training step on real GPU
                                 systems and is validated against published tables (``whatif.run``, ``.step``,
                                 ``.price``, ``.layer``, ``.memory``, ``.report``, ``.tables``, ``.validate``);
                                 numbers read off a run's trace; the split a pipeline declares for the checker
data, experts/                   data parallelism (gradients averaged, bucketed); a mixture of experts and expert
                                 parallelism (``experts.model``, ``.ops``, ``.parallel``, ``.moe_layer``)
pipeline, buckets,               a schedule run with real arithmetic; an all-reduce that moves along as the
tensor_layers, transformer/      device computes; Megatron's column/row MLP layers; a transformer and its splits
                                 (heads, sequence, context by ring attention: ``transformer.model``, ``.ops``,
                                 ``.block``, ``.step``, ``.sequence``, ``.context``, ``.costs``, ...)
layers, tensor, optim            one MLP layer as named ops; a weight matrix split by rows or columns; Adam
mlp, schedules/                  the small MLP and its one-device reference; pipeline schedules as data
===============================  =================================================================================
"""

from .compose import Parallel3D
from .compose5d import Parallel5D
from .data import DataParallel
from .experts.model import MoE
from .experts.parallel import ExpertParallel
from .measure import bubble, peak_activation_microbatches
from .mlp import MLP
from .pipeline import ActionCosts, Pipeline
from .pipeline_split import pipeline_split
from .schedules import SCHEDULES, Schedule, make_schedule
from .tensor import column_parallel, megatron_mlp, row_parallel
from .transformer.model import Transformer
from .zero import ZeRO

__all__ = [
    "MLP",
    "SCHEDULES",
    "ActionCosts",
    "DataParallel",
    "ExpertParallel",
    "MoE",
    "Parallel3D",
    "Parallel5D",
    "Pipeline",
    "Schedule",
    "Transformer",
    "ZeRO",
    "bubble",
    "column_parallel",
    "make_schedule",
    "megatron_mlp",
    "peak_activation_microbatches",
    "pipeline_split",
    "row_parallel",
]
