"""A ring all-reduce's payloads computed whole: what each of its messages carries and each reduction makes.

Message by message (``simulator.collectives.ring``), member i of p sends, at reduce-scatter step s, the running
sum of chunk j = i - s - 1 (mod p) over the members j + 1, ..., i in ring order (at step 0 its own chunk, a view
of its input), and adds the chunk arriving from the left into its own block: ``fn(received, block)``. So the
values are the ring's running sums, chunk by chunk: R[k], the sum of k terms, is ``fn(R[k - 1], X[k])`` where
row k of X holds, for each chunk j, member j + k's elements of it; ``ufunc.accumulate`` down X's rows makes
every R[k] at once. That is the same ufunc on the same operands, elementwise, in the same order, as the
messages' (a chunk at a time there, every chunk of every step at once here): the same floats, bit for bit, in
every dtype (tests/collectives/test_booked_payloads.py compares them with the messages' own). The all-gather
then passes each finished chunk around the ring unchanged: one object, forwarded, as the messages forward
what they received.

The objects stand as the message path's do: every message and reduction output a read-only view (here into
one read-only array of every running sum), a reduction's inputs the received object itself and a fresh view
of the member's input, a forwarded chunk the object received, and each member's result its own copy of the whole.
The numbers are worked out at the call; the views and tuples that show them when the trace's payloads are first
read (``RingPayloads.made``, through ``Recorder.keep_later``): a run nobody reads them from makes none of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.hooks import message_payload

if TYPE_CHECKING:
    from .call import _Call


class RingPayloads:
    """A ring all-reduce's payloads, in the order the booking writes its rows: ``msgs`` one per message (stage
    by stage, member by member), ``ops`` one ``((received, block), output)`` per reduction (then, for an average,
    ``((sum,), average)`` per division), and ``final`` the whole reduced array (flat).

    The numbers are worked out when the call is booked (every running sum, the result, each member's first
    message: copied then where the messages copy it); the objects that show them (a view a message or reduction,
    a tuple a reduction: about 8,000 objects at 64 members, a third of a small run's time with their fresh pages)
    only when ``made`` is first called, the trace's first read of them (``Recorder.keep_later``). Views show
    the memory under them whenever they are made, so the later objects are the eager ones' equals, value,
    flags and which are one object alike."""

    __slots__ = ("final", "p", "_made", "_parts")

    def __init__(self, final: np.ndarray, p: int, parts: tuple) -> None:
        self.final, self.p = final, p
        self._made: tuple[list, list] | None = None
        self._parts: tuple | None = parts  # what ``_objects`` makes them from

    @property
    def msgs(self) -> list:
        return self.made()[0]

    @property
    def ops(self) -> list:
        return self.made()[1]

    def made(self) -> tuple[list, list]:
        """The messages' payloads and the reductions' (inputs, output), made on the first call."""
        if self._made is None:
            self._made, self._parts = _objects(*self._parts), None
        return self._made

    def results(self, shape: tuple[int, ...]) -> list[np.ndarray]:
        """Each member's result: its own copy of the whole, as the messages' member assembles it (a view of a
        fresh array, made read-only by the call)."""
        return [self.final.copy().reshape(shape) for _ in range(self.p)]


def ring_payloads(c: _Call, xs: list[np.ndarray], devices: list[Any], bounds: list[int]) -> RingPayloads:
    """Every payload of the ring all-reduce ``c`` over the members' inputs ``xs`` (see the module docstring)."""
    p, fn = c.p, c.fn
    n = xs[0].size
    flats = [x.reshape(-1) for x in xs]
    # step 0: each member sends its own chunk i - 1, a view of its input (copied only where the message path
    # copies it: an input that is not immutable, at the call, as a send copies)
    first = [message_payload(devices[i], flats[i][bounds[j] : bounds[j + 1]], c.group[(i + 1) % p])
             for i in range(p) for j in [(i - 1) % p]]  # fmt: skip
    # the running sums R[k] = fn(R[k - 1], terms[k]), every step at once (``accumulate``: the same ufunc on the same
    # operands, in order)
    terms = ring_terms(flats, bounds)
    sums = fn.accumulate(terms, axis=0, dtype=terms.dtype)
    sums.setflags(write=False)
    final = sums[p - 1]
    if c.op == "avg":  # one division per member, of its own chunk
        final = final / p
        final.setflags(write=False)
    return RingPayloads(final, p, (p, c.op == "avg", _cutter(n, p, bounds), flats, first, sums, final))


def ring_terms(flats: list[np.ndarray], bounds: list[int]) -> np.ndarray:
    """The members' flat inputs in the order the ring adds them up: row k holds, for each chunk j, member
    j + k + 1's elements of it (a p x n array)."""
    p, n = len(flats), flats[0].size
    owner = np.repeat(np.arange(p), [b - a for a, b in zip(bounds, bounds[1:])])  # each element's chunk
    return np.concatenate(flats).reshape(p, n)[(owner + np.arange(1, p + 1)[:, None]) % p, np.arange(n)]


def _objects(p: int, avg: bool, cut: Any, flats: list, first: list, sums: np.ndarray, final: np.ndarray) -> tuple:
    """The payloads' objects, made as the messages make them (see ``RingPayloads``): the messages' in the order of
    their rows, the reductions' ``((received, block), output)`` in the order of theirs."""
    msgs: list = list(first)
    ops: list = []
    received = _roll(first, 1)  # by chunk j: what its reducer receives at step 0 (member j + 1's own chunk j)
    # the block each member adds into at each step, by step and member: member i's chunk i - s - 2 at step s
    # (its blocks reversed and rotated, then transposed: list operations in C, no Python loop per block)
    into = list(zip(*[_roll(cut(flats[i])[::-1], p + 1 - i)[: p - 1] for i in range(p)]))
    for s in range(p - 1):
        made = cut(sums[s + 1])  # R[s + 2], by chunk
        outs = _roll(made, -s - 2)  # by member: member i made chunk i - s - 2
        ops += zip(zip(_roll(received, -s - 2), into[s]), outs)
        if s < p - 2:
            msgs += outs  # sent on at the next step by the member that made it
        received = made
    chunks = received
    if avg:  # ((sum,), average) per member
        averaged = cut(final)
        ops += zip([(chunks[i],) for i in range(p)], averaged)
        chunks = averaged
    for s in range(p - 1):  # all-gather: member i passes chunk i - s on, the object itself
        msgs += _roll(chunks, -s)
    return msgs, ops


def _roll(values: list, shift: int) -> list:
    """``values`` rotated: item i of the result is ``values[(i + shift) % len(values)]``."""
    k = shift % len(values)
    return values[k:] + values[:k]


def _cutter(n: int, p: int, bounds: list[int]) -> Any:
    """A function cutting a flat n-element array into its p chunks (views, one list per call): equal chunks by
    iterating the array's rows (made in C), else slice by slice."""
    if n % p == 0:
        m = n // p
        return lambda flat: list(flat.reshape(p, m))
    edges = list(zip(bounds[:-1], bounds[1:]))
    return lambda flat: [flat[a:b] for a, b in edges]
