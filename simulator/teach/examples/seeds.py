"""The seed scenarios: a two-stage model, split over two devices or copied onto both.

Stage A computes 2x + 1; stage B squares what it receives. One device per stage: input 3 gives
A = 7, the value 7 crosses the boundary, B = 49. The classroom bug sends the raw input 3 instead;
B then returns 9, not because B is wrong but because it was handed the wrong input.
"""

from __future__ import annotations

import numpy as np

from ...checker import ALL, Reference, Split
from ...core.device import Device
from ...core.world import World
from ...cost.model import CostModel
from ..scenario import Scenario

BOUNDARY = {"shape": (1,), "dtype": np.float64}  # the contract: what crosses from A to B
# The split the seed teaches: device 0 computes A, device 1 computes B, device 0 alone is given x, and only A
# may cross, from device 0 to device 1.
SEED_SPLIT = Split(compute={"A": 0, "B": 1}, given={"x": 0}, crosses={"A": (0, 1)})
# Replicas: each device computes the whole model on its own input (x[r]), and nothing crosses.
REPLICATED_SPLIT = Split(compute={"A": ALL, "B": ALL}, given={"x": ALL}, crosses={})
# A toy device doing a million operations per second, so each one-element op takes a visible 1 us.
TOY = CostModel(latency=1e-6, bandwidth=1e9, flops=1e6)


def stage_a(x: np.ndarray) -> np.ndarray:
    return 2 * x + 1


def stage_b(h: np.ndarray) -> np.ndarray:
    return h**2


def model(dev: Device, x: np.ndarray) -> np.ndarray:
    """The whole model on one device: the reference every arrangement is checked against."""
    dev.hold("x", x, doc="the model's raw input")
    h = dev.compute("A", stage_a, x, doc="stage A's output, 2x + 1")
    return dev.compute("B", stage_b, h, doc="stage B's output, A squared")


def split(dev: Device, x: np.ndarray) -> np.ndarray | None:
    """Pipeline split: device 0 owns stage A, device 1 owns stage B; A's output crosses."""
    if dev.rank == 0:
        dev.hold("x", x)
        h = dev.compute("A", stage_a, x)
        dev.send(h, dst=1)
        return None
    h = dev.recv(src=0, name="A", **BOUNDARY)
    return dev.compute("B", stage_b, h)


def wrong_input(dev: Device, x: np.ndarray) -> np.ndarray | None:
    """The classroom bug: device 0 computes A but sends the raw input x across the boundary."""
    if dev.rank == 0:
        dev.hold("x", x)
        dev.compute("A", stage_a, x)
        dev.send(x, dst=1)  # BUG: should send A's output
        return None
    h = dev.recv(src=0, name="A", **BOUNDARY)
    return dev.compute("B", stage_b, h)


def replicated(dev: Device, xs: np.ndarray) -> np.ndarray:
    """Every device holds the whole model and finishes its own input; nothing crosses."""
    return model(dev, xs[dev.rank : dev.rank + 1])


def wrong_shape(dev: Device, x: np.ndarray) -> np.ndarray | None:
    """A breaks the contract: it sends a (1, 1) float32 array where B declared (1,) float64."""
    if dev.rank == 0:
        h = dev.compute("A", stage_a, x)
        dev.send(h.reshape(1, 1).astype(np.float32), dst=1)
        return None
    h = dev.recv(src=0, name="A", **BOUNDARY)
    return dev.compute("B", stage_b, h)


def send_send(dev: Device, x: np.ndarray) -> np.ndarray:
    """Both devices send first, then receive; with rendezvous sends neither send can complete."""
    peer = 1 - dev.rank
    dev.send(x, dst=peer)
    return dev.recv(src=peer, **BOUNDARY)


X = np.array([3.0])
XS = np.array([3.0, 4.0])

SCENARIOS = [
    Scenario(
        name="split",
        title="Split model: A on device 0, B on device 1",
        story="Device 0 computes A = 2x + 1 = 7 and sends 7 across the boundary; device 1 squares it: 49. "
        "Neither device alone turns x into the answer.",
        world=World(2, cost=TOY),
        program=split,
        args=(X,),
        reference=lambda: Reference.of(model, X),
        split=SEED_SPLIT,
        tags=("seed", "pipeline"),
    ),
    Scenario(
        name="wrong-input",
        title="Bug: the raw input crosses the boundary",
        story="Device 0 computes A but sends x = 3 instead of A's output 7. B squares what it was given and "
        "returns 9. B is not wrong; it was handed the wrong input, and the check points at that message.",
        world=World(2, cost=TOY),
        program=wrong_input,
        args=(X,),
        reference=lambda: Reference.of(model, X),
        split=SEED_SPLIT,
        expect="diverge",
        tags=("seed", "bug", "pipeline"),
    ),
    Scenario(
        name="replicated",
        title="Replicated model: A-then-B whole on each device",
        story="Each device holds the whole model and finishes its own input: 3 -> 7 -> 49 on device 0 and "
        "4 -> 9 -> 81 on device 1, with no message at all. Two devices here divide the data, not the model.",
        world=World(2, cost=TOY),
        program=replicated,
        args=(XS,),
        reference=lambda: {r: Reference.of(model, XS[r : r + 1]) for r in range(2)},
        split=REPLICATED_SPLIT,
        tags=("seed", "data"),
    ),
    Scenario(
        name="wrong-shape",
        title="Bug: the boundary contract is broken",
        story="B declares it receives a (1,) float64 array; A sends a (1, 1) float32 one. Equal numbers are not "
        "enough: real backends size their receive buffers from the declared shape and dtype.",
        world=World(2, cost=TOY),
        program=wrong_shape,
        args=(X,),
        split=SEED_SPLIT,
        expect="error",
        tags=("seed", "bug", "contract"),
    ),
    Scenario(
        name="send-send-deadlock",
        title="Bug: both devices send first (rendezvous)",
        story="Each device sends to the other before receiving. With rendezvous sends a send waits for its "
        "matching receive, so both wait forever; the simulator names the cycle instead of hanging.",
        world=World(2, cost=TOY, send_mode="rendezvous"),
        program=send_send,
        args=(X,),
        split=Split(crosses={}),  # each device would send x to the other: nothing may cross in this story
        expect="error",
        tags=("bug", "deadlock"),
    ),
]
