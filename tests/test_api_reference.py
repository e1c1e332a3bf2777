"""The API reference (docs/api.md) lists every name ``from simulator import *`` gives, each with an example that
runs: the examples in the docstrings are doctests, run here (``make test`` runs them with the rest)."""

from __future__ import annotations

import doctest
import importlib.util
import inspect
import re
from pathlib import Path

import matplotlib
import pytest

import simulator

matplotlib.use("Agg")  # the plotting examples draw without a screen

API_PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"
HAS_TORCH = importlib.util.find_spec("torch") is not None
NEEDS_TORCH = {"simulate_torch"}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _documented() -> set[str]:
    """The dotted paths of the page's ``::: path`` entries."""
    return set(re.findall(r"^::: ([\w.]+)", API_PAGE.read_text(), re.M))


def _resolve(path: str):
    module, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return importlib.import_module(path)


@pytest.mark.parametrize("name", simulator.__all__)
def test_every_exported_name_has_an_entry_on_the_api_page(name):
    if name in NEEDS_TORCH and not HAS_TORCH:
        pytest.skip("torch is not installed")
    value = getattr(simulator, name)
    entries = [p for p in _documented() if p.rsplit(".", 1)[-1] in (name, getattr(value, "__name__", name))]
    assert any(_resolve(p) is value for p in entries), f"docs/api.md has no '::: ...{name}' entry for simulator.{name}"


def _examples(name: str) -> list[doctest.DocTest]:
    value = getattr(simulator, name)
    if inspect.ismodule(value) or not (inspect.isclass(value) or callable(value)):
        return []
    finder = doctest.DocTestFinder(recurse=False)
    return [t for t in finder.find(value, f"simulator.{name}", globs={}) if t.examples]


@pytest.mark.parametrize("name", simulator.__all__)
def test_every_exported_class_and_function_has_an_example_that_runs(name):
    if name in NEEDS_TORCH and not HAS_TORCH:
        pytest.skip("torch is not installed")
    value = getattr(simulator, name)
    if inspect.ismodule(value) or not (inspect.isclass(value) or callable(value)):
        pytest.skip(f"simulator.{name} is a {type(value).__name__}: its entry describes it")
    tests = _examples(name)
    assert tests, f"simulator.{name}'s docstring needs an Example: section with >>> lines"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in tests:
        runner.run(test)
    assert runner.failures == 0, f"the example of simulator.{name} does not print what it says (see above)"


def test_device_methods_are_documented_in_full():
    for name, member in inspect.getmembers(simulator.Device, inspect.isfunction):
        if name.startswith("_"):
            continue
        doc = inspect.getdoc(member) or ""
        assert len(doc) > 60 and not doc.startswith("See "), f"Device.{name} needs its own docstring: {doc!r}"


def _modules_with_examples() -> list[str]:
    package = Path(simulator.__file__).parent
    return sorted(
        ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")
        for path in package.rglob("*.py")
        if ">>>" in path.read_text()
    )


@pytest.mark.parametrize("module", _modules_with_examples())
def test_every_example_in_the_package_runs(module):
    """The examples of names not exported at the top too (``dev.send``, ``ScheduleRecord``, ...)."""
    if module.startswith("simulator.torchsim") and not HAS_TORCH:
        pytest.skip("torch is not installed")
    loaded = importlib.import_module(module)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    for test in doctest.DocTestFinder().find(loaded, module, globs={}):
        if test.examples:
            runner.run(test)
    assert runner.failures == 0, f"an example in {module} does not print what it says (see above)"
