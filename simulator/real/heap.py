"""Rank processes keep the memory they free, so a large buffer is not faulted in afresh each time.

glibc's malloc serves every allocation of 32 MiB or more (and, by default, many smaller ones) with a fresh
``mmap``, and hands it back to the kernel when it is freed. The next buffer of that size is new memory:
the kernel zeroes it page by page as it is first touched. On a virtual machine whose host reclaims
the memory a guest gives back, a first touch can cost the host's fault as well: here filling a fresh
32 MiB buffer took 5 ms in one process and 200 to 300 ms in another, and a 32 MiB ring step on two real
ranks took 50 to 60 ms in most repeats and 300 ms in others (40 to 55 ms in every repeat, memory kept).
A rank program allocates such buffers all the time (each message received, each sum, each copy a send
carries), so its times followed the host's memory, not the program.

Training frameworks keep their memory instead (PyTorch's caching allocator on GPUs; jemalloc or tcmalloc,
which PyTorch's CPU performance guide recommends). ``keep_freed_memory`` asks glibc for the same: no
``mmap`` per allocation, and no giving back of the heap's free top, so a freed buffer is reused already
touched. A rank's peak memory is unchanged; it is only not returned until the rank exits. Every rank
process calls it: TorchWorld's (``worker.main``) and those torchrun starts (``torchrun.main``).
"""

from __future__ import annotations

import ctypes
import ctypes.util

# mallopt parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Tell glibc's malloc, in this process, to serve large allocations from its heap and never shrink it.

    Returns whether it took effect (False where the C library is not glibc: nothing changes there)."""
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success; the largest int keeps the heap's free top however large it grows
    return mallopt(M_MMAP_MAX, 0) == 1 and mallopt(M_TRIM_THRESHOLD, 2**31 - 1) == 1
