"""``torch.distributed.pipelining`` as engineers use it: a model cut into stages, each a ``PipelineStage``, run by
one of torch's schedules, forward and backward, to check against the model trained on one device.

    run = simulate_torch(pipelined_training, 2, "ScheduleInterleaved1F1B", state, x, target)
    check(run, Reference.of_torch(one_device_training, Layers(), x, target, microbatches_of(2)))
    run = simulate_torch(pipelined_training, 2, "ScheduleDualPipeV", state, x, None)     # the forward only
    check(run, Reference.of_torch(Layers(), x, microbatches=microbatches_of(2)))

``Layers``: eight ``Linear(4, 4)`` + tanh, ``layers.0`` to ``layers.7``. Each stage is a copy of the model that
keeps its own layers (as torchtitan cuts a model: delete what the stage does not run), so its layers keep their
names. Where the stages go (torch's placements): one stage per rank for GPipe and 1F1B; two per rank for the
others, stages r and r + n on rank r for the looped schedules, r and 2n - 1 - r for the V-shaped ones. The
loss is the squared error of each microbatch; torch divides the gradients by the number of microbatches
(``scale_grads``), and so does the single-device twin.

bug "stages swapped": the first two stages hold each other's layers (a cut in the wrong order).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..parallel.schedules import SCHEDULES as RECORDS

LAYERS = 8
# torch's schedule classes, read from the project's schedule records (each names its torch class)
_TORCH = [record for record in RECORDS.values() if record.torch_class]
SINGLE = tuple(r.torch_class for r in _TORCH if r.stages_per_rank == 1)
LOOPED = tuple(r.torch_class for r in _TORCH if r.looped)
V_SHAPED = tuple(r.torch_class for r in _TORCH if r.placement == "v")
SCHEDULES = SINGLE + LOOPED + V_SHAPED


class Layers(nn.Module):
    """Eight Linear(4, 4) layers, each followed by tanh, with fixed weights."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.layers = nn.ModuleDict({str(i): nn.Linear(4, 4) for i in range(LAYERS)})
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) / 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers.values():
            x = torch.tanh(layer(x))
        return x


def squared_error(y: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((y - target) ** 2).sum()


def microbatches_of(world_size: int) -> int:
    """The number of microbatches the programs use: two per rank (every schedule accepts it)."""
    return 2 * world_size


def stages_of(schedule: str, rank: int, world_size: int) -> tuple[list[int], int]:
    """The stages rank ``rank`` holds, and how many there are, as torch places them for ``schedule``."""
    if schedule in SINGLE:
        return [rank], world_size
    if schedule in LOOPED:
        return [rank, rank + world_size], 2 * world_size
    return [rank, 2 * world_size - 1 - rank], 2 * world_size


def pipelined_training(
    schedule: str, state: dict, x: torch.Tensor, target: torch.Tensor | None, bug: str | None = None
) -> Any:
    """One training step of ``Layers`` in stages under torch's ``schedule``; the rank of the last stage returns
    the model's output and the microbatches' losses, the others None. With no ``target``, the forward only (the
    schedule has no loss): the last stage returns the output."""
    from torch.distributed import pipelining

    rank, n = dist.get_rank(), dist.get_world_size()
    mine, total = stages_of(schedule, rank, n)
    per = LAYERS // total
    stages = []
    for s in mine:
        model = Layers()
        model.load_state_dict(state)
        held = s ^ 1 if bug == "stages swapped" and s < 2 else s
        for i in range(LAYERS):
            if i // per != held:
                del model.layers[str(i)]
        stages.append(pipelining.PipelineStage(model, s, total, torch.device("cpu")))
    cls = getattr(pipelining, schedule)
    m = microbatches_of(n)
    loss_fn = squared_error if target is not None else None
    runner = cls(stages[0] if schedule in SINGLE else stages, n_microbatches=m, loss_fn=loss_fn)
    losses: list[torch.Tensor] = []
    first, last = 0 in mine, total - 1 in mine
    inputs = (x,) if first else ()
    if target is None:
        out = runner.step(*inputs)
        return out if last else None
    out = runner.step(*inputs, target=target if last else None, losses=losses if last else None)
    return (out, torch.stack(losses)) if last else None


def one_device_training(model: nn.Module, x: torch.Tensor, target: torch.Tensor, microbatches: int) -> Any:
    """The single-device twin of ``pipelined_training``: the model on each microbatch in turn, each loss's
    backward as the schedules run it (unscaled, so the gradients that cross between stages are these), the
    parameters' gradients divided by the number of microbatches at the end (``scale_grads``); the output and
    the losses."""
    outs, losses = [], []
    for xm, tm in zip(x.chunk(microbatches), target.chunk(microbatches)):
        y = model(xm)
        loss = squared_error(y, tm)
        loss.backward()
        outs.append(y)
        losses.append(loss)
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.grad /= microbatches
    return torch.cat(outs), torch.stack(losses)
