"""``partials=`` on a native collective (torch's own all-reduce, reduce and reduce-scatter on gloo ranks) is held to
the model as on simulated ranks: each member's input is held under its term's name, so a name the model lacks is not
verified, a wrong term FAILS and right terms pass, on both (the native collectives ignored the names before: an
unknown one passed there and was not verified in the simulation)."""

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check

pytest.importorskip("torch.distributed")

pytestmark = [pytest.mark.slow, pytest.mark.gloo]

P = 4
XS = np.random.default_rng(1).standard_normal((P, 12))


def summed(dev):
    for r in range(P):
        dev.hold(f"x[{r}]", XS[r])
    return dev.compute("v", lambda: XS.sum(axis=0))


def with_partials(dev, prefix, who, off):
    """Device r's all-reduce of its vector with ``partials=prefix`` on the devices ``who`` (None: every one); device 1's
    vector ``off`` by that much (its hold right: its term is wrong)."""
    x = dev.hold(f"x[{dev.rank}]", XS[dev.rank])
    if dev.rank == 1 and off:
        x = x + off
    return dev.all_reduce(x, partials=prefix if who is None or dev.rank in who else None)


CASES = [
    ("x", None, 0.0, "passed"),
    ("z", None, 0.0, "not verified"),
    ("z", (0,), 0.0, "not verified"),
    ("x", None, 1e-3, "FAILED"),
]


@pytest.mark.parametrize("prefix, who, off, verdict", CASES)
def test_partials_on_a_native_all_reduce_get_the_simulated_verdict(gloo_worlds, prefix, who, off, verdict):
    args = (prefix, who, off)
    simulated = check(World(P).run(with_partials, *args), Reference.of(summed)).verdict
    native = check(gloo_worlds(P, timeout=20).run(with_partials, *args), Reference.of(summed)).verdict
    assert (simulated, native) == (verdict, verdict)


def reduced(dev, kind, prefix):
    """Device r's reduce-scatter, or reduce to device 0, of its vector with ``partials=prefix``; returns the sum there."""
    x = dev.hold(f"x[{dev.rank}]", XS[dev.rank])
    if kind == "reduce":
        out = dev.reduce(x, 0, partials=prefix)
        return out if dev.rank == 0 else None
    dev.reduce_scatter(x, partials=prefix)
    return None


def summed_once(dev):
    for r in range(P):
        dev.hold(f"x[{r}]", XS[r])
    return None


@pytest.mark.parametrize("kind", ["reduce", "reduce_scatter"])
@pytest.mark.parametrize("prefix", ["x", "z"])
def test_partials_on_a_native_reduce_get_the_simulated_verdict(gloo_worlds, kind, prefix):
    model = summed if kind == "reduce" else summed_once
    simulated = check(World(P).run(reduced, kind, prefix), Reference.of(model))
    native = check(gloo_worlds(P, timeout=20).run(reduced, kind, prefix), Reference.of(model))
    assert simulated.verdict == native.verdict == ("not verified" if prefix == "z" else "passed"), native.text()
