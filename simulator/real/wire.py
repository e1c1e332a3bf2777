"""What travels on the wire for one message: an optional fixed-size header, then the payload bytes.

torch.distributed's ``recv`` needs a buffer of the right size before the data arrives, but the
simulator's ``recv`` may leave shape and dtype undeclared. So, by default, every message is sent as
two transfers on two tags: a header of ``HEADER_LEN`` int64 numbers (dtype code, number of dimensions,
the dimensions), then the payload as raw bytes. The receiver reads the header first, checks it against
its declared contract (the same ``ContractError`` as in the simulator), allocates, then receives the
payload. With headers off, every recv must declare shape and dtype, and nothing can check them.

Headers travel on a process group of their own (the same ranks, a second communicator), with the
message's own tag: so several messages on one channel can never get a header matched with a
payload, and every user tag (0 to 2**30 - 1, see simulator/core/tags.py) stays available to programs. Payloads
travel as bytes (uint8), so any
NumPy dtype crosses, whatever the transport supports. This module needs only NumPy.
"""

from __future__ import annotations

import numpy as np

MAX_DIMS = 8
HEADER_LEN = 2 + MAX_DIMS

# The dtypes a message may carry; the header stores the position in this tuple.
DTYPES: tuple[np.dtype, ...] = tuple(
    np.dtype(d)
    for d in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
)
_CODES = {d: i for i, d in enumerate(DTYPES)}


def encode_header(arr: np.ndarray, rank: int = 0) -> np.ndarray:
    """The header for a payload: [dtype code, ndim, dim0, dim1, ...] padded to HEADER_LEN int64s."""
    code = _CODES.get(arr.dtype)
    if code is None:
        raise TypeError(
            f"device {rank}: cannot send dtype {arr.dtype} with the torch backend; "
            f"supported: {', '.join(d.name for d in DTYPES)}"
        )
    if arr.ndim > MAX_DIMS:
        raise ValueError(
            f"device {rank}: cannot send a {arr.ndim}-d array; the torch backend's header holds at most {MAX_DIMS} dims"
        )
    head = np.zeros(HEADER_LEN, dtype=np.int64)
    head[0] = code
    head[1] = arr.ndim
    head[2 : 2 + arr.ndim] = arr.shape
    return head


def decode_header(head: np.ndarray) -> tuple[tuple[int, ...], np.dtype]:
    """(shape, dtype) from a header made by ``encode_header``."""
    ndim = int(head[1])
    return tuple(int(s) for s in head[2 : 2 + ndim]), DTYPES[int(head[0])]


def nbytes_of(shape: tuple[int, ...], dtype: np.dtype) -> int:
    return int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def as_bytes(arr: np.ndarray) -> np.ndarray:
    """A flat uint8 view of a C-contiguous array (no copy)."""
    return arr.reshape(-1).view(np.uint8) if arr.ndim else arr.reshape(1).view(np.uint8)


def from_bytes(buf: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The array that ``buf`` (uint8) holds, read-only (no copy)."""
    arr = buf.view(dtype).reshape(shape)
    arr.setflags(write=False)
    return arr
