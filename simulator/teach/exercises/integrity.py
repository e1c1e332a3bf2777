"""The grader as it was when it loaded: a grade refuses to run once student code has changed it.

A notebook imports the exercises before any of the student's code runs. At that moment ``Snapshot`` notes
every function, method and property of the checker, the engine, the collectives, the tensors and the grader itself
(the object and its code), every constant (a tolerance, a limit, a table of them: its value), every callable NumPy
offers at its top level, in ``numpy.testing``, ``numpy.linalg`` and ``numpy.random``, its classes too (the grader's
comparisons go through them: ``np.finfo`` gives the float floor's ulp; ``np.random.default_rng`` draws the grade's
input sets, and one that draws the notebook's numbers passed a hard-coded answer), and Python's own builtins (the
grader's code calls ``max``, ``any``, ``len`` by name: ``builtins.max`` rebound loosened the float tolerance to
anything); a grade compares them again before it runs a program and before it gives its verdict. Replacing
``check`` or ``numpy.allclose``, patching a method of the checker, or swapping an exercise's definition makes the grade FAILED
with what was changed, and how to start clean. (A program run in the same process could still do worse;
this catches the monkeypatch a curious student tries, not a determined attack: ``grade FOLDER`` runs no student
code in the process that decides.)
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import pkgutil
from collections.abc import Mapping
from typing import Any

import numpy as np

GUARDED = (
    "simulator.checker",
    "simulator.checker.run_check",
    "simulator.checker.results",
    "simulator.checker.explain",
    "simulator.checker.verdict",
    "simulator.checker.split",
    "simulator.checker.split_check",
    "simulator.checker.isolation",
    "simulator.checker.differential",
    "simulator.checker.causal",
    "simulator.checker.reference",
    "simulator.checker.compare",
    "simulator.checker.diagnose",
    "simulator.checker.comm_summary",
    "simulator.core.engine",
    "simulator.core.messaging",
    "simulator.core.arguments",
    "simulator.teach.exercises",
    "simulator.teach.exercises.core",
    "simulator.teach.exercises.grading",
    "simulator.teach.exercises.hints",
    "simulator.teach.exercises.callsites",
    "simulator.teach.exercises.sealed",
    "simulator.teach.exercises.seeds",
    "simulator.teach.exercises.tensor",
    "simulator.teach.exercises.ring",
    "simulator.teach.exercises.schedule",
    "simulator.teach.exercises.data",
    "simulator.teach.exercises.session",
    "simulator.teach.exercises.integrity",  # the snapshot's own code: Snapshot.changed made to say [] passed anything
)
NUMPY = ("numpy", "numpy.testing", "numpy.linalg", "numpy.random")  # (numpy.random draws the grade's input sets)
# every module of these is guarded too: what a run goes through (a collective's label, the engine's records), so
# that dressing the library's all-reduce as a hand-written ring is a change the grade refuses
PACKAGES = ("simulator.core", "simulator.cost", "simulator.tensors", "simulator.collectives", "simulator.checker")
# the functions and classes Python gives every module, by name, as the grader loaded (not ``_``, the prompt's last
# value, which may be a class; a name a notebook adds later, IPython's ``display``, is no code of the grader's)
_BUILTIN_NAMES = tuple(
    attr
    for attr, value in vars(builtins).items()
    if (inspect.isbuiltin(value) or inspect.isclass(value)) and (attr.startswith("__") or attr[:1] != "_")
)


class Snapshot:
    """Every guarded module's functions and classes' methods, with their code, as they are now."""

    def __init__(self) -> None:
        self._take = _take  # as loaded: ``integrity._take`` rebound to give the snapshot back changes nothing
        self.taken = _take()

    def registered(self, name: str, make: object) -> bool:
        """Whether ``make`` is the function the exercise registry held under ``name`` when the snapshot was taken."""
        entry = self.taken.get(f"simulator.teach.exercises.EXERCISES[{name!r}]")
        return entry is not None and entry[0] == id(make)

    def changed(self) -> list[str]:
        """What differs from the snapshot, as dotted names (empty: nothing)."""
        now = self._take()
        return sorted(k for k in self.taken.keys() | now.keys() if self.taken.get(k) != now.get(k))


def _guarded() -> list[str]:
    names = list(GUARDED)
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        names += [info.name for info in pkgutil.walk_packages(path, prefix=f"{package}.") if info.name not in names]
    return names


def _take() -> dict[str, tuple[int, Any]]:
    seen: dict[str, tuple[int, Any]] = {}
    for name in _guarded():
        module = importlib.import_module(name)
        for attr, value in list(vars(module).items()):
            if inspect.isfunction(value) or (inspect.isclass(value) and value.__module__.startswith("simulator")):
                seen[f"{name}.{attr}"] = (id(value), getattr(value, "__code__", None))
            if inspect.isclass(value) and value.__module__ == name:
                for m, fn in vars(value).items():
                    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
                    if code is not None or not m.startswith("__"):  # a property, a class constant too
                        seen[f"{name}.{attr}.{m}"] = (id(fn), code)
            elif isinstance(value, Mapping) and attr.isupper():  # a registry (EXERCISES): itself and its entries
                seen[f"{name}.{attr}"] = (id(value), _constant(value))  # (and a table's numbers: RTOL)
                for k, v in value.items():
                    if callable(v):
                        seen[f"{name}.{attr}[{k!r}]"] = (id(v), getattr(v, "__code__", None))
            elif attr.isupper() and (held := _constant(value)) is not None:  # a tolerance, a limit: its value
                seen[f"{name}.{attr}"] = (0, held)
    for name in NUMPY:  # functions and classes: np.finfo rebound widens the float floor as surely as np.isclose
        for attr, value in list(vars(importlib.import_module(name)).items()):
            if callable(value) and not attr.startswith("_"):
                seen[f"{name}.{attr}"] = (id(value), None)
    for attr in _BUILTIN_NAMES:
        seen[f"builtins.{attr}"] = (id(vars(builtins).get(attr)), None)
    return seen


def _constant(value: Any) -> Any:
    """What a module's constant holds, to see it rebound or changed in place (a tolerance loosened passes wrong
    answers as surely as a patched function): numbers, strings and tuples by their repr, arrays by their bytes, a
    mapping by its entries that are not functions (those are noted apart); None for anything else."""
    if isinstance(value, (bool, int, float, complex, str, bytes, tuple, frozenset)):
        return repr(value)
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, Mapping):
        return tuple((repr(k), _constant(v)) for k, v in value.items() if not callable(v))
    return None
