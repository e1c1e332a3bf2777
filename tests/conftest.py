"""Test-wide settings and fixtures: property tests explore at random locally and replay a fixed set of examples
in CI; ``gloo_worlds`` opens real gloo worlds for the tests of ``simulator.real`` and ``simulator.torchsim``.

With the CI environment variable set (``.ci/run`` sets it), hypothesis derandomizes: the same
examples every run, no example database, so CI cannot fail at random. Locally, each run explores
new examples (and replays the ones that failed before, from .hypothesis/).
"""

import os

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="module")
def gloo_worlds():
    """``gloo_worlds(n, **options)``: a ``TorchWorld`` of n gloo ranks with those options, started on first use and
    kept for the test module (a world start costs seconds: every rank imports torch); all closed at its end."""
    from simulator.real.launch import TorchWorld

    opened: dict[tuple, TorchWorld] = {}

    def world(n: int, **options) -> TorchWorld:
        key = (n, *sorted(options.items()))
        if key not in opened:
            opened[key] = TorchWorld(n, "gloo", **options).__enter__()
        return opened[key]

    yield world
    for w in opened.values():
        w.__exit__(None, None, None)
