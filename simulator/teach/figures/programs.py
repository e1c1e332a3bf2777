"""Small rank programs the built-in figures draw (and the tests check).

Each is a plain rank program ``program(dev, ...)``; the values it computes are real (NumPy), so a
figure never shows a schedule that does not also compute the right answer.
"""

from __future__ import annotations

import numpy as np

from ...core.device import Device


def pipeline_two_stage(dev: Device, xs: list[np.ndarray], f_seconds: float, b_seconds: float) -> list[np.ndarray]:
    """GPipe on two devices: all forwards, then all backwards, one microbatch at a time.

    Stage A (device 0) computes h = 2x + 1 and sends h; stage B (device 1) computes y = h**2. Backward
    (with dy = 1): B computes dh = 2h and sends it back, A computes dx = 2 dh. Each stage keeps what its
    backward needs (x on A, h on B) until that backward has run, so memory rises then falls.
    Returns dx per microbatch on device 0 and y per microbatch on device 1.
    """
    m = len(xs)
    shape, dtype = xs[0].shape, xs[0].dtype
    out = []
    if dev.rank == 0:
        for i, x in enumerate(xs):
            dev.hold(f"x{i}", x)
            h = dev.compute(f"F{i}", lambda x: 2 * x + 1, x, seconds=f_seconds)
            dev.send(h, 1, tag=i, label=f"h{i}")
            dev.free(f"F{i}")
        for i in range(m):
            dh = dev.recv(1, tag=m + i, shape=shape, dtype=dtype, name=f"dh{i}")
            out.append(dev.compute(f"B{i}", lambda g: 2 * g, dh, seconds=b_seconds))
            dev.free(f"x{i}")
            dev.free(f"dh{i}")
            dev.free(f"B{i}")
    else:
        hs = []
        for i in range(m):
            h = dev.recv(0, tag=i, shape=shape, dtype=dtype, name=f"h{i}")
            out.append(dev.compute(f"F{i}", lambda h: h**2, h, seconds=f_seconds))
            hs.append(h)
        for i in range(m):
            dh = dev.compute(f"B{i}", lambda h: 2 * h, hs[i], seconds=b_seconds)
            dev.send(dh, 0, tag=m + i, label=f"dh{i}")
            dev.free(f"h{i}")
            dev.free(f"F{i}")
            dev.free(f"B{i}")
    return out


def ring_pass(dev: Device, block: np.ndarray, steps: int, seconds: float) -> np.ndarray:
    """Each device works on a block, then passes it to its right neighbour, ``steps`` times.

    The send and the receive are posted before the compute (isend/irecv), so passing the previous
    block overlaps with working on the current one. Returns the sum of every block the device saw.
    """
    p, r = dev.world_size, dev.rank
    right, left = (r + 1) % p, (r - 1) % p
    total = np.zeros_like(block)
    for k in range(steps):
        reqs = [dev.isend(block, right, tag=k), dev.irecv(left, tag=k, shape=block.shape, dtype=block.dtype)]
        total = dev.compute(f"work{k}", lambda a, b: a + b, total, block, seconds=seconds)
        dev.wait(reqs[0])
        block = dev.wait(reqs[1])
    return total


def stream_chunks(dev: Device, chunks: list[np.ndarray], seconds: float, overlap: bool) -> list[np.ndarray]:
    """Device 0 produces chunks and streams them to device 1, which consumes them.

    overlap=False: blocking ``send`` and ``recv``; under rendezvous sends a transfer starts only when
    both sides are there, and each side waits for it. overlap=True: the producer ``isend``s and goes
    on producing (waiting for a send only before starting the next), and the consumer keeps two
    ``irecv`` posted ahead of what it consumes, so transfers run under compute.
    Returns 3c - 1 for each chunk c on device 1.
    """
    n = len(chunks)
    if dev.rank == 0:
        pending = None
        for i, c in enumerate(chunks):
            y = dev.compute(f"produce{i}", lambda c: 3 * c, c, seconds=seconds)
            if not overlap:
                dev.send(y, 1, tag=i)
                continue
            if pending is not None:
                dev.wait(pending)
            pending = dev.isend(y, 1, tag=i)
        if pending is not None:
            dev.wait(pending)
        return []
    shape, dtype = chunks[0].shape, chunks[0].dtype
    out = []
    if not overlap:
        for i in range(n):
            y = dev.recv(0, tag=i, shape=shape, dtype=dtype)
            out.append(dev.compute(f"consume{i}", lambda y: y - 1, y, seconds=seconds))
        return out
    # two receives in flight (double buffering): the next transfer can start while one is consumed
    reqs = [dev.irecv(0, tag=i, shape=shape, dtype=dtype) for i in range(min(2, n))]
    for i in range(n):
        y = dev.wait(reqs[i])
        if i + 2 < n:
            reqs.append(dev.irecv(0, tag=i + 2, shape=shape, dtype=dtype))
        out.append(dev.compute(f"consume{i}", lambda y: y - 1, y, seconds=seconds))
    return out


def fan_out(dev: Device, shard: np.ndarray, targets: dict[int, list[int]], seconds: float) -> list[np.ndarray]:
    """Each device sends its shard to the devices ``targets[rank]`` at once, then works on what it got.

    All sends are posted together (isend), so messages that share a link or a network port queue:
    the figure shows the contention.
    """
    senders = [s for s, dsts in targets.items() if dev.rank in dsts]
    reqs = [dev.isend(shard, d, tag=0) for d in targets.get(dev.rank, [])]
    got = [dev.recv(s, tag=0, shape=shard.shape, dtype=shard.dtype, name=f"shard{s}") for s in senders]
    for req in reqs:
        dev.wait(req)
    return [dev.compute(f"use{s}", lambda a: a + 0, g, seconds=seconds) for s, g in zip(senders, got)]


def pipeline_forward(dev: Device, xs: list[np.ndarray], seconds: float) -> list[np.ndarray]:
    """A forward pass through p stages (one per device), microbatch after microbatch.

    Stage r adds r + 1 to what it receives; the last stage returns x + p(p+1)/2 for every microbatch.
    The start-up and drain triangles are the pipeline bubble.
    """
    p, r = dev.world_size, dev.rank
    out = []
    shape, dtype = xs[0].shape, xs[0].dtype
    for i, x in enumerate(xs):
        h = x if r == 0 else dev.recv(r - 1, tag=i, shape=shape, dtype=dtype)
        y = dev.compute(f"F{i}", lambda h: h + (r + 1), h, seconds=seconds)
        if r < p - 1:
            dev.send(y, r + 1, tag=i)
        else:
            out.append(y)
    return out
