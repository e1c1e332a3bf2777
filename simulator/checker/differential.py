"""Runs of a program with some devices' own inputs changed: what the isolation check compares.

A device's *own* data is what no other device is given: its part of a ``PerDevice`` argument, or the elements
of an input that a declared split gives to it alone (``Split.given``). A ``Differential`` knows that data and
how to start the program again with some devices' own data replaced by other values of the same shape and
dtype (``started(ranks)``: an ``Engine`` not yet run, so the check can set its ``replay``), everything else held
equal: replicated inputs, the model's weights given to all, the
world, and NumPy's and Python's global random generators (each rerun starts them from the same state).

- ``Differential.of_run(run)``: from a run's own arguments (``World.run(program, *args)``): each
  ``PerDevice`` part is its device's own (other arguments are everyone's);
- ``Differential.of_inputs(size, inputs, split, start_with)``: an exercise's inputs by name, each device given
  its part by the split; an element given to one device alone is that device's own. The inputs' arrays are
  changed in place while the program runs (and put back): whatever else holds them (the grader's frame) sees
  the changed values too, so reading the inputs from there shows as what it is.

What is changed: NumPy arrays of numbers (also inside lists, tuples and dicts). Floats get new values on the
array's scale, each element different and of either sign; integers move by 1 to 3; booleans flip. Anything
else (a config object, a Python number, a string) is left as it is: a program may take it for code, not data.
"""

from __future__ import annotations

import contextlib
import inspect
import random
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.arguments import PerDevice
from .diagnose import show_index
from .split import ALL, Split, elements, part_words


@dataclass(frozen=True)
class Differential:
    """A program that can run again with some devices' own data changed (see the module docstring).

    size:    devices
    own:     device -> what only it holds, in words ("x", "W (columns 0:3)"); a device with nothing of its own
             is left out (changing nothing of it would show nothing)
    started: the devices whose own data to change -> a context in which the program is started on them
             (``World.start``: an engine not yet run) and their data is changed (``frozenset()``: nothing
             changed, the control)
    """

    size: int
    own: Mapping[int, tuple[str, ...]]
    started: Callable[[frozenset[int]], AbstractContextManager[Any]] = field(repr=False)

    @classmethod
    def of_run(cls, run: Any) -> Differential:
        """From a simulated run's program and arguments: each ``PerDevice`` part is its device's own."""
        program, world = getattr(run, "program", None), getattr(run, "world", None)
        if program is None or not hasattr(world, "run"):
            raise TypeError(
                "check(..., isolation=True) runs the program again with one device's inputs changed: give it the "
                "RunResult of World(...).run(program, ...) (a real run's processes are isolated already)"
            )
        n = world.size
        labels = _argument_names(program, run.args, run.kwargs)
        # each part evaluated once: a part drawn at random (PerDevice(lambda r: rng.normal(...))) stays the same
        parts = {
            key: [value.part(r) for r in range(n)] for key, value in _arguments(run) if isinstance(value, PerDevice)
        }
        own = {}
        for r in range(n):
            mine = tuple(labels[key] for key, values in parts.items() if _changes(values[r]))
            if mine:
                own[r] = mine

        @contextlib.contextmanager
        def started(ranks: frozenset[int]) -> Iterator[Any]:
            def given(key: Any, value: Any) -> Any:
                if key not in parts:
                    return value
                values = parts[key]
                return PerDevice([changed(values[r], _rng(ranks, r)) if r in ranks else values[r] for r in range(n)])

            args = tuple(given(k, v) for k, v in enumerate(run.args))
            kwargs = {k: given(k, v) for k, v in run.kwargs.items()}
            yield world.start(program, *args, **kwargs)

        return cls(n, own, started)

    @classmethod
    def of_inputs(
        cls, size: int, inputs: Mapping[str, Any], split: Split, start_with: Callable[[Mapping[str, Any]], Any]
    ) -> Differential:
        """From inputs by name, each device given its part by ``split``: ``start_with(inputs)`` starts the program
        (``World.start``)."""
        alone = owned_elements(size, inputs, split)
        own: dict[int, list[str]] = {}
        for name, masks in alone.items():
            shape = np.shape(inputs[name])
            for r, mine in masks.items():
                index = split.part_of(name, r)
                own.setdefault(r, []).append(_part_name(name, index if not mine.all() else ALL, shape))

        @contextlib.contextmanager
        def started(ranks: frozenset[int]) -> Iterator[Any]:
            # Changed in place where the array can be written: every reference to the inputs in the process (the
            # grader's frames, a closure) then sees the changed values while the program runs, so a program that
            # reads the inputs from anywhere but its arguments cannot read the unchanged ones. Put back after.
            new, undo = dict(inputs), []
            try:
                for name, masks in alone.items():
                    value = inputs[name]
                    fresh = np.array(value, copy=True)
                    for r in sorted(ranks & masks.keys()):
                        fresh[masks[r]] = changed(value, _rng(ranks, r))[masks[r]]
                    if _writable_alone(value, name, inputs):
                        undo.append((value, value.copy()))
                        value[...] = fresh
                    else:
                        new[name] = fresh
                yield start_with(new)
            finally:
                for value, old in reversed(undo):
                    value[...] = old

        return cls(size, {r: tuple(v) for r, v in own.items()}, started)


def owned_elements(size: int, inputs: Mapping[str, Any], split: Split) -> dict[str, dict[int, np.ndarray]]:
    """input -> device -> a mask of the elements the split gives that device alone (its own data; a device with
    none of an input is left out)."""
    alone: dict[str, dict[int, np.ndarray]] = {}
    for name, value in inputs.items():
        if not split.gives(name) or not _changes(value):
            continue
        shape = np.shape(value)
        masks = {}
        for r in range(size):
            index = split.part_of(name, r)
            if index is not None:
                mask = np.zeros(int(np.prod(shape)), dtype=bool)
                mask[elements(index, shape)] = True
                masks[r] = mask
        count = sum(m.astype(int) for m in masks.values())
        for r, mask in masks.items():
            mine = mask & (count == 1)
            if mine.any():
                alone.setdefault(name, {})[r] = mine.reshape(shape)
    return alone


def mixed(size: int, inputs: Mapping[str, Any], other: Mapping[str, Any], split: Split, ranks: frozenset[int]) -> dict:
    """``inputs`` with the own data of the devices ``ranks`` taken from ``other`` (same names, shapes and dtypes),
    everything else as it is: new arrays, ``inputs`` left unchanged. A program run on these and checked against the
    single-device run shows whether a device that saw the same data of its own before answers as it did then
    (a cache kept from an earlier run, which the isolation check's reruns cannot tell from a device that knows
    only its own data and its messages)."""
    new = dict(inputs)
    for name, masks in owned_elements(size, inputs, split).items():
        value = np.array(inputs[name], copy=True)
        for r in sorted(ranks & masks.keys()):
            value[masks[r]] = np.asarray(other[name], dtype=value.dtype)[masks[r]]
        new[name] = value
    return new


def _writable_alone(value: Any, name: str, inputs: Mapping[str, Any]) -> bool:
    """Whether ``value`` can be changed in place without changing another input (a view of the same memory)."""
    if not isinstance(value, np.ndarray) or not value.flags.writeable:
        return False
    others = (v for k, v in inputs.items() if k != name and isinstance(v, np.ndarray))
    return not any(np.shares_memory(value, v) for v in others)


def _part_name(name: str, index: Any, shape: tuple[int, ...]) -> str:
    """An input ("x"), or the part of it a device is given ("W (columns 0:3)", "xs[1]")."""
    if index is ALL:
        return name
    words = part_words(index, shape)
    if not words.startswith("the block"):
        return f"{name} ({words})"
    at = show_index(index)
    return f"{name}{at}" if at.startswith("[") else f"{name}[{at}]"


def changed(value: Any, rng: np.random.Generator) -> Any:
    """The same shape and dtype, every number different (see the module docstring); anything else as it is."""
    if isinstance(value, np.ndarray):
        return _changed_array(value, rng)
    if type(value) in (list, tuple):
        return type(value)(changed(v, rng) for v in value)
    if type(value) is dict:
        return {k: changed(v, rng) for k, v in value.items()}
    return value


def _changed_array(a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    kind = a.dtype.kind
    if kind == "b":
        return ~a
    if kind in "iu":
        return (a + rng.integers(1, 4, size=a.shape).astype(a.dtype)).astype(a.dtype)
    if kind not in "fc":
        return a
    finite = np.abs(a[np.isfinite(a)]) if a.size else np.zeros(0)
    scale = max(float(finite.max()), 1.0) if finite.size else 1.0
    new = rng.uniform(-2.0, 2.0, size=a.shape) * scale
    if kind == "c":
        new = new + 1j * rng.uniform(-2.0, 2.0, size=a.shape) * scale
    new = new.astype(a.dtype)
    same = new == a
    if same.any():  # so that every element differs, whatever a program reads of it
        new[same] = (a[same] + scale).astype(a.dtype)
    return new


def _changes(value: Any) -> bool:
    """Whether ``changed`` changes anything of this value (it holds an array of numbers)."""
    if isinstance(value, np.ndarray):
        return value.dtype.kind in "biufc" and value.size > 0
    if type(value) in (list, tuple):
        return any(_changes(v) for v in value)
    if type(value) is dict:
        return any(_changes(v) for v in value.values())
    return False


def _rng(ranks: frozenset[int], rank: int) -> np.random.Generator:
    """The same new values for the same rerun, every time (the check is deterministic too)."""
    return np.random.default_rng([38, rank, *sorted(ranks)])


def _arguments(run: Any) -> Iterator[tuple[Any, Any]]:
    yield from enumerate(run.args)
    yield from run.kwargs.items()


def _argument_names(program: Callable, args: tuple, kwargs: dict) -> dict[Any, str]:
    """Each argument's name in the program (``def split(dev, x)``: args[0] is "x"), else "argument k"."""
    names: dict[Any, str] = {k: k for k in kwargs}
    try:
        params = [p.name for p in inspect.signature(program).parameters.values()][1:]
    except (TypeError, ValueError):
        params = []
    for k in range(len(args)):
        names[k] = params[k] if k < len(params) else f"argument {k}"
    return names


@contextlib.contextmanager
def held_generators() -> Iterator[Callable[[], None]]:
    """NumPy's and Python's global random generators, reset to one state before each run (``reset()``) and
    put back as they were after: a program that draws from them draws the same in every rerun."""
    np_state, py_state = np.random.get_state(), random.getstate()

    def reset() -> None:
        np.random.set_state(np_state)
        random.setstate(py_state)

    try:
        yield reset
    finally:
        reset()


__all__ = ["Differential", "changed", "held_generators", "mixed", "owned_elements"]
