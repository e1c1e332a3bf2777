"""The rank programs calibration runs on real ranks: messages, additions and matrix products, timed.

Ping-pong: ranks pair up (0 with 1, 2 with 3, ...); in each pair the even rank sends n bytes and the
odd one sends them straight back, ``repeats`` times per size, all pairs at once. One-way time =
round trip / 2. Exchange: both partners send at once, so every rank sends and receives at the same
time, as in each step of a ring collective; on a machine whose cores the ranks share, this loaded
time is what a collective sees. Ring: every rank sends to the next and receives from the previous at
once, the step of a ring collective on all ranks, timed as the collective runs its steps: 2(p - 1) of
them back to back after each barrier, the time per step. A step right after a barrier costs more than
one that follows another: on 4 ranks over 2 cores, 2.6 to 3.6 ms for a step of 4 to 256 KiB alone,
1.7 to 2.4 ms each in a train of six (from 4 MiB on, the same either way). Messages
go through the device's ``send``/``recv`` (header and NumPy conversion included), so the times describe
exactly what a simulated message stands for.

Every message is timed as a prediction times a run (``prediction.repeat_seconds``): after a barrier,
from the moment the last rank started to the moment the last rank ended. Timed on each rank's own clock
instead, with no barrier, a step also counts the time a rank waits for a neighbour that is still busy
with the step before (on shared cores, often a scheduler tick), which a simulated message never waits.
So message probes return each rank's (start, end) on the common clock (``dev.clock``), and calibration
makes the durations. After each timed message a real rank waits for its eager send to be taken (``settle``):
otherwise every send's copy lives until the run ends, and each new message is copied into fresh memory
that must be faulted in (four 16 MiB messages at once took 130 ms that way, 24 ms reusing memory).

Additions and matrix products go through ``dev.compute`` as a collective's reductions and a training
step's layers do, so the times include what every op costs on a real rank besides its arithmetic
(the call, the recording). Every rank measures at once: the ranks share the machine as they will in
the runs the model predicts. Op probes return {size: [seconds of each repeat]}: calibration takes a
statistic of them for the fitted lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from ..core.device import Device

# A repeat slower than twice its median plus this is far out: it met something besides the program
# (another process's burst, memory the host had to bring back), not the scheduler's usual 4 ms tick.
FAR_OUT_SECONDS = 0.010


def repeat_seconds(outputs: Sequence[list[tuple[float, float]]]) -> list[float]:
    """Each repeat's duration: from the last rank's start to the last rank's end."""
    return [max(o[k][1] for o in outputs) - max(o[k][0] for o in outputs) for k in range(len(outputs[0]))]


def far_out(values: Sequence[float]) -> np.ndarray:
    """Which of ``values`` (seconds) are far out: over twice their median plus ``FAR_OUT_SECONDS``."""
    v = np.asarray(values, dtype=float)
    return v > 2 * np.median(v) + FAR_OUT_SECONDS


def usual_mean(values: Sequence[float]) -> float:
    """The mean of ``values``, far-out ones left out (see ``far_out``).

    The scheduler's stalls of a tick or so, in one repeat of a small message in three to ten, stay in:
    a run of many messages pays for them, and the mean counts them. A single repeat of 80 ms among
    forty of 1 ms would double a plain mean; it is not what the size costs, and measured all-reduces
    leave such repeats out the same way."""
    v = np.asarray(values, dtype=float)
    return float(np.mean(v[~far_out(v)]))


# median: the typical message; mean: the expected cost, scheduling stalls included (a run of many
# messages pays for them, so the mean predicts a long run better on a busy machine), far-out repeats not
STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "median": lambda v: float(np.median(v)),
    "mean": usual_mean,
}


Span = tuple[float, float]


def round_order(sizes: Sequence[int], round_index: int) -> list[int]:
    """The sizes in the order round ``round_index`` takes them: shuffled, the same on every rank.

    A size always taken right after the largest pays for what that one leaves behind (caches emptied,
    socket buffers grown): 64 KiB all-reduces on 3 ranks had medians of 2 to 3 ms after sizes up to 4 MiB
    and 5 to 7 ms after 64 MiB. In a fresh order each round, every size follows every other alike, in
    calibration and in the measured runs."""
    order = np.random.default_rng(round_index).permutation(len(sizes))
    return [sizes[k] for k in order]


def _interleaved(
    dev: Device, sizes: tuple[int, ...], repeats: int, warmup: int, step: Callable[[int, np.ndarray], Span]
):
    """``step(n, buffer)``'s (start, end) per size and repeat, the sizes taken in turn within each repeat.

    The machine changes over seconds (other work, the scheduler's state): taking every size in each
    round spreads each size's repeats over the whole measurement, so no size is measured only in a
    quiet or only in a busy moment, and the sizes meet the same machine as one another. Each round takes
    them in its own order (``round_order``).
    """
    buffers = {n: np.zeros(n, dtype=np.uint8) for n in sizes}
    out: dict[int, list[Span]] = {n: [] for n in sizes}
    settle = getattr(dev, "settle", None)  # a real rank's eager sends: see the module docstring
    for i in range(warmup + repeats):
        for n in round_order(sizes, i):
            span = step(n, buffers[n])
            if settle is not None:
                settle()
            if i >= warmup:
                out[n].append(span)
    return out


def pingpong(dev: Device, sizes: tuple[int, ...], repeats: int, warmup: int = 3) -> dict[int, list[Span]] | None:
    """(start, start + one-way time) per size and repeat on the even rank of each pair (None elsewhere)."""
    partner = dev.rank ^ 1
    first = dev.rank % 2 == 0

    def trip(n: int, buf: np.ndarray) -> Span:
        dev.barrier()
        t0 = dev.clock
        if partner >= dev.world_size:  # left over: only joins the barriers
            return t0, t0
        if first:
            req = dev.isend(buf, partner, tag=1)
            dev.recv(partner, tag=1, shape=(n,), dtype=np.uint8)
        else:
            dev.recv(partner, tag=1, shape=(n,), dtype=np.uint8)
            req = dev.isend(buf, partner, tag=1)
        dev.wait(req)  # already received (the reply came back), so this returns at once
        return t0, t0 + (dev.clock - t0) / 2

    out = _interleaved(dev, sizes, repeats, warmup, trip)
    return out if first and partner < dev.world_size else None


def exchange(dev: Device, sizes: tuple[int, ...], repeats: int, warmup: int = 3) -> dict[int, list[Span]] | None:
    """Like ``pingpong``, but both partners send at once (the "Sendrecv" pattern of MPI benchmarks)."""
    partner = dev.rank ^ 1
    out = _send_while_receiving(dev, partner, partner, sizes, repeats, warmup)
    return out if partner < dev.world_size else None


def ring(
    dev: Device, sizes: tuple[int, ...], repeats: int, warmup: int = 3, steps: int | None = None
) -> dict[int, list[Span]]:
    """Ring steps: send n bytes to the next rank while receiving n from the previous one, ``steps`` times in
    a row after each barrier (default 2(p - 1), as a ring all-reduce); each train's (start, end) divided by
    ``steps``, so that a repeat lasts one step (see ``_send_while_receiving``)."""
    right, left = (dev.rank + 1) % dev.world_size, (dev.rank - 1) % dev.world_size
    steps = 2 * (dev.world_size - 1) if steps is None else steps
    return _send_while_receiving(dev, right, left, sizes, repeats, warmup, steps)


def _send_while_receiving(
    dev: Device, to: int, frm: int, sizes: tuple[int, ...], repeats: int, warmup: int, steps: int = 1
) -> dict[int, list[Span]]:
    """(start, end) of sending n bytes to ``to`` while receiving n from ``frm``, per size and repeat, each
    train of ``steps`` after a barrier (a rank whose partner is ``dev.world_size`` or more only joins the
    barriers). A train's times come divided by ``steps``: from the last rank's start to the last rank's
    end is then the train's time per step."""

    def train(n: int, buf: np.ndarray) -> Span:
        dev.barrier()
        t0 = dev.clock
        if max(to, frm) < dev.world_size:
            for _ in range(steps):
                req = dev.isend(buf, to, tag=1)
                dev.recv(frm, tag=1, shape=(n,), dtype=np.uint8)
                dev.wait(req)
        return t0 / steps, dev.clock / steps

    return _interleaved(dev, sizes, repeats, warmup, train)


PATTERNS = {"pingpong": pingpong, "exchange": exchange, "ring": ring}


# A training step's ops read what other ops wrote a while before, not what is still in the cache: the
# probes cycle through enough distinct operands (at least this many bytes) that each op finds its
# inputs in memory. A step also keeps what its ops write (activations, gradients until the all-reduce),
# so each op writes into memory no recent op wrote: the probes keep their last outputs alive (this many
# bytes of them). Freed at once instead, each output took the place of the one before, still in the
# cache: a (512, 16) @ (16, 512) product, 2 MiB written, took 0.27 ms that way and 0.37-0.49 ms in a step.
COLD_BYTES = 16 << 20


def _copies(nbytes: int) -> int:
    return max(2, min(64, -(-COLD_BYTES // max(1, nbytes))))


def _time_ops(fn, operands: list[tuple[np.ndarray, ...]], repeats: int, warmup: int) -> list[float]:
    times = []
    kept: list = []  # the latest outputs, COLD_BYTES of them (see above)
    for i in range(warmup + repeats):
        args = operands[i % len(operands)]
        t0 = time.perf_counter()
        out = fn(*args)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
        kept = [*kept[1 - _copies(out.nbytes) :], out]
    return times


def reductions(dev: Device, sizes: tuple[int, ...], repeats: int, warmup: int = 2) -> dict[int, list[float]]:
    """Seconds to add two float64 arrays of n bytes each into a new one, as a collective's reduction does."""
    out = {}
    for n in sizes:
        operands = [(np.ones(n // 8), np.ones(n // 8)) for _ in range(_copies(3 * n))]
        out[n] = _time_ops(
            lambda a, b: dev.compute("calibration.add", np.add, a, b, keep=False), operands, repeats, warmup
        )
    return out


def matmuls(
    dev: Device, shapes: tuple[tuple[int, int, int], ...], repeats: int, warmup: int = 1
) -> dict[tuple[int, int, int], list[float]]:
    """Seconds per float64 (m, k) @ (k, n) product, keyed by (m, k, n), as a layer's forward computes."""
    out = {}
    rng = np.random.default_rng(dev.rank)
    for m, k, n in shapes:
        operands = [
            (rng.standard_normal((m, k)), rng.standard_normal((k, n))) for _ in range(_copies(8 * (m * k + k * n)))
        ]
        out[(m, k, n)] = _time_ops(
            lambda a, b: dev.compute("calibration.matmul", np.matmul, a, b, keep=False),
            operands,
            repeats,
            warmup,
        )
    return out
