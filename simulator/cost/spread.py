"""Measured spread of message times: each message draws its own time from what calibration measured.

On real processes the same message does not always take the same time. On a machine whose cores the
ranks share, a rank that waits for a message is sometimes woken at once and sometimes only when the
scheduler next looks (a tick later), so one size's times have a long tail. A program of many messages
pays for that tail: its median time is not the sum of its messages' median times. ``MessageSpread``
keeps, for each size calibration measured, every measured time's difference from the fitted line; a
simulation then gives each message the line's time plus one of those differences, drawn at random
(the differences of the nearest measured size, on a log scale). At a measured size a message's time
is then one of the measured times, as often as it was measured.

Draws are reproducible and independent of the engine's scheduling: each directed link has its own
random stream, seeded by ``seed`` and the link's two ends, and draws once per message in the order
its sender sent them. Messages on one link still arrive in the order they were sent.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MessageSpread:
    """Per measured size, the measured message times minus the fitted line's, in seconds.

    sizes: the measured message sizes in bytes, increasing; extra: one tuple of differences per size;
    seed: the random streams' seed (a different seed, a different but equally likely run).
    """

    sizes: tuple[int, ...]
    extra: tuple[tuple[float, ...], ...]
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(int(n) for n in self.sizes))
        object.__setattr__(self, "extra", tuple(tuple(float(e) for e in row) for row in self.extra))
        if not self.sizes or list(self.sizes) != sorted(set(self.sizes)) or self.sizes[0] < 1:
            raise ValueError(f"MessageSpread.sizes must be increasing sizes in bytes >= 1, got {self.sizes}")
        if len(self.extra) != len(self.sizes) or any(not row for row in self.extra):
            raise ValueError("MessageSpread.extra needs one non-empty tuple of measured differences per size")
        if not all(math.isfinite(e) for row in self.extra for e in row):
            raise ValueError("MessageSpread.extra must hold finite numbers of seconds")

    @classmethod
    def measured(cls, samples: dict[int, Sequence[float]], line, seed: int = 0) -> MessageSpread:
        """The spread of measured ``samples`` ({bytes: seconds of each repeat}) around ``line(bytes)``."""
        sizes = sorted(samples)
        return cls(tuple(sizes), tuple(tuple(t - line(n) for t in samples[n]) for n in sizes), seed)

    def nearest(self, nbytes: float) -> int:
        """The index of the measured size nearest ``nbytes`` on a log scale."""
        k = bisect.bisect_left(self.sizes, nbytes)
        if k == 0:
            return 0
        if k == len(self.sizes):
            return k - 1
        below, above = self.sizes[k - 1], self.sizes[k]
        return k - 1 if math.log(max(nbytes, 1) / below) <= math.log(above / max(nbytes, 1)) else k

    def describe(self) -> str:
        k = len(self.sizes) // 2
        row = np.asarray(self.extra[k])
        return (
            f"message times drawn from {sum(map(len, self.extra))} measurements at {len(self.sizes)} sizes "
            f"(at {self.sizes[k]} B: {np.percentile(row, 10) * 1e6:+.0f} to {np.percentile(row, 90) * 1e6:+.0f} us "
            f"around the line, 10th to 90th percentile)"
        )


class SpreadNetwork:
    """A run's links (any ``LinkState``) with each message's arrival moved by a measured difference."""

    __slots__ = ("_inner", "_spread", "_streams", "_last", "shared_links")

    def __init__(self, inner, spread: MessageSpread) -> None:
        self._inner = inner
        self._spread = spread
        self._streams: dict[tuple[int, int], np.random.Generator] = {}
        self._last: dict[tuple[int, int], float] = {}  # each link's latest arrival: no overtaking
        self.shared_links = inner.shared_links

    def is_private(self, src: int, dst: int) -> bool:
        return self._inner.is_private(src, dst)

    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float, float]:
        start, done, arrive = self._inner.transfer(src, dst, nbytes, t)
        link = (src, dst)
        stream = self._streams.get(link)
        if stream is None:
            stream = self._streams[link] = np.random.default_rng([self._spread.seed, src, dst])
        row = self._spread.extra[self._spread.nearest(nbytes)]
        arrive = max(arrive + row[int(stream.integers(len(row)))], done, self._last.get(link, 0.0))
        self._last[link] = arrive
        return start, done, arrive
