"""The package's shape: a few layers, no import circles (import-linter checks the layers' order, `make test`)."""

import graphlib
from pathlib import Path

import grimp

import simulator

PACKAGE = Path(simulator.__file__).parent


def test_no_module_imports_itself_through_others():
    graph = grimp.build_graph("simulator", cache_dir=None)  # every import, those for type checking too
    deps = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    graphlib.TopologicalSorter(deps).prepare()  # raises CycleError naming the circle


def test_the_top_of_the_package_stays_small():
    entries = sorted(p.name for p in PACKAGE.iterdir() if p.name != "__pycache__")
    assert len(entries) <= 14, entries  # twelve packages, __init__ and __main__
    for entry in entries:  # each package says what it holds
        if (PACKAGE / entry).is_dir():
            doc = (PACKAGE / entry / "__init__.py").read_text()
            assert doc.startswith('"""') and len(doc.split('"""')[1]) > 200, f"simulator/{entry} needs a docstring"


def test_no_package_holds_more_than_twenty_modules_directly():
    crowded = {}
    for init in PACKAGE.rglob("__init__.py"):
        modules = [p for p in init.parent.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > 20:
            crowded[str(init.parent.relative_to(PACKAGE.parent))] = len(modules)
    assert not crowded, f"split these packages by what their modules hold: {crowded}"
