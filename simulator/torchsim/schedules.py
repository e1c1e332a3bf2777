"""torch.distributed.pipelining's own schedule classes, asked for their per-rank compute order without a process group.

torch is optional: it is imported when ``torch_order`` is called. The tests compare every generator of
``simulator.parallel.schedules`` with it; notebook 07 prints the two side by side.

A schedule class computes every rank's order in its constructor (``pipeline_order``, or
``_get_pipeline_order()`` for the one-stage schedules) from a few attributes of the stages it is
given: their index, the number of stages, the group's size and rank. ``StageStub`` carries just those,
so no process group, model or tensor is needed. The orders are reduced to compute actions: torch's
idle slots (None) and gradient-reduction markers (REDUCE_GRAD) dropped, and each overlapped forward-
backward pair (DualPipeV's OVERLAP_F_B) written as its two actions in order, as torch's runtime runs them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from simulator.parallel.schedules import SCHEDULES, Action, schedule_record


def torch_schedules() -> list[str]:
    """The schedules whose record names a torch class (``ScheduleRecord.torch_class``)."""
    return [name for name, record in SCHEDULES.items() if record.torch_class]


@dataclass
class StageStub:
    """What a torch schedule's constructor reads of a pipeline stage."""

    stage_index: int
    num_stages: int
    group_size: int
    group_rank: int
    submod: object = None

    @property
    def is_first(self) -> bool:
        return self.stage_index == 0

    @property
    def is_last(self) -> bool:
        return self.stage_index == self.num_stages - 1


def torch_order(name: str, ranks: int, microbatches: int, virtual: int = 1) -> dict[int, tuple[Action, ...]]:
    """torch's compute order per rank for our schedule ``name``; raises what torch raises for a case it refuses."""
    import torch.distributed.pipelining.schedules as ts

    record = schedule_record(name)
    if record.torch_class is None:
        raise KeyError(f"schedule {name!r} has no torch class; these have one: {', '.join(torch_schedules())}")
    fixed = record.stages_per_rank
    v = record.stages_on_each_rank(virtual)
    n = ranks * v
    stages = [0, n - 1] if record.placement == "v" else list(range(0, n, ranks))  # rank 0's stages
    stubs = [StageStub(s, n, ranks, 0) for s in stages]
    cls = getattr(ts, record.torch_class)
    logging.disable(logging.WARNING)  # torch logs its padding with idle slots as warnings
    try:
        schedule = cls(stubs[0], microbatches) if v == 1 and fixed == 1 else cls(stubs, microbatches)
    finally:
        logging.disable(logging.NOTSET)
    order = schedule.pipeline_order
    return {r: tuple(_flatten(order[r])) for r in range(ranks)}


def _flatten(actions) -> list[Action]:
    out = []
    for a in actions:
        if a is None:
            continue
        if a.sub_actions is not None:
            out += _flatten(a.sub_actions)
        elif a.computation_type.value in ("F", "B", "I", "W"):
            out.append(Action(a.stage_index, a.computation_type.value, a.microbatch_index))
    return out
