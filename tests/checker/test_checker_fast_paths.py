"""The checker's short cuts give the verdicts of the long way: exact bytes first, tolerances only on a mismatch,
named messages read off the columns, a running sum's value one addition from the last, the block search's look
at one element per place. Each is held to what it replaces: the walk over plain records, np.isclose, a search
over every place."""

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check
from simulator.checker.compare import RTOL, same, tolerances
from simulator.checker.diagnose import block_of
from simulator.core.trace import Trace

P = 4


def vectors(dup: bool = False) -> np.ndarray:
    xs = np.arange(P * 2 * P, dtype=np.float64).reshape(P, 2 * P) * 0.37 - 1.1
    if dup:  # devices 0 and 1 hold the same vector: a message of x[0] also equals x[1]
        xs[1] = xs[0]
    return xs


def model(dev, dup=False):
    xs = vectors(dup)
    for r in range(P):
        dev.hold(f"x[{r}]", xs[r])
    return dev.compute("v", lambda: xs.sum(axis=0))


def named_ring(dev, dup=False, wrong=None):
    """The README's ring by hand, every receive named; ``wrong=(device, step)``: that device sends a chunk one
    too large at that step (a bug the message itself shows)."""
    r = dev.rank
    x = dev.hold(f"x[{r}]", vectors(dup)[r])
    size = x.size // P
    chunks = [x[c * size : (c + 1) * size] for c in range(P)]
    right, left = (r + 1) % P, (r - 1) % P
    for s in range(2 * (P - 1)):
        reduce = s < P - 1
        out_c, in_c = ((r - s) % P, (r - s - 1) % P) if reduce else ((r - s + P) % P, (r - s + P - 1) % P)
        dev.send(chunks[out_c] + (1.0 if wrong == (r, s) else 0.0), right)
        block = np.s_[in_c * size : (in_c + 1) * size]
        if reduce:
            terms = "+".join(f"x[{(in_c + k) % P}]" for k in range(s + 1))
            chunks[in_c] = dev.recv(left, name=terms, index=block) + chunks[in_c]
        else:
            chunks[in_c] = dev.recv(left, name="v", index=block)
    if dup and r < 2:  # device 0's whole vector to device 1: x[0], which equals x[1] with these inputs
        dev.send(x, 1) if r == 0 else dev.recv(0, name="x[0]")
    return np.concatenate(chunks)


def as_records(run) -> Trace:
    """The same run as plain records: the checker walks it the long way (a record per event)."""
    records = Trace(run.trace.world_size)
    records.events, records.messages, records.ops = (
        list(run.trace.events),
        list(run.trace.messages),
        list(run.trace.ops),
    )
    records.outputs, records.groups = run.outputs, run.trace.groups
    return records


@pytest.mark.parametrize(
    "dup, wrong",
    [(False, None), (False, (2, 1)), (False, (1, P)), (True, None)],
    ids=["right", "wrong running sum", "wrong finished chunk", "ambiguous values"],
)
def test_a_named_ring_gets_the_verdict_and_notes_of_the_walk_over_records(dup, wrong):
    ref = Reference.of(model, dup)
    run = World(P).run(named_ring, dup, wrong)
    fast, slow = check(run, ref), check(as_records(run), ref)
    assert fast.text() == slow.text() and fast.checked == slow.checked and fast.notes == slow.notes
    assert fast.ok is (wrong is None)
    if wrong is not None:  # the first wrong message, at the device that received it
        assert (fast.first.where, fast.first.rank) == ("message", (wrong[0] + 1) % P)
    if dup:
        assert any("x[0] and x[1] are equal" in n for n in fast.notes)


def test_a_value_within_the_tolerance_passes_and_one_past_it_fails_each_time():
    """The tolerance is kept per name after the first mismatch: the second and third compare with it."""
    x = np.linspace(1.0, 2.0, 8)

    def program(dev, eps):
        for e in eps:
            dev.hold("x", x * (1 + e))
        return dev.hold("x", x)

    ref = Reference.of(lambda dev: dev.hold("x", x))
    assert check(World(1).run(program, [1e-12, 1e-11, 0.0]), ref).ok
    report = check(World(1).run(program, [1e-12, 1e-5, 1e-12]), ref)
    assert not report.ok and report.first.event == 1


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_same_agrees_with_isclose_under_the_tolerance_it_always_had(dtype):
    rng = np.random.default_rng(7)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30, 1e30], dtype=np.float64)
    with np.errstate(all="ignore"):  # (overflows while the data is made: float16 and 1e30)
        for _ in range(400):
            n = int(rng.integers(1, 6))
            b = rng.normal(size=n) * 10.0 ** rng.integers(-8, 8)
            if rng.random() < 0.3:
                b[rng.integers(n)] = rng.choice(specials)
            b = b.astype(dtype)
            scale = rng.choice([0.0, 1e-9, 1e-6, 1e-4, 1e-2, 1.0])
            a = (b.astype(np.float64) * (1 + scale * rng.normal(size=n))).astype(dtype)
            if rng.random() < 0.2:
                a[rng.integers(n)] = rng.choice(specials)
            r, t = tolerances(b)
            old = bool(np.all(np.isclose(a, b, rtol=r, atol=t, equal_nan=True)))
            assert same(a, b) is old, (a, b)
    assert RTOL[np.dtype(dtype).itemsize] == tolerances(np.ones(1, dtype))[0]


def test_the_block_search_finds_what_a_search_of_every_place_finds():
    rng = np.random.default_rng(3)
    for _ in range(200):
        b = rng.integers(-3, 4, size=(int(rng.integers(2, 12)), 3)).astype(np.float64)
        if rng.random() < 0.2:
            b[rng.integers(len(b)), 0] = rng.choice([np.nan, np.inf])
        n = int(rng.integers(1, len(b)))
        start = int(rng.integers(0, len(b) - n + 1))
        a = b[start : start + n].copy()
        if rng.random() < 0.4:
            a[0, 0] += rng.choice([1e-9, 0.5, 3.0])
        every = next((s for s in range(len(b) - n + 1) if same(a, b[s : s + n])), None)
        found = block_of(a, b)
        assert (found[0].start if found else None) == every, (a, b)
        found = block_of(a.T, b.T)  # along the last axis
        assert (found[1].start if found else None) == every, (a, b)
        line, whole = a[:, 0], b[:, 0]  # one axis only
        every = next((s for s in range(len(whole) - n + 1) if same(line, whole[s : s + n])), None)
        found = block_of(line, whole) if n < len(whole) else None
        assert (found[0].start if found else None) == every or n == len(whole), (line, whole)
