"""torch.distributed's state, one per simulated rank: a process per rank, as torch expects, in one process.

torch.distributed keeps its process groups in one module-level object (``distributed_c10d._world``: the
default group, every group's name and ranks). Real ranks are processes, each with its own; simulated ranks
are threads of one process. ``install()`` (once per process, idempotent) puts three things in place:

- ``_world`` becomes a ``_ThreadWorld``: on a simulated rank's thread it is that rank's own ``RankWorld``;
  on any other thread it is torch's original state, untouched (a real process group keeps working).
- Group names stay unique in the process (torch registers every group by name, in C++, for the functional
  collectives DTensor uses): on a simulated rank a group's name gets the rank's tag (``"0@sim3.r1"``).
- ``DTensor.to_local`` notes, on a simulated rank, which DTensor a plain tensor is the local piece of, so a
  module output that a parallel style turned into a plain tensor is still checked as the right shard; and
  ``DTensor.from_local(t, mesh, [Partial()])`` marks a module output ``t`` as one term of a sum; and
  ``backward(h, grad)`` with a received ``grad`` names its message the gradient of the value ``h`` is
  (``a.grad``: a pipeline stage's gradient from the next stage).
- The "simulator" backend: ``init_process_group("simulator", ...)`` and ``new_group`` on a simulated rank
  make ``process_group.SimProcessGroup``s.
- DTensor's op dispatcher (one object for the process) keeps its custom op handlers per simulated rank:
  ``loss_parallel()`` adds handlers and removes them at its exit, context parallelism swaps them. Shared, one
  rank's exit would remove the handlers another rank is still using (``KeyError: aten._log_softmax``). Each
  rank starts from a copy of the process's. (``implicit_replication()`` sets a flag torch keeps per thread.)

Outside simulated ranks all of this passes straight through to torch.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import weakref
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch._C._distributed_c10d import _unregister_process_group

from .context import current
from .process_group import SimProcessGroup

BACKEND = "simulator"
_lock = threading.Lock()
_installed: dict[str, Any] = {}


class RankWorld(c10d._World):
    """One simulated rank's torch.distributed state (torch's ``_World`` keeps these in module globals)."""

    def __init__(self) -> None:
        super().__init__()
        self._maps: dict[str, dict] = {
            k: {} for k in ("pg_map", "pg_names", "pg_group_ranks", "pg_backend_config", "tags_to_pg", "pg_to_tag")
        }
        self._count = 0
        # id(local tensor) -> (a weak reference to it, the spec of the DTensor it is the local piece of)
        self.local_specs: dict[int, tuple[weakref.ref, Any]] = {}
        self.dispatcher: dict[str, Any] = {}  # this rank's own values of DTensor's dispatcher state (_PER_RANK)

    def spec_of(self, t: Any) -> Any:
        """The spec of the DTensor whose ``to_local()`` gave ``t``, or None."""
        entry = self.local_specs.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def places(self, rank: int) -> tuple[tuple[int, int], ...]:
        """(size, ``rank``'s place in it) of each group size of which ``rank`` is in exactly one group."""
        found: dict[int, list[int]] = {}
        for members in self.pg_group_ranks.values():
            if rank in members:
                found.setdefault(len(members), []).append(members[rank])
        return tuple(sorted((size, at[0]) for size, at in found.items() if len(at) == 1))

    def groups(self, rank: int, without: tuple[int, ...] = ()) -> tuple[tuple[int, int, str], ...]:
        """(size, ``rank``'s place in it, mesh dim name or "") of each group ``rank`` is in, the world's and the
        group of ranks ``without`` left out, in the order they were made (a mesh's dims in its order:
        ``init_device_mesh`` makes them so)."""
        found = []
        for pg, members in self.pg_group_ranks.items():
            if set(members) == set(without):
                continue
            if rank in members and len(members) > 1 and pg is not self.default_pg:
                desc = getattr(pg, "group_desc", "") or ""
                found.append((len(members), members[rank], desc[5:] if desc.startswith("mesh_") else ""))
        return tuple(found)

    pg_map = property(lambda self: self._maps["pg_map"])
    pg_names = property(lambda self: self._maps["pg_names"])
    pg_group_ranks = property(lambda self: self._maps["pg_group_ranks"])
    pg_backend_config = property(lambda self: self._maps["pg_backend_config"])
    tags_to_pg = property(lambda self: self._maps["tags_to_pg"])
    pg_to_tag = property(lambda self: self._maps["pg_to_tag"])

    @property
    def group_count(self) -> int:
        return self._count

    @group_count.setter
    def group_count(self, value: int) -> None:
        self._count = value

    def release(self) -> None:
        """Forget this rank's groups, in torch's registry of group names too (the rank's run has ended)."""
        for name in list(self.pg_names.values()):
            with contextlib.suppress(Exception):  # already gone: nothing to release
                _unregister_process_group(name)
        for table in self._maps.values():
            table.clear()
        self.default_pg = None


class _ThreadWorld:
    """What torch sees as ``distributed_c10d._world``: the running simulated rank's state, else torch's own."""

    def __init__(self, original: Any) -> None:
        object.__setattr__(self, "_original", original)

    def _target(self) -> Any:
        ctx = current()
        return self._original if ctx is None or ctx.world is None else ctx.world

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target(), name, value)


# DTensor's op dispatcher's attributes that context managers change for a while: kept per simulated rank
_PER_RANK = ("_custom_op_handlers",)  # (implicit_replication sets a flag torch keeps per thread already)


def _per_rank(attr: str) -> property:
    """The dispatcher's ``attr``: the running simulated rank's own (a copy of the process's at its first use),
    else the process's."""

    def own() -> dict | None:
        ctx = current()
        return None if ctx is None or ctx.world is None else ctx.world.dispatcher

    def get(self: Any) -> Any:
        mine = own()
        if mine is None:
            return self.__dict__[attr]
        if attr not in mine:
            mine[attr] = copy.copy(self.__dict__[attr])
        return mine[attr]

    def put(self: Any, value: Any) -> None:
        mine = own()
        if mine is None:
            self.__dict__[attr] = value
        else:
            mine[attr] = value

    return property(get, put)


def _dispatcher_per_rank(dispatcher: Any) -> None:
    """Make ``_PER_RANK`` of DTensor's one dispatcher per simulated rank (a subclass whose properties see the rank)."""
    cls = type(dispatcher)
    dispatcher.__class__ = type(f"PerRank{cls.__name__}", (cls,), {a: _per_rank(a) for a in _PER_RANK})


def _creator(store: Any, group_rank: int, group_size: int, timeout: Any) -> SimProcessGroup:
    ctx = current()
    if ctx is None:
        raise RuntimeError(
            'the "simulator" backend runs only on simulated ranks: use simulator.simulate_torch(program, world_size)'
        )
    return SimProcessGroup(ctx, group_rank, group_size)


def install() -> None:
    """Put the per-rank state, unique group names, the ``to_local`` and ``from_local`` notes and the backend in place
    (once)."""
    with _lock:
        if _installed:
            return
        from torch.distributed.tensor import DTensor

        _installed["world"] = c10d._world
        c10d._world = _ThreadWorld(c10d._world)
        name_group = c10d._process_group_name

        def unique_name(ranks: Any, use_hashed_name: bool) -> Any:
            name = name_group(ranks, use_hashed_name)
            ctx = current()
            return name if ctx is None or ctx.world is None else type(name)(f"{name}@{ctx.group_tag}")

        c10d._process_group_name = unique_name
        to_local = DTensor.to_local

        def noted_to_local(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = to_local(self, *args, **kwargs)
            ctx = current()
            if ctx is not None and ctx.world is not None:
                ctx.world.local_specs[id(out)] = (weakref.ref(out), self._spec)
            return out

        noted_to_local.__doc__ = to_local.__doc__
        DTensor.to_local = noted_to_local
        _dispatcher_per_rank(DTensor._op_dispatcher)
        from_local = DTensor.from_local  # a staticmethod

        def noted_from_local(local_tensor: Any, *args: Any, **kwargs: Any) -> Any:
            out = from_local(local_tensor, *args, **kwargs)
            ctx = current()
            if ctx is not None and ctx.sink is not None:  # a module's output said Partial: a term of a sum
                ctx.sink.declared(local_tensor, out._spec)
            return out

        noted_from_local.__doc__ = from_local.__doc__
        DTensor.from_local = staticmethod(noted_from_local)
        backward = torch.autograd.backward

        def noted_backward(tensors: Any, grad_tensors: Any = None, *args: Any, **kwargs: Any) -> Any:
            ctx = current()
            if ctx is not None and ctx.sink is not None and grad_tensors is not None:  # received gradients, named
                ctx.sink.backward(tensors, grad_tensors)
            return backward(tensors, grad_tensors, *args, **kwargs)

        noted_backward.__doc__ = backward.__doc__
        torch.autograd.backward = noted_backward
        if BACKEND.upper() not in dist.Backend._plugins:
            dist.Backend.register_backend(BACKEND, _creator, devices=["cpu"])
