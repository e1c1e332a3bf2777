"""Arrays without values: a shape and a dtype, for what-ifs too large to compute.

A ``MetaArray`` stands for an array whose values nobody needs, only its size: a GPT-3 layer's
activations on 4,096 devices, say. Devices send, receive, hold and compute on it like any array
(``dev.send(MetaArray((2048, 12288), np.float16), dst=1)`` books 48 MiB on the link), NumPy's
elementwise ufuncs, ``matmul``, ``concatenate`` and slicing give the MetaArray of the right shape and
dtype, and every collective takes one. Nothing is computed and nothing is allocated: ops cost what
their ``flops=`` or ``seconds=`` say. Like PyTorch's "meta" tensors, which exist for the same reason.

Run such programs with ``World(..., keep_payloads=False)``: there are no values to keep or check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin


class MetaArray(NDArrayOperatorsMixin):
    """The shape and dtype of an array, without its values (see the module docstring). Immutable.

    Args:
        shape: the array's shape (or its length, for one dimension).
        dtype: its dtype.

    Examples:
        >>> import numpy as np
        >>> from simulator import MetaArray
        >>> a = MetaArray((1024, 1024), np.float16)
        >>> a.shape, a.nbytes
        ((1024, 1024), 2097152)
    """

    __slots__ = ("shape", "dtype", "size", "nbytes")
    shape: tuple[int, ...]
    dtype: np.dtype
    size: int
    nbytes: int

    def __init__(self, shape: int | Sequence[int], dtype: Any = np.float64) -> None:
        shape = (int(shape),) if np.isscalar(shape) else tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"MetaArray(shape={shape}): dimensions are >= 0")
        dtype = np.dtype(dtype)
        size = math.prod(shape)
        for name, value in (("shape", shape), ("dtype", dtype), ("size", size), ("nbytes", size * dtype.itemsize)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a MetaArray cannot be changed")

    def __reduce__(self) -> tuple[type, tuple[tuple[int, ...], np.dtype]]:
        # pickled as its constructor's arguments (a real rank's record travels to the launcher)
        return MetaArray, (self.shape, self.dtype)

    @classmethod
    def like(cls, value: Any) -> MetaArray:
        """The MetaArray of an array (or of anything ``np.asarray`` takes)."""
        a = value if isinstance(value, (np.ndarray, MetaArray)) else np.asarray(value)
        return cls(a.shape, a.dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def T(self) -> MetaArray:
        return MetaArray(self.shape[::-1], self.dtype)

    def reshape(self, *shape: Any) -> MetaArray:
        if len(shape) == 1 and not np.isscalar(shape[0]):
            shape = tuple(shape[0])
        return MetaArray(_dummy(self.shape).reshape(shape).shape, self.dtype)

    def astype(self, dtype: Any) -> MetaArray:
        return MetaArray(self.shape, dtype)

    def __getitem__(self, key: Any) -> MetaArray:
        return MetaArray(_dummy(self.shape)[key].shape, self.dtype)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d MetaArray")
        return self.shape[0]

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(f"{self!r} has no values to make an array of: it stands for an array's shape and dtype only")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MetaArray) and self.shape == other.shape and self.dtype == other.dtype

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))

    def __repr__(self) -> str:
        return f"MetaArray({self.shape}, {self.dtype.name})"

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if method != "__call__" or kwargs.get("out") is not None:
            return NotImplemented
        metas = [MetaArray.like(a) for a in inputs]
        # NumPy's own type rules, on empty stand-ins (Python scalars as they are: they are "weak")
        stand_ins = [a if isinstance(a, (int, float, complex)) else np.empty(0, m.dtype) for a, m in zip(inputs, metas)]
        dtype = ufunc(*stand_ins, **{k: v for k, v in kwargs.items() if k == "dtype"}).dtype
        if ufunc is np.matmul:
            a, b = metas
            shape = _matmul_shape(a.shape, b.shape)
        else:
            shape = np.broadcast_shapes(*(m.shape for m in metas))
        if ufunc.nout != 1:
            return tuple(MetaArray(shape, dtype) for _ in range(ufunc.nout))
        return MetaArray(shape, dtype)

    def __array_function__(self, func: Any, types: Any, args: tuple, kwargs: dict) -> Any:
        handler = _FUNCTIONS.get(func)
        if handler is None:
            return NotImplemented
        return handler(*args, **kwargs)


def _dummy(shape: tuple[int, ...]) -> np.ndarray:
    """An array of ``shape`` taking one byte: lets NumPy work out slicing and reshaping shapes."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, np.uint8), shape, (0,) * len(shape), writeable=False)


def _matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    if not a or not b:
        raise ValueError("matmul: a MetaArray operand must have at least one dimension")
    a2, b2 = (a if len(a) > 1 else (1, *a)), (b if len(b) > 1 else (*b, 1))
    if a2[-1] != b2[-2]:
        raise ValueError(f"matmul: shapes {a} and {b} do not line up ({a2[-1]} != {b2[-2]})")
    shape = (*np.broadcast_shapes(a2[:-2], b2[:-2]), a2[-2], b2[-1])
    if len(a) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b) == 1:
        shape = shape[:-1]
    return shape


def _concatenate(arrays: Sequence[Any], axis: int = 0, **_: Any) -> MetaArray:
    metas = [MetaArray.like(a) for a in arrays]
    dtype = np.result_type(*(m.dtype for m in metas))
    if axis is None:
        return MetaArray((sum(m.size for m in metas),), dtype)
    first = metas[0].shape
    axis %= len(first)
    return MetaArray((*first[:axis], sum(m.shape[axis] for m in metas), *first[axis + 1 :]), dtype)


def _stack(arrays: Sequence[Any], axis: int = 0, **_: Any) -> MetaArray:
    metas = [MetaArray.like(a) for a in arrays]
    first = metas[0].shape
    axis %= len(first) + 1
    return MetaArray((*first[:axis], len(metas), *first[axis:]), np.result_type(*(m.dtype for m in metas)))


_FUNCTIONS = {
    np.concatenate: _concatenate,
    np.stack: _stack,
    np.reshape: lambda a, shape, **_: a.reshape(shape),
    np.size: lambda a, axis=None: a.size if axis is None else a.shape[axis],
    np.shape: lambda a: a.shape,
    np.ndim: lambda a: a.ndim,
}
