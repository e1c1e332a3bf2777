"""Small rank programs that exercise a backend: point-to-point patterns and the two ways a run fails.

They are plain rank programs (they run on the simulator too) kept in a module so that real rank
processes can import them: ``multiprocessing`` with ``spawn`` sends a function by its module and name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.core.device import Device


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


def collectives_tour(dev: Device) -> dict[str, Any]:
    """Every collective once, on integer-valued data (so any backend must agree bit for bit).

    Uneven pieces on purpose (torch.chunk's rule gives trailing chunks fewer rows), a subgroup of the
    even ranks, and a broadcast whose receivers declare nothing.
    """
    r, p = dev.rank, dev.world_size
    x = np.arange(10, dtype=np.int64).reshape(5, 2) * (r + 1)
    out: dict[str, Any] = {}
    out["all_reduce"] = dev.all_reduce(x)
    out["all_reduce_max"] = dev.all_reduce(x, op="max")
    out["all_reduce_in_place"] = dev.all_reduce(x.copy(), in_place=True)
    out["reduce_scatter"] = dev.reduce_scatter(x, axis=0)
    out["all_gather"] = dev.all_gather(x[: r + 1], axis=0, shapes=[(k + 1, 2) for k in range(p)])
    out["broadcast"] = dev.broadcast(x if r == p - 1 else None, src=p - 1)
    out["reduce"] = dev.reduce(x, dst=0)
    chunks = [np.full((k + 1,), 10 * r + k) for k in range(p)] if r == 0 else None
    out["scatter"] = dev.scatter(chunks, src=0)
    out["gather"] = dev.gather(np.full((2,), r), dst=1)
    out["all_to_all"] = dev.all_to_all([np.full((j + 1,), 100 * r + j) for j in range(p)])
    evens = list(range(0, p, 2))
    if r in evens:
        out["evens_all_reduce"] = dev.all_reduce(np.array([r, 1]), group=evens)
    dev.barrier()
    return out


def expected_collectives_tour(p: int) -> list[dict[str, Any]]:
    """What ``collectives_tour`` must return on each of p ranks, computed with NumPy on one device."""
    xs = [np.arange(10, dtype=np.int64).reshape(5, 2) * (r + 1) for r in range(p)]
    total = sum(xs)
    c = -(-5 // p)
    bounds = [min(i * c, 5) for i in range(p + 1)]
    evens = list(range(0, p, 2))
    out = []
    for r in range(p):
        e: dict[str, Any] = {
            "all_reduce": total,
            "all_reduce_max": xs[-1],
            "all_reduce_in_place": total,
            "reduce_scatter": total[bounds[r] : bounds[r + 1]],
            "all_gather": np.concatenate([xs[k][: k + 1] for k in range(p)], axis=0),
            "broadcast": xs[-1],
            "reduce": total if r == 0 else None,
            "scatter": np.full((r + 1,), r),
            "gather": [np.full((2,), k) for k in range(p)] if r == 1 else None,
            "all_to_all": [np.full((r + 1,), 100 * k + r) for k in range(p)],
        }
        if r in evens:
            e["evens_all_reduce"] = np.array([sum(evens), len(evens)])
        out.append(e)
    return out


def named_all_reduce(dev: Device, x: np.ndarray) -> np.ndarray:
    """Each rank holds (rank + 1) * x as its partial; all_reduce names the sum "total" for the checker."""
    part = dev.compute(f"part{dev.rank}", lambda v: v * (dev.rank + 1), x)
    return dev.all_reduce(part, name="total")


def named_all_reduce_reference(dev: Device, x: np.ndarray, p: int) -> np.ndarray:
    """``named_all_reduce`` on one device: every partial, then their sum."""
    parts = [dev.compute(f"part{r}", lambda v, r=r: v * (r + 1), x) for r in range(p)]
    return dev.compute("total", lambda *ps: sum(ps), *parts)


def all_reduce_check(dev: Device, n: int) -> dict[str, bool]:
    """An all-reduce of n float64 values (large enough to travel in pieces), checked on the rank itself.

    Returns what held: the sum is right, the average is right, the input is untouched, and a second
    call gives a second array (the first result is not overwritten by buffer reuse); with
    ``in_place=True``, the sum and the average land in the arrays given up, which end read-only.
    """
    p = dev.world_size
    x = np.arange(n, dtype=np.float64) * (dev.rank + 1)
    before = x.copy()
    total = dev.all_reduce(x)
    mean = dev.all_reduce(x, op="avg")
    expected = np.arange(n, dtype=np.float64) * (p * (p + 1) // 2)
    given, given_avg = x.copy(), x.copy()
    in_place = dev.all_reduce(given, in_place=True)
    in_place_avg = dev.all_reduce(given_avg, op="avg", in_place=True)
    return {
        "sum": bool(np.array_equal(total, expected)),
        "avg": bool(np.allclose(mean, expected / p)),
        "input untouched": bool(np.array_equal(x, before)),
        "results distinct": not np.shares_memory(total, mean) and bool(np.array_equal(total, expected)),
        "read-only": not total.flags.writeable,
        "in place": bool(np.array_equal(given, expected)) and np.shares_memory(in_place, given),
        "in place avg": bool(np.allclose(given_avg, expected / p)) and np.shares_memory(in_place_avg, given_avg),
        "in place read-only": not given.flags.writeable and not in_place.flags.writeable,
    }


def avg_of_integers(dev: Device) -> str:
    """op='avg' on integers, refused on real ranks as in a simulation: returns the error's text (every rank
    refuses before sending anything, so nothing waits)."""
    try:
        dev.all_reduce(np.arange(4) + dev.rank, op="avg")
    except TypeError as exc:
        return str(exc)
    return "no error"


def sleep_then_return(dev: Device, seconds: float, value: Any, ranks: tuple[int, ...] | None = None) -> Any:
    """The ``ranks`` (default: all) wait ``seconds`` without communicating, then every rank returns ``value``.

    A run to interrupt, or to overrun a time limit.
    """
    import time

    if ranks is None or dev.rank in ranks:
        time.sleep(seconds)
    return value


def overlapping_subgroups(dev: Device) -> list[np.ndarray]:
    """On 3 ranks, all-reduces over two subgroups that share rank 0: (0, 1), then (0, 2).

    Rank 0 creates two groups, ranks 1 and 2 one each: group creation must not depend on how many
    groups a rank has created before (see ``simulator.real.groups``).
    """
    out = []
    if dev.rank in (0, 1):
        out.append(dev.all_reduce(np.array([dev.rank + 1, 10]), group=(0, 1)))
    if dev.rank in (0, 2):
        out.append(dev.all_reduce(np.array([dev.rank + 1, 100]), group=(0, 2)))
    return out


def mismatched_all_reduce(dev: Device) -> np.ndarray:
    """Each rank all-reduces an array of a different length: gloo aborts the process (SIGABRT)."""
    return dev.all_reduce(np.ones(4 + 4 * dev.rank))


def sends_held_after_all_reduces(dev: Device, n: int, calls: int) -> list[int]:
    """Rank program: ``calls`` ring all-reduces of n float64 values, message by message; after each, how
    many of this rank's eager sends are still held (a collective's own are waited for as it ends)."""
    held = []
    for _ in range(calls):
        dev.all_reduce(np.ones(n), algorithm="ring")
        held.append(dev.sends_in_flight())
    dev.send(np.ones(1), (dev.rank + 1) % dev.world_size)  # a plain eager send stays held until the run ends
    dev.recv((dev.rank - 1) % dev.world_size)
    return [*held, dev.sends_in_flight()]


def all_reduces_of_a_changing_input(dev: Device, n: int) -> list[np.ndarray]:
    """Rank program: all-reduce x, change x, all-reduce it again, three times (large x: reused buffers)."""
    x, results = np.ones(n), []
    for k in range(3):
        results.append(dev.all_reduce(x, algorithm="ring"))
        x[:] = k + 2  # the caller's own array, changed after each call
    return [r[:4].copy() for r in results] + [results[0][-4:].copy()]


def receive_into_a_slot(dev: Device, wrong_size: bool = False) -> dict[str, Any] | None:
    """Real ranks only (``recv_into`` is a TorchDevice's): rank 0 sends six values, rank 1 receives them
    straight into elements 2..7 of an array of its own; what rank 1 found (the others return None)."""
    if dev.rank == 0:
        dev.send(np.arange(6.0), 1)
    if dev.rank != 1:
        return None
    out = np.zeros(10)
    got = dev.recv_into(0, 0, out[2:7] if wrong_size else out[2:8])
    return {
        "values": out.tolist(),
        "in place": bool(np.shares_memory(got, out)),
        "read-only": not got.flags.writeable,
        "array still writable": bool(out.flags.writeable),
    }
