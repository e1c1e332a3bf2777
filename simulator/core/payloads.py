"""Values on a device: what a message may carry, read-only copies, ops that name their inputs, memory.

Nothing crosses between devices except messages, and neither side can change what the other holds:
a payload is handed to the receiver read-only, copied at the send unless it is already immutable (a
read-only array over read-only memory, as hold, compute and recv produce), which needs no copy.
Both backends (the simulator's ``Device`` and the torch backend's) share these rules.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

from ..cost.meta import MetaArray
from .errors import OpError, describe_inputs, read_only_hint


def _nbytes(value: Any) -> int:
    """Bytes a value occupies in memory: arrays and numbers by size; tuples and lists add up."""
    if isinstance(value, (np.ndarray, MetaArray)):
        return value.nbytes
    if isinstance(value, (tuple, list)):
        return sum(_nbytes(v) for v in value)
    if isinstance(value, (int, float, complex, np.generic)):
        return np.asarray(value).nbytes
    return 0


nbytes_of = _nbytes  # the public name: a real rank's device prices its memory alike


def _immutable(value: Any) -> bool:
    """A read-only array over read-only memory all the way down (what hold, compute and recv hand out).

    Sending one needs no copy: neither side can change what the other sees. Anything else, a writable
    array, a view of one, a list, a scalar, is copied into a fresh read-only array.
    """
    while type(value) is np.ndarray:
        if value.flags.writeable:
            return False
        value = value.base
        if value is None:
            return True
    return False


def frozen(value: Any) -> np.ndarray:
    """``value`` itself when it is already immutable, else a read-only copy: sendable without copies."""
    return value if _immutable(value) else freeze(value)


def freeze(value: Any) -> np.ndarray:
    """A read-only copy of ``value``: what a message carries. (A MetaArray is immutable already.)"""
    if type(value) is MetaArray:
        return value
    return sealed(np.array(value))


def sealed(arr: np.ndarray) -> np.ndarray:
    """``arr`` made read-only for good: a read-only view of it, whose flag cannot be set back (numpy
    refuses to make a view writeable over read-only memory), so no program can change what the trace
    recorded."""
    arr.setflags(write=False)
    return arr.view()


def run_op(rank: int, name: str, fn: Callable[..., Any], inputs: tuple) -> Any:
    """``fn(*inputs)``, its output read-only for good; an error names the op, the device and its inputs."""
    try:
        out = fn(*inputs)
    except Exception as exc:  # keep numpy's words, add where and with what
        raise OpError(
            f"op {name!r} on device {rank} raised {type(exc).__name__}: {exc}\n  its inputs: {describe_inputs(inputs)}"
            f"{read_only_hint(exc)}"
        ) from exc
    if isinstance(out, np.ndarray):
        return sealed(out) if out.flags.writeable else out
    # read now, as a device's result is (an object read as an array only later could lie); a torch tensor stays one
    return returned(out, tensors=True)


def kept(out: Any) -> Any:
    """An op's output as the program and the trace keep it: a view of memory the program can still write (a buffer it
    reuses) is copied, so that both keep what the op made, not what the buffer holds later (sealing the view does not
    stop writes through its base), whether or not the run records payloads. A view larger than its memory (a broadcast) stays as it is: its copy could be
    gigabytes."""
    if type(out) is np.ndarray and out.base is not None and not _immutable(out) and out.nbytes <= _held(out):
        return sealed(np.array(out))
    return out


def kept_inputs(inputs: tuple, label: str | None = None) -> tuple:
    """An op's inputs as the trace keeps them: a copy of any the program could still change (a read-only view of a
    buffer the program writes included: the trace keeps what the op read, not what the buffer holds later). A
    read-only view larger than its memory (a broadcast) stays as it is, as ``kept`` leaves one: its copy could be
    gigabytes. A collective's own op (``label`` given) reads its working copy: ``kept_reduction_inputs``."""
    if label is not None:
        return kept_reduction_inputs(inputs)
    return tuple(a if not isinstance(a, np.ndarray) or not _copied_input(a) else np.array(a) for a in inputs)


def _copied_input(a: np.ndarray) -> bool:
    """Whether ``kept_inputs`` copies this array: a writable one, or a read-only view the program can still write
    through whose copy is no larger than the memory under it."""
    return a.flags.writeable or (not _immutable(a) and a.nbytes <= _held(a))


def kept_reduction_inputs(inputs: tuple) -> tuple:
    """A collective's reduction's inputs as the trace keeps them: a copy of a writable one. A read-only one is a
    view of the collective's own working copy, which nothing writes after the reduction (so a booked ring, which
    keeps such views, and the same ring message by message keep the same objects)."""
    return tuple(np.array(a) if isinstance(a, np.ndarray) and a.flags.writeable else a for a in inputs)


def _held(view: np.ndarray) -> int:
    """The bytes of the array that owns a view's memory (its last base that is an array)."""
    while type(view.base) is np.ndarray:
        view = view.base
    return view.nbytes


def check_payload(value: Any, rank: int, where: str) -> None:
    """Messages carry numbers: refuse strings, bytes, Python objects and masked arrays with the fix."""
    ma = sys.modules.get("numpy.ma")  # not imported yet: nothing is a masked array (np.ma would import it, ~20 ms)
    if ma is not None and isinstance(value, ma.MaskedArray):
        raise TypeError(
            f"device {rank}: {where} got a masked array; a message would drop its mask. Send the data and the "
            "mask as two arrays (value.data and value.mask)."
        )
    kind = value.dtype.kind if isinstance(value, (np.ndarray, MetaArray)) else np.asarray(value).dtype.kind
    if kind not in "biufc":
        raise TypeError(
            f"device {rank}: {where} got {type(value).__name__} {value!r:.60}; a message carries numbers (a NumPy "
            "array or a scalar of booleans, integers, floats or complex numbers), not strings, bytes or objects"
        )


class DeviceMemory:
    """A device's private memory of named values; each backend records changes its own way."""

    rank: int
    _memory: dict[str, Any]

    @property
    def memory(self) -> Mapping[str, Any]:
        """This device's named values (read-only view)."""
        return MappingProxyType(self._memory)

    def hold(
        self, name: str, value: Any, *, index: Any = None, partial: Any = None, doc: str | None = None
    ) -> np.ndarray:
        """Place a value in this device's memory under ``name`` (an input, a weight, a shard).

        index:   which part of the single-device value ``name`` this is (e.g. ``np.s_[:, 0:3]``)
        partial: this is one term of a sum over a group of devices whose total is ``name``: True (every
                 device) or the group's ranks (see ``Device.compute``)
        """
        arr = freeze(value)
        self._record_memory("hold", name, arr, index, doc, partial_group(self, partial, name))
        self._memory[name] = arr
        return arr

    def free(self, name: str) -> None:
        """Drop the value held under ``name`` from this device's memory (the views show its bytes freed).

        Args:
            name: a name given to ``hold``, ``compute`` or a named receive.

        Examples:
            >>> import numpy as np
            >>> from simulator import World
            >>> def program(dev):
            ...     dev.hold("w", np.zeros(4))
            ...     dev.free("w")
            ...     return sorted(dev.memory)
            >>> World(1).run(program).outputs
            [[]]
        """
        if name not in self._memory:
            raise KeyError(f"device {self.rank} holds no value named {name!r}; it holds {sorted(self._memory)}")
        self._record_memory("free", name, None, None, None, None)
        del self._memory[name]

    def _record_memory(
        self, kind: str, name: str, arr: np.ndarray | None, index: Any, doc: str | None, partial: tuple | None
    ) -> None:
        """Record a hold (arr) or a free (None) in this backend's trace."""
        raise NotImplementedError


def partial_group(dev: Any, partial: Any, name: str) -> tuple[int, ...] | None:
    """``partial=`` as a tuple of ranks: True means every device; a group must include the device."""
    if partial is None or partial is False:
        return None
    if partial is True:
        return tuple(range(dev.world_size))
    try:
        group = tuple(int(r) for r in partial)
    except TypeError:
        raise TypeError(
            f"device {dev.rank}: partial={partial!r} for {name!r}: say True (a sum over every device) or list the "
            "ranks whose terms add up to it, e.g. partial=(0, 1)"
        ) from None
    if len(set(group)) != len(group) or any(not 0 <= r < dev.world_size for r in group) or dev.rank not in group:
        raise ValueError(
            f"device {dev.rank}: partial={group} for {name!r} must list distinct ranks in 0..{dev.world_size - 1}, "
            f"this device ({dev.rank}) among them"
        )
    return group


_PLAIN = (np.ndarray, MetaArray, np.generic, int, float, complex, bool, str, bytes, type(None))


def returned(value: Any, tensors: bool = False) -> Any:
    """What a device returns, as the value it is when it returns: an object NumPy reads as an array (it has
    ``__array__``, as a tensor does) is read now, and a mapping or sequence of another kind is read into a dict, list
    or tuple (a named tuple keeps its class), item by item. Read later, inside a check, such an object could answer with
    whatever the check holds at that moment (the model's value, from its frame); arrays, numbers, strings and plain
    containers of them are kept as they are. ``tensors``: a torch tensor (exactly ``torch.Tensor`` or a
    ``Parameter``) is kept too, as an op's output is: the program computes on with it (torch's own ``__array__``
    reads what it holds)."""
    if isinstance(value, _PLAIN) or (tensors and _torch_tensor(value)):
        return value
    if isinstance(value, Mapping):
        items = {k: returned(v, tensors) for k, v in value.items()}
        plain = type(value) is dict and all(items[k] is v for k, v in value.items())
        return value if plain else items
    if isinstance(value, (list, tuple)):
        items = [returned(v, tensors) for v in value]
        if type(value) in (list, tuple) and all(a is b for a, b in zip(items, value, strict=True)):
            return value
        if isinstance(value, tuple):
            return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
        return items
    if hasattr(value, "__array__") or hasattr(value, "__array_interface__"):
        try:
            return np.asarray(value)
        except Exception:  # noqa: BLE001 (one NumPy cannot read here, a GPU's tensor: left as it is)
            return value
    return value


def _torch_tensor(value: Any) -> bool:
    """Whether ``value`` is a torch tensor of torch's own classes (torch is not imported for it: a run without torch
    has none)."""
    torch = sys.modules.get("torch")
    return torch is not None and type(value) in (
        getattr(torch, "Tensor", None),
        getattr(getattr(torch, "nn", None), "Parameter", None),
    )
