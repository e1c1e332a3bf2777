"""The works a simulated rank's process group returns (torch's ``dist.Work``), and what waiting on them does.

- a collective called without ``async_op`` returns a completed work (``done``): it ran to its end in the call;
- one called with ``async_op=True`` returns an ``AsyncCollective``: its results reach the program's tensors
  only at the wait, and a tensor changed before the wait is refused there (on real ranks the collective may
  read the new values or overwrite them); a program that ends without waiting is told so (``unwaited_error``);
- a send or receive returns a ``SimWork`` that waits on the simulated device's request.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _create_work_from_future
from torch.futures import Future

from ..core.p2p import contract_violation
from .context import RankContext, call_site, internal
from .values import to_numpy, write_into


def done(result: Any) -> Any:
    """A work that has completed (a collective runs to its end within the call)."""
    fut = Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


class AsyncCollective(dist.Work):
    """A collective the program called with ``async_op=True``. The simulation ran it within the call; its results
    go into the program's tensors when the program waits: ``work.wait()``, ``is_completed()`` (which says True),
    ``get_future()`` or ``result()``. A program that reads a tensor before gets the values it had, as a real rank
    may; one that never waits is told so when it ends (``unwaited_error``). A program that changes one of the
    call's tensors before it waits is refused at the wait: a real collective may read the new values or overwrite
    them, so no one result is right."""

    def __init__(self, ctx: RankContext, what: str, writes: list, held: list, result: Any) -> None:
        super().__init__()
        self._ctx, self._what, self._writes, self._held, self._result = ctx, what, writes, held, result
        ctx.unwaited.append(self)

    def _complete(self) -> None:
        if self._writes is None:
            return
        ctx = self._ctx
        with internal(ctx):
            for tensor, before in self._held:
                if to_numpy(tensor, ctx.rank, self._what).tobytes() != before:
                    self._writes = None
                    ctx.unwaited.remove(self)
                    raise ValueError(
                        f"rank {ctx.rank} changed a tensor of a collective it called with async_op=True before waiting "
                        f"on it ({self._what}): on real ranks the collective reads and writes its tensors while the "
                        "program goes on, so it may take the changed values or overwrite them. Change the tensor "
                        "after work.wait(), or give the collective a copy (x.clone())"
                    )
            for tensor, value in self._writes:
                write_into(tensor, value)
        self._writes = None
        ctx.unwaited.remove(self)

    def wait(self, timeout: Any = None) -> bool:
        self._complete()
        return True

    def is_completed(self) -> bool:
        self._complete()
        return True

    is_success = is_completed

    def exception(self) -> Any:
        return None

    def result(self) -> Any:
        self._complete()
        return self._result

    def get_future(self) -> Future:
        self._complete()
        fut = Future()
        fut.set_result(self._result)
        return fut

    def synchronize(self) -> None:
        self._complete()


def unwaited_error(ctx: RankContext) -> ValueError | None:
    """The error for a rank whose program ended with collectives it called with ``async_op=True`` and never
    waited on, or None."""
    if not ctx.unwaited:
        return None
    calls = "\n".join(f"  {work._what}" for work in ctx.unwaited)
    return ValueError(
        f"rank {ctx.rank} never waited on {len(ctx.unwaited)} collective(s) it called with async_op=True:\n{calls}\n"
        "  a collective's result is in its tensors only once the program waits on the work it returned; on real "
        "ranks the tensor may be read, or returned, before the result arrives. Call work.wait() before using it"
    )


class SimWork(dist.Work):
    """A point-to-point call in flight: ``wait`` waits on the simulated device's request."""

    def __init__(
        self, ctx: RankContext, req: Any, what: str, site: str, tensor: torch.Tensor | None = None, sent: Any = None
    ) -> None:
        super().__init__()
        self._ctx, self._req, self._what, self._site, self._tensor = ctx, req, what, site, tensor
        self._sent = sent  # a send: (the program's tensor, the values it had when sent)
        self._posted = _bytes_of(ctx, tensor) if tensor is not None else None  # a receive's tensor when posted
        self._done = False

    def wait(self, timeout: Any = None) -> bool:
        if self._done:
            return True
        ctx, req = self._ctx, self._req
        waits = what_call(f"{self._what}, waiting for it", call_site() or self._site)
        payload = ctx.request(lambda dev: self._fits(dev.wait(req)), waits)
        self._done = True
        if self._sent is not None:
            self._unchanged_until_sent(*self._sent)
        if self._tensor is not None:  # a receive: the message's values go into the tensor torch gave
            if _bytes_of(ctx, self._tensor) != self._posted:
                raise ValueError(
                    f"rank {ctx.rank} wrote into the tensor of its {self._what} ({self._site}) before the receive "
                    "completed: on a real rank the message may land before the write or after it. Wait on the "
                    "receive before writing into its tensor, or receive into another tensor"
                )
            with internal(ctx):
                write_into(self._tensor, payload)
            ctx.sink.received(self._tensor, req)
        return True

    def _fits(self, payload: Any) -> Any:
        """A receive's message, if its elements fit the tensor given to recv: torch copies them in, whatever the
        shapes (a (2, 2) message fills an empty(4)), so their counts must match (the dtype, the device checked)."""
        t = self._tensor
        if t is not None and payload.size != t.numel():
            req = self._req
            raise contract_violation(
                f"the message of {self._what} ({self._site})", req.peer, self._ctx.rank, req.tag,
                (tuple(t.shape), payload.dtype), (payload.shape, payload.dtype),
            )  # fmt: skip
        return payload

    def _unchanged_until_sent(self, t: torch.Tensor, values: np.ndarray) -> None:
        """A tensor changed between its isend and the wait: on real ranks the peer may get the new values."""
        ctx = self._ctx
        with internal(ctx):
            now = to_numpy(t, ctx.rank, "send")
        if now.shape == values.shape and np.array_equal(now, values, equal_nan=now.dtype.kind in "fc"):
            return
        raise ValueError(
            f"rank {ctx.rank} changed the tensor of its {self._what} ({self._site}) before the send completed: a real "
            "process may send the changed values (torch sends from the tensor itself; the simulation took them at the "
            "isend). Wait on the send before changing the tensor, or send a copy (x.clone())"
        )

    def is_completed(self) -> bool:
        if self._done:
            return True
        req = self._req
        asks = what_call(f"{self._what}, asking if it completed", call_site() or self._site)
        if not self._ctx.request(lambda dev: dev.test(req), asks):
            return False
        return self.wait()  # completed: a receive's values are in its tensor now, as on a real rank

    def is_success(self) -> bool:
        return self.is_completed()

    def exception(self) -> Any:
        return None

    def source_rank(self) -> int:
        return self._req.peer


def _bytes_of(ctx: RankContext, t: torch.Tensor) -> bytes:
    """A tensor's values as bytes, exact (NaN and -0.0 included), to tell whether the program changed it."""
    with internal(ctx):
        return to_numpy(t, ctx.rank, "a receive").tobytes()


def what_call(call: str, site: str) -> str:
    """A torch call for errors: ``all_reduce on ranks [0, 1], at prog.py:12 `dist.all_reduce(y)```."""
    return f"{call}, at {site}" if site else call
