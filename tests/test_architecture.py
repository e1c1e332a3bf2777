"""The package's shape: a few layers, no import circles (import-linter checks the layers' order, `make test`)."""

import graphlib
from pathlib import Path

import grimp

import simulator

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest brings tomli
    import tomli as tomllib

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


def _placed_by_contracts() -> set[str]:
    """Every module a layers contract of pyproject.toml names: ``container.module`` for each layer's members."""
    config = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["importlinter"]
    placed = set()
    for contract in config["contracts"]:
        if contract["type"] == "layers":
            for container in contract["containers"]:
                for layer in contract["layers"]:
                    placed |= {f"{container}.{m.strip()}" for m in layer.replace(":", "|").split("|")}
    return placed


def test_every_module_sits_in_a_contract():
    placed = _placed_by_contracts()
    unplaced = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":  # a package is placed by its parent's contract
            parts = parts[:-1]
        if len(parts) > 1 and ".".join(parts) not in placed:
            unplaced.append(".".join(parts))
    assert not unplaced, (
        "add these modules to their package's layers contract in pyproject.toml (and to its docstring): "
        + ", ".join(unplaced)
    )
