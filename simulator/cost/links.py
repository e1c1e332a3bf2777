"""Links during a run: when each one is next free, and what a message posted at time t costs on it.

``CostModel`` (``simulator.cost.model``) says what links and devices are like; each topology's ``network()``
makes one of these per run, and the engine books every message through it (or, on links only their
sender books, inline with the same arithmetic: ``Network.private_links``). Kept apart from the cost
model because this is the engine's hot path, not a description.
"""

from __future__ import annotations

from typing import Any


def _regime_table(cost: Any) -> tuple[tuple[int, float, float], ...]:
    """(min_bytes, latency, 1 / bandwidth) per regime, for the networks' hot path."""
    return tuple((r.min_bytes, r.latency, 1.0 / r.bandwidth) for r in cost.regimes)


def _in_regime(table: tuple[tuple[int, float, float], ...], nbytes: int, alpha: float, inv_bw: float):
    for lo, a, ib in table:
        if nbytes < lo:
            break
        alpha, inv_bw = a, ib
    return alpha, inv_bw


class Network:
    """Per-run state of fully connected links: when each directed link is next free."""

    __slots__ = ("_alpha", "_inv_bw", "_free", "_regimes")
    shared_links = False  # link (src, dst) carries only src's messages

    def __init__(self, cost: Any, world_size: int) -> None:
        self._alpha = cost.latency
        self._inv_bw = 1.0 / cost.bandwidth
        self._free: dict[int, dict[int, float]] = {}  # src -> {dst: when link (src, dst) is next free}
        self._regimes = _regime_table(cost)

    @property
    def alpha(self) -> float:
        """Every link's latency, seconds (outside any size regime)."""
        return self._alpha

    @property
    def inv_bandwidth(self) -> float:
        """Every link's seconds per byte, 1 / B (outside any size regime)."""
        return self._inv_bw

    def private_links(self, src: int) -> dict[int, float]:
        """Device src's outgoing links (dst -> next free time): only src books them, so the engine may
        book them inline, as ``transfer`` does, with ``alpha`` and ``1 / B`` from the cost model."""
        links = self._free.get(src)
        if links is None:
            links = self._free[src] = {}
        return links

    def is_private(self, src: int, dst: int) -> bool:
        """Whether only src books link (src, dst) (always, when fully connected)."""
        return True

    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float, float]:
        """Book a message posted at time t. Returns (start, sender_done, arrival)."""
        alpha, inv_bw = self._alpha, self._inv_bw
        if self._regimes:
            alpha, inv_bw = _in_regime(self._regimes, nbytes, alpha, inv_bw)
        links = self.private_links(src)
        start = links.get(dst, 0.0)
        if start < t:
            start = t
        done = start + nbytes * inv_bw
        links[dst] = done
        return start, done, done + alpha


class RingNetwork:
    """Per-run state of a ring: when each directed neighbour link is next free (see ``Ring``)."""

    __slots__ = ("_alpha", "_inv_bw", "_free", "_routes", "_p", "_regimes")
    shared_links = True  # messages between non-neighbours pass over other devices' links

    def __init__(self, cost: Any, world_size: int) -> None:
        self._alpha = cost.latency
        self._inv_bw = 1.0 / cost.bandwidth
        self._regimes = _regime_table(cost)
        self._p = world_size
        self._free: dict[tuple[int, int], float] = {}
        self._routes: dict[tuple[int, int], list[tuple[int, int]]] = {}

    alpha = Network.alpha
    inv_bandwidth = Network.inv_bandwidth

    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float, float]:
        route = self._routes.get((src, dst))
        if route is None:
            route = self._routes[(src, dst)] = ring_route(src, dst, self._p)
        alpha, inv_bw = self._alpha, self._inv_bw
        if self._regimes:
            alpha, inv_bw = _in_regime(self._regimes, nbytes, alpha, inv_bw)
        free = self._free
        start = t
        for k, link in enumerate(route):  # the head reaches link k at start + k * alpha
            s = free.get(link, 0.0) - k * alpha
            if s > start:
                start = s
        wire = nbytes * inv_bw
        for k, link in enumerate(route):
            free[link] = start + k * alpha + wire
        done = start + wire
        return start, done, done + len(route) * alpha


class TwoLevelNetwork(Network):
    """Per-run state of a two-level machine: links inside a node as ``Network``'s, and each device's network port."""

    __slots__ = ("_alpha_x", "_inv_bw_x", "_node_size", "_tx", "_rx")
    shared_links = True  # a device's incoming network port takes messages from many senders

    def __init__(self, cost: Any, topo: Any, world_size: int) -> None:
        super().__init__(cost, world_size)  # (its links: those inside each node)
        self._alpha_x = topo.inter_latency
        self._inv_bw_x = 1.0 / topo.inter_bandwidth
        self._node_size = topo.node_size
        self._tx = [0.0] * world_size  # when each device's outgoing network port is next free
        self._rx = [0.0] * world_size  # ... and its incoming one

    def is_private(self, src: int, dst: int) -> bool:
        """Whether only src books what a message from src to dst uses: a link inside a node, not the ports."""
        return src // self._node_size == dst // self._node_size

    def transfer(self, src: int, dst: int, nbytes: int, t: float) -> tuple[float, float, float]:
        if src // self._node_size == dst // self._node_size:
            return Network.transfer(self, src, dst, nbytes, t)
        start = max(t, self._tx[src], self._rx[dst])
        done = start + nbytes * self._inv_bw_x
        self._tx[src] = self._rx[dst] = done
        return start, done, done + self._alpha_x


def ring_route(src: int, dst: int, world_size: int) -> list[tuple[int, int]]:
    """The directed links a message from src to dst uses on a bidirectional ring, the shorter way round."""
    p = world_size
    d = (dst - src) % p
    step = 1 if d <= p - d else -1
    links = []
    node = src
    while node != dst:
        nxt = (node + step) % p
        links.append((node, nxt))
        node = nxt
    return links
