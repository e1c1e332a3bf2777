"""The named scenarios, usable from Python (``get("split").run()``) and the command line."""

from __future__ import annotations

import difflib
import textwrap

from ..scenario import Scenario
from . import context, experts, schedules, seeds, tensor, training, transformer

_MODULES = (
    seeds,
    tensor,
    training,
    schedules,
    transformer,
    context,
    experts,
)  # each module lists its scenarios in SCENARIOS


def all_scenarios() -> dict[str, Scenario]:
    """Every scenario by name, in the order the modules list them."""
    found: dict[str, Scenario] = {}
    for module in _MODULES:
        for s in module.SCENARIOS:
            if s.name in found:
                raise ValueError(f"two scenarios are named {s.name!r}; names must be unique")
            found[s.name] = s
    return found


def get(name: str) -> Scenario:
    """The scenario called ``name``; the error lists the valid names.

    Args:
        name: the scenario's name (``python -m simulator list`` lists them).

    Examples:
        >>> from simulator import scenario
        >>> s = scenario("split")
        >>> s.world.size, s.run().report.verdict
        (2, 'passed')
    """
    scenarios = all_scenarios()
    if name not in scenarios:
        close = difflib.get_close_matches(name.lower().replace("_", "-"), scenarios, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        names = textwrap.fill(
            ", ".join(scenarios), width=110, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False
        )
        raise KeyError(f"no scenario named {name!r}; {hint}choose one of:\n{names}")
    return scenarios[name]
