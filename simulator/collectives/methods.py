"""``CollectiveMethods``: the collectives as device methods (``dev.all_reduce(x)``).

Each method is the public function of ``api.py`` with the device as its first argument, and its docstring. The core's
``Device`` knows nothing of collectives (it sits in the layer below): ``attach`` gives it these methods
when this package loads, which ``import simulator`` always does first. The torch backend's device
inherits them (simulator/real/device.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..core.device import Device
from .api import all_gather, all_reduce, all_to_all, barrier, broadcast, gather, reduce, reduce_scatter, scatter

Method = TypeVar("Method", bound=Callable)


def documented_as(function: Callable) -> Callable[[Method], Method]:
    """Give a method the docstring of the function it calls (``dev.all_reduce(x)`` is ``all_reduce(dev, x)``)."""

    def document(method: Method) -> Method:
        method.__doc__ = function.__doc__
        return method

    return document


class CollectiveMethods:
    """The collectives as device methods, with torch.distributed's names (attached to ``Device``)."""

    @documented_as(all_reduce)
    def all_reduce(self, x, op="sum", group=None, algorithm="ring", *, name=None, partials=None, in_place=False):
        return all_reduce(self, x, op, group, algorithm, name=name, partials=partials, in_place=in_place)

    @documented_as(reduce_scatter)
    def reduce_scatter(
        self, x, op="sum", group=None, algorithm="ring", *, axis=0, name=None, partials=None, indices=None
    ):
        return reduce_scatter(self, x, op, group, algorithm, axis=axis, name=name, partials=partials, indices=indices)

    @documented_as(all_gather)
    def all_gather(
        self, x, group=None, algorithm="ring", *, axis=None, shapes=None, name=None, indices=None, index=None
    ):
        return all_gather(self, x, group, algorithm, axis=axis, shapes=shapes, name=name, indices=indices, index=index)

    @documented_as(broadcast)
    def broadcast(self, x, src, group=None, algorithm="tree", *, shape=None, dtype=None, name=None):
        return broadcast(self, x, src, group, algorithm, shape=shape, dtype=dtype, name=name)

    @documented_as(reduce)
    def reduce(self, x, dst, op="sum", group=None, algorithm="tree", *, name=None, partials=None):
        return reduce(self, x, dst, op, group, algorithm, name=name, partials=partials)

    @documented_as(scatter)
    def scatter(self, chunks, src, group=None, algorithm="direct", *, shape=None, dtype=None, name=None, indices=None):
        return scatter(self, chunks, src, group, algorithm, shape=shape, dtype=dtype, name=name, indices=indices)

    @documented_as(gather)
    def gather(self, x, dst, group=None, algorithm="direct", *, shapes=None, name=None, indices=None):
        return gather(self, x, dst, group, algorithm, shapes=shapes, name=name, indices=indices)

    @documented_as(all_to_all)
    def all_to_all(self, chunks, group=None, algorithm="direct", *, shapes=None):
        return all_to_all(self, chunks, group, algorithm, shapes=shapes)

    @documented_as(barrier)
    def barrier(self, group=None, algorithm="dissemination"):
        return barrier(self, group, algorithm)


NAMES = (
    "all_reduce",
    "reduce_scatter",
    "all_gather",
    "broadcast",
    "reduce",
    "scatter",
    "gather",
    "all_to_all",
    "barrier",
)


def attach(device_class: type) -> None:
    """Give ``device_class`` the collective methods it does not define itself."""
    for name in NAMES:
        if name not in vars(device_class):
            setattr(device_class, name, vars(CollectiveMethods)[name])


attach(Device)
