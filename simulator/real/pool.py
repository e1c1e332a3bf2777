"""Reusing large result buffers whose every user has let go of them.

A collective here returns a new array (the simulator's API is functional) while torch reduces in
place, so each large call needs fresh memory, and the first touch of fresh memory (page faults, the
kernel zeroing pages) costs several milliseconds per 64 MiB: more than the copy itself. The pool
keeps the last few large buffers and hands one out again only when nothing else refers to it: no
array, view, tensor or trace record (CPython's reference count says so exactly). Arrays smaller
than ``MIN_BYTES`` are simply allocated.
"""

from __future__ import annotations

import sys

import numpy as np

MIN_BYTES = 1 << 20


class BufferPool:
    """At most ``capacity`` large byte buffers, reused once unreferenced."""

    def __init__(self, capacity: int = 4) -> None:
        self.capacity = capacity
        self._buffers: list[np.ndarray] = []

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A writable array of this shape and dtype; its memory may be a reused, already touched buffer."""
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes < MIN_BYTES:
            return np.empty(shape, dtype)
        for i in range(len(self._buffers)):
            # references: the list, and getrefcount's own argument; any more means someone holds it
            if self._buffers[i].nbytes == nbytes and sys.getrefcount(self._buffers[i]) == 2:
                buf = self._buffers.pop(i)
                break
        else:
            buf = np.empty(nbytes, np.uint8)
        self._buffers.append(buf)  # most recently used last; the oldest goes first when full
        if len(self._buffers) > self.capacity:
            self._buffers.pop(0)
        return buf.view(dtype).reshape(shape)

    def __len__(self) -> int:
        return len(self._buffers)
