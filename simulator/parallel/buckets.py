"""An all-reduce that moves along while the device computes: the ring, one step at a time.

A blocking collective (``simulator.collectives``) holds the device until it is done. DDP instead
starts a bucket's all-reduce as soon as the backward has produced the bucket's gradients and keeps
computing. Here that is a ring all-reduce (p - 1 reduce-scatter steps, then p - 1 all-gather steps)
whose steps are posted with isend/irecv. ``progress()`` takes every step whose message has already
arrived (it never blocks); the runtime calls it between ops, so transfers travel on the links while
the device computes. ``finish()`` takes the remaining steps, waiting where it must.

Step s of the reduce-scatter sends chunk (me - s) mod p to the right and adds the chunk (me - s - 1)
mod p that arrives from the left; after p - 1 steps device ``me`` holds the whole sum of chunk
(me + 1) mod p. The all-gather then passes the finished chunks around the ring. Chunks follow
torch.chunk's rule (``placements.chunk_bounds``).

With ``partials``, member m's input is the reference value ``f"{partials}[{m}]"``, and every message
and every addition is named after the sum it holds (``"b.replica[1]+b.replica[2]"``, with the chunk
as index), so the checker compares each step with the one-device values, in the ring's own order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..core.device import Device, Request
from ..tensors.placements import FlatSlice, chunk_bounds
from .mlp import add


class AsyncRingAllReduce:
    """A sum all-reduce of one flat float array over ``group``, advanced by ``progress``/``finish``."""

    def __init__(
        self, dev: Device, flat: np.ndarray, group: Sequence[int], tag: int, label: str, partials: str | None = None
    ) -> None:
        self.dev = dev
        self.partials = partials
        self.group = tuple(group)
        self.p = len(self.group)
        self.me = self.group.index(dev.rank)
        self.tag = tag
        self.label = label
        self.bounds = b = chunk_bounds(flat.size, self.p)
        self.chunks = [np.array(flat[b[j] : b[j + 1]]) for j in range(self.p)]
        self.step = 0
        self.total = 2 * (self.p - 1)
        self.sends: list[Request] = []
        self.recv: Request | None = None
        self.incoming = -1
        if self.total:
            self._post()

    @property
    def done(self) -> bool:
        return self.step == self.total

    def _post(self) -> None:
        p, me, s = self.p, self.me, self.step
        if s < p - 1:  # reduce-scatter: what arrives holds members me-1-s .. me-1
            out_j, in_j = (me - s) % p, (me - s - 1) % p
            members = [(me - 1 - s + k) % p for k in range(s + 1)]
        else:  # all-gather: finished chunks, summed in ring order starting at their number
            s -= p - 1
            out_j, in_j = (me + 1 - s) % p, (me - s) % p
            members = [(in_j + k) % p for k in range(p)]
        right, left = self.group[(me + 1) % p], self.group[(me - 1) % p]
        self.sends.append(
            self.dev.isend(self.chunks[out_j], right, self.tag, label=f"{self.label} step {self.step} chunk {out_j}")
        )
        self.incoming, self.members = in_j, members
        self.recv = self.dev.irecv(
            left,
            self.tag,
            shape=self.chunks[in_j].shape,
            dtype=self.chunks[in_j].dtype,
            name=self._name(members),
            index=self._index(in_j),
        )

    def _name(self, members: list[int]) -> str | None:
        return "+".join(f"{self.partials}[{m}]" for m in members) if self.partials else None

    def _index(self, j: int) -> FlatSlice | None:
        return FlatSlice(self.bounds[j], self.bounds[j + 1]) if self.partials else None

    def _take(self) -> None:
        got = self.dev.wait(self.recv)
        j = self.incoming
        if self.partials:
            self.dev.free(self._name(self.members))  # the chunk is used at once; keep no copy under its name
        if self.step < self.p - 1:
            name = self._name([*self.members, self.me]) or f"{self.label}.reduce"
            self.chunks[j] = self.dev.compute(name, add, got, self.chunks[j], index=self._index(j), keep=False)
        else:
            self.chunks[j] = got
        self.step += 1
        if not self.done:
            self._post()

    def progress(self) -> None:
        """Take every step whose incoming chunk has already arrived; never blocks."""
        while not self.done and self.dev.test(self.recv):
            self._take()

    def finish(self) -> np.ndarray:
        """Take the remaining steps (waiting for their chunks) and return the summed flat array."""
        while not self.done:
            self._take()
        for req in self.sends:
            self.dev.wait(req)
        return np.concatenate(self.chunks)
