"""Torch's own bookkeeping on a simulated rank, told apart from the values of the program's model.

- ``PipelineStage`` infers what its stage receives and sends by running the stage's forward (and backward) once,
  on stand-in tensors (empty, or ones), before the schedule's first microbatch, and its stages vote on whether
  shapes may change. Those calls are no microbatch: while they run (``ctx.bookkeeping > 0``), modules are not
  named (``names.paused``), so microbatch k's values keep the names the single-device reference gives them (``layers.0 (call
  k+1)``). Their ops are still priced: a real rank computes them too.
- ``send_object_list`` and ``recv_object_list`` (the stage's shapes, a program's own Python objects) send pickled
  bytes as tensors.
The messages of both carry no value of the model: they are labelled ``LABEL``, so that the checker does not look
for one (a labelled message is checked as part of its call).
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch.distributed.distributed_c10d as c10d

from .context import current

LABEL = "torch's own bookkeeping (shapes, votes, pickled objects)"
_INFERENCE = (  # what PipelineStage and the schedules run before the first microbatch, torch 2.4 to 2.13
    "_forward_metadata_inference",
    "_backward_metadata_inference",
    "_shape_inference",
    "_warmup_forward_vote",
    "_warmup_backward_result",
)
_OBJECT_CALLS = frozenset(
    inspect.unwrap(getattr(c10d, name)).__code__ for name in ("send_object_list", "recv_object_list")
)


_lock = threading.Lock()


def install(paused: Callable[[], AbstractContextManager]) -> None:
    """Mark PipelineStage's shape inference as bookkeeping, its modules not named while ``paused()`` (once)."""
    try:
        from torch.distributed.pipelining import stage
    except ImportError:  # a torch without pipelining
        return
    with _lock:
        for cls in (stage._PipelineStageBase, stage.PipelineStage):
            for name in _INFERENCE:
                fn = cls.__dict__.get(name)
                if fn is not None and not getattr(fn, "_bookkeeping", False):
                    setattr(cls, name, _bookkeeping(fn, paused))


def _bookkeeping(fn: Any, paused: Callable[[], AbstractContextManager]) -> Any:
    @functools.wraps(fn)
    def inferring(*args: Any, **kwargs: Any) -> Any:
        ctx = current()
        if ctx is None:
            return fn(*args, **kwargs)
        ctx.bookkeeping += 1
        try:
            with paused():
                return fn(*args, **kwargs)
        finally:
            ctx.bookkeeping -= 1

    inferring._bookkeeping = True  # type: ignore[attr-defined]
    return inferring


def message_label(ctx: Any) -> str | None:
    """``LABEL`` when the send in progress is torch's bookkeeping (or carries pickled objects), else None."""
    if ctx.bookkeeping:
        return LABEL
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code in _OBJECT_CALLS:
            return LABEL
        frame = frame.f_back
    return None
