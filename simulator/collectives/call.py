"""One collective call on one device (``_Call``): its group, position, tag, labels and reductions.

Every algorithm takes a ``_Call`` and sends, receives and reduces through it, so tags, labels and the
checker's names are made in one place. A part's label is the call's label and two numbers, its step and
chunk (``poster``): text only when someone reads it. ``resolve_group`` checks a group; ``CallSignature`` is what members
of a group compare (the engine raises an error naming both calls when they differ).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ..core import hooks
from ..core.tags import TAG_BASE, CollectiveTag

if TYPE_CHECKING:
    from ..core.device import Request


REDUCE_FNS: dict[str, Callable[[Any, Any], Any]] = {
    "sum": np.add,
    "avg": np.add,  # summed, then divided by the group size once
    "max": np.maximum,
    "min": np.minimum,
    "product": np.multiply,
}


class CallSignature(NamedTuple):
    """What a member calls, compared as data with what the group's first member called."""

    kind: str
    details: tuple[tuple[str, Any], ...]
    algorithm: str
    group: tuple[int, ...]

    def describe(self) -> str:
        """The call as the member wrote it, e.g. ``all_reduce(op='sum', shape=(4,), dtype='float64', ...)``."""
        args = [f"{k}={_plain(v)!r}" for k, v in self.details if v is not None]
        return f"{self.kind}({', '.join([*args, f'algorithm={self.algorithm!r}', f'group={self.group}'])})"

    def only_shapes_differ(self, other: CallSignature) -> bool:
        """Whether ``other`` is this call with other ``shapes`` alone (members whose pieces differ in size, each
        taking every piece to be the size of its own)."""
        mine, theirs = dict(self.details), dict(other.details)
        return (
            "shapes" in mine
            and mine["shapes"] != theirs.get("shapes")
            and {k: v for k, v in mine.items() if k != "shapes"} == {k: v for k, v in theirs.items() if k != "shapes"}
            and (self.kind, self.algorithm, self.group) == (other.kind, other.algorithm, other.group)
        )

    def has_empty_shape(self) -> bool:
        """Whether the call declares a shape with no elements (its ``shape``, or one of its ``shapes``)."""
        d = self.details
        shapes = [v for k, v in d if k == "shape"] + [s for k, v in d if k == "shapes" for s in v or ()]
        return any(s is not None and 0 in tuple(s) for s in shapes)


def _plain(v: Any) -> Any:
    return v.name if isinstance(v, np.dtype) else v


def resolve_group(dev: Any, group: Sequence[int] | None) -> tuple[int, ...]:
    """The group as a tuple of ranks (None: every device); checks that ``dev`` belongs to it."""
    if group is None:
        return tuple(range(dev.world_size))
    g = tuple(int(r) for r in group)
    if len(set(g)) != len(g) or any(not 0 <= r < dev.world_size for r in g):
        raise ValueError(f"device {dev.rank}: group {g} must list distinct ranks in 0..{dev.world_size - 1}")
    if dev.rank not in g:
        raise ValueError(f"device {dev.rank} called a collective on group {g}, which it is not part of")
    return g


def term_names(partials: str | None, op: str | None, p: int) -> list[str] | None:
    """The names ``partials=`` gives the members' terms of a sum, ``partials[m]`` for member m; None where it names
    nothing (none given, or an op other than a sum or an average: partial-sum names only mean something for sums).
    A simulated call and a native one on real ranks name them by this one rule."""
    return [f"{partials}[{m}]" for m in range(p)] if partials and op in ("sum", "avg") else None


def check_avg_dtype(rank: int, kind: str, op: str, dtype: Any) -> None:
    """op='avg' on integers is refused, in a simulation and on real ranks alike."""
    if op == "avg" and np.dtype(dtype).kind not in "fc":
        raise TypeError(
            f"device {rank}: {kind}(op='avg') needs floating-point values (an average of integers is not an "
            f"integer), got {np.dtype(dtype)}: pass x.astype(float), or use op='sum'"
        )


class _Call:
    """One collective call on one device: its group, its position in it, its tag and labels."""

    __slots__ = (
        "dev", "group", "p", "me", "tag", "fn", "op", "name", "partials", "kind", "algorithm", "number", "members",
        "agreed",
    )  # fmt: skip

    def __init__(self, dev: Any, kind: str, group, algorithm: str, op: str | None = None, name=None, partials=None):
        if op is not None and op not in REDUCE_FNS:
            raise ValueError(f"{kind}(op={op!r}): choose one of {sorted(REDUCE_FNS)}")
        self.dev = dev
        # a group's checks and checksum are worked out once per device (big runs make millions of calls), and its
        # ranks held once for every device of a simulation (a group of p on each of p devices is p² numbers)
        known = dev.__dict__.setdefault("_known_groups", {})
        key = None if group is None else tuple(group)
        info = known.get(key)
        if info is None:
            engine = hooks.engine_of(dev)
            shared = {} if engine is None else engine.caches.setdefault("groups", {})
            whole = shared.get(key)
            if whole is None or dev.rank not in whole[0]:
                g = resolve_group(dev, group)
                whole = shared[key] = (g, tuple(sorted(g)), zlib.crc32(repr(g).encode()) & 0xFFFF)
            info = known[key] = (whole[0], whole[0].index(dev.rank), whole[1], whole[2])
        g, self.me, members, checksum = info
        self.group, self.members = g, members
        self.p = len(g)
        counts = dev.__dict__.setdefault("_collective_calls", {})
        n = counts.get(members, 0)  # counted per set of members, so a group listed in another order is caught
        counts[members] = n + 1
        self.tag = CollectiveTag(TAG_BASE + (n % 16384) * 65536 + checksum)
        self.kind, self.algorithm, self.number = kind, algorithm, n
        self.agreed = False  # the engine compared every member's call with the first one's (``agree``)
        hooks.note_call(dev, self)  # what a deadlock report names a device blocked on this tag by
        self.op = op
        self.fn = REDUCE_FNS[op] if op is not None else None
        self.name = name
        self.partials = term_names(partials, op, self.p)

    @property
    def label(self) -> str:
        """This call's label, e.g. ``all_reduce#3 ring`` (made when asked: a booked call needs it once)."""
        return f"{self.kind}#{self.number} {self.algorithm}"

    @property
    def reduce_name(self) -> str:
        """The name of its reductions' ops, e.g. ``all_reduce.sum``."""
        return f"{self.kind}.{self.op}"

    def agree(self, **details: Any) -> None:
        """Tell the simulator what this member calls, so that members of one group calling different
        collectives (or with other arguments) get an error naming both calls, never a result."""
        if self.op == "avg":
            check_avg_dtype(self.dev.rank, self.kind, self.op, details["dtype"])
        hook = hooks.agreement(self.dev)
        if hook is None or self.p == 1:
            return
        # compared as data; written out (``CallSignature.describe``) only for the error when two members differ
        hook(self.members, self.number, CallSignature(self.kind, tuple(details.items()), self.algorithm, self.group))
        self.agreed = True

    def poster(self) -> Callable[[Any, int, Any, Any], Request | None]:
        """``post(value, dst, step, chunk)``: send this call's part (step, chunk) to rank ``dst``; returns a
        request to wait on, or None when the send is complete already (an eager one). The device's post
        (``simulator.core.hooks``) with this call's tag and label bound: a simulated device records step and chunk as numbers beside
        the call's interned label (``simulator.core.rows``), never a text per message."""
        return hooks.poster(self.dev, self.own_tag(), self.label)

    def own_tag(self) -> CollectiveTag:
        """The call's tag, refused unless it is a collective's (its messages would pass for the program's own)."""
        tag = self.tag
        if type(tag) is not CollectiveTag or tag < TAG_BASE:
            raise ValueError(
                f"device {self.dev.rank}: {self.label} sends under its call's own tag (from {TAG_BASE:,}), not "
                f"{int(tag)!r}: call a collective through the device (dev.all_reduce(...), dev.all_gather(...), ...)"
            )
        return tag

    def lane(self, right: int, left: int) -> Any:
        """This member's ring steps in one loop on a simulated device (``simulator.core.hooks.ring_lane``:
        ``lane.pass_along(first, chunk0, count, step0, blocks, reduce_name, fn)``), sending to rank ``right`` and
        receiving from rank ``left``; None where each step takes ``poster``, ``recv`` and ``reducer``."""
        return hooks.ring_lane(self.dev, self.own_tag(), self.label, right, left, self.p)

    def reducer(self) -> Callable[[Any, Any, float], Any]:
        """``reduce(received, local, flops)``: this call's reduction of a received chunk into a local one,
        recorded as the op ``reduce_name`` (not kept in memory; labelled with the call)."""
        dev = self.dev
        fast = hooks.fast_reducer(dev, self.reduce_name, self.label, self.fn)  # a simulated device's: ids interned once
        if fast is not None:
            return fast
        compute, name, fn, label = dev.compute, self.reduce_name, self.fn, self.label

        def reduce(received: Any, local: Any, flops: float) -> Any:
            return compute(name, fn, received, local, flops=flops, keep=False, label=label)

        return reduce

    def send(self, value: Any, pos: int, step: Any, what: Any) -> Request | None:
        """Send part (step, what) to member ``pos``: a request to ``wait`` on, or None (complete already)."""
        dev = self.dev
        return hooks.post(dev, self.own_tag(), hooks.call_label(dev, self.label), value, self.group[pos], step, what)

    def wait(self, req: Request | None) -> None:
        """Wait for a send of ``send`` (None: complete already)."""
        if req is not None:
            self.dev.wait(req)

    def recv(self, pos: int, shape=None, dtype=None, name=None, index=None) -> np.ndarray:
        return self.dev.recv(self.group[pos], self.tag, shape=shape, dtype=dtype, name=name, index=index)

    def exchange(self, value, to: int, frm: int, step: int, what, shape=None, dtype=None, name=None, index=None):
        """Send to one member and receive from another (safe in eager and rendezvous modes)."""
        sreq = self.send(value, to, step, what)
        got = self.recv(frm, shape, dtype, name, index)
        self.wait(sreq)
        return got

    def sum_name(self, members: Sequence[int]) -> str | None:
        """The reference name of the sum of these members' partials, e.g. 'Z.partial[0]+Z.partial[1]'."""
        return "+".join(self.partials[m] for m in members) if self.partials else None

    def combine(self, received: Any, local: Any, members: Sequence[int] | None = None, index: Any = None):
        """Reduce a received chunk into a local one (received first: it holds the earlier members)."""
        name = self.sum_name(members) if members is not None and self.partials else None
        if name is None:
            return self.dev.compute(self.reduce_name, self.fn, received, local, keep=False, label=self.label)
        return self.dev.compute(name, self.fn, received, local, index=index, keep=False, label=self.label)

    def finish_avg(self, value: Any, index: Any = None):
        """For op='avg': divide the summed chunk by the group size (one op)."""
        if self.op != "avg":
            return value
        p = self.p
        return self.dev.compute(f"{self.reduce_name}.divide", lambda v: v / p, value, keep=False, label=self.label)

    def result(self, value: Any, index: Any = None):
        """Record the collective's result as the op ``name`` (free: no arithmetic), if named; read-only
        either way, as the values of ops and of real ranks' collectives are."""
        if self.name is None:
            if isinstance(value, np.ndarray) and value.flags.writeable:
                value.setflags(write=False)
            return value
        return self.dev.compute(self.name, lambda: value, seconds=0.0, index=index)
