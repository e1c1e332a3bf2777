"""Small rank programs that exercise a backend: point-to-point patterns and the two ways a run fails.

They are plain rank programs (they run on the simulator too) kept in a module so that real rank
processes can import them: ``multiprocessing`` with ``spawn`` sends a function by its module and name.
"""

from __future__ import annotations

import numpy as np

from ..device import Device


def ring_pass(dev: Device, x: np.ndarray, rounds: int = 2) -> np.ndarray:
    """Each rank adds its rank to a value and passes it to the next rank, ``rounds`` times round the ring.

    Integer-valued data, so a real run must equal the simulation bit for bit.
    """
    nxt, prv = (dev.rank + 1) % dev.world_size, (dev.rank - 1) % dev.world_size
    value = dev.hold("x", x)
    for r in range(rounds):
        value = dev.compute(f"add{r}", lambda v: v + dev.rank, value)
        req = dev.irecv(prv, tag=r, shape=value.shape, dtype=value.dtype, name=f"from{prv}_{r}")
        dev.send(value, nxt, tag=r)
        value = dev.wait(req)
    return value


def exchange(dev: Device) -> list[np.ndarray]:
    """Ranks 0 and 1 swap several messages at once, undeclared, of different dtypes and shapes.

    Exercises: head-to-head isend/irecv, several messages on one (src, dst, tag) channel waited out
    of order, a 0-d array, an empty array, a boolean array, and a recv with no declared contract.
    """
    if dev.rank > 1:
        return []
    peer = 1 - dev.rank
    values = [
        np.arange(6, dtype=np.int64).reshape(2, 3) * (dev.rank + 1),
        np.array(3.5 + dev.rank),
        np.zeros((0, 4), dtype=np.float32),
        np.array([True, False, dev.rank == 1]),
    ]
    recvs = [dev.irecv(peer, tag=7) for _ in values]
    sends = [dev.isend(v, peer, tag=7) for v in values]
    got = [dev.wait(r) for r in reversed(recvs)][::-1]  # waited last first: order must still hold
    for s in sends:
        dev.wait(s)
    return got


def raise_on(dev: Device, bad_rank: int = 1) -> float:
    """Rank ``bad_rank`` raises while the others wait for it: the run must stop and name it."""
    if dev.rank == bad_rank:
        raise ValueError(f"rank {bad_rank} cannot continue: its shard is empty")
    return float(dev.recv(bad_rank, shape=(), dtype=np.float64))


def recv_never_sent(dev: Device, waiting_rank: int = 1) -> None:
    """Rank ``waiting_rank`` waits for a message rank 0 never sends: a hang, which must become a timeout."""
    if dev.rank == waiting_rank:
        dev.recv(0, tag=5, shape=(1,), dtype=np.float64)


def exit_abruptly(dev: Device, bad_rank: int = 1) -> None:
    """Rank ``bad_rank``'s process dies without a word (as on a crash or an out-of-memory kill)."""
    import os

    if dev.rank == bad_rank:
        os._exit(3)
    dev.recv(bad_rank, shape=(), dtype=np.float64)


def send_unreceived(dev: Device) -> None:
    """Rank 0 sends a message nobody receives: the run reports it as a leftover."""
    if dev.rank == 0:
        dev.send(np.ones(3), 1, tag=2)
