"""The package's shape: a few layers, no import circles (import-linter checks the layers' order, `make test`)."""

import ast
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


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else "simulator"


def _outside_names(tree: ast.Module) -> set[str]:
    """Names a module binds to another project's modules (``import torch.distributed as dist``): their private
    names are that project's business, not a reach between our packages."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[0] for a in node.names if not a.name.startswith("simulator")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and not (node.module or "").startswith("simulator"):
            names |= {a.asname or a.name for a in node.names}
    return names


def _import_target(path: Path, node: ast.ImportFrom) -> list[str] | None:
    """The parts of the module an import inside the package names (``["core", "device"]``), or None for an import
    of another project."""
    if node.level:
        base = list(path.relative_to(PACKAGE).parent.parts)
        base = base[: len(base) - node.level + 1]
        return [*base, *filter(None, (node.module or "").split("."))]
    if (node.module or "").split(".")[0] == "simulator":
        return (node.module or "").split(".")[1:]
    return None


def _is_module(parts: list[str]) -> bool:
    where = PACKAGE.joinpath(*parts)
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def test_no_package_reaches_into_another_packages_private_names():
    """``from ..core.device import _nbytes``, ``tensor._mesh(...)``, ``eng._rec`` or ``getattr(dev, "_engine")``
    outside the package that defines the name: each package talks to the others through public names.

    A module's private names are matched exactly. Attributes of objects are matched by name (Python has no types
    to read here): a private attribute read on anything but ``self`` or ``cls`` is a reach when only other packages
    define an attribute or method of that name (and the object is not another project's, as torch's)."""
    trees = {path: ast.parse(path.read_text()) for path in sorted(PACKAGE.rglob("*.py"))}
    attributes: dict[str, set[str]] = {}  # package -> the attributes and methods its classes and objects get
    for path, tree in trees.items():
        names = attributes.setdefault(_package_of(path), set())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        names.add(item.name)
                    elif isinstance(item, (ast.Assign, ast.AnnAssign)):
                        targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                        names |= {t.id for t in targets if isinstance(t, ast.Name)}
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__slots__" for t in node.targets):
                names |= {c.value for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr" and len(node.args) > 1:
                names.add(getattr(node.args[1], "value", ""))
    reaches = []
    for path, tree in trees.items():
        package, outside = _package_of(path), _outside_names(tree)
        where = path.relative_to(PACKAGE.parent)
        modules: dict[str, str] = {}  # a name bound to one of our modules -> that module's package
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or (target := _import_target(path, node)) is None:
                continue
            target_package = target[0] if target else "simulator"
            for alias in node.names:
                if _is_module([*target, alias.name]):
                    modules[alias.asname or alias.name] = target[0] if target else alias.name
                elif target_package != package and (_private(alias.name) or any(map(_private, target))):
                    reaches.append(f"{where}:{node.lineno} imports {alias.name} from {'.'.join(target)}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                name, owner = node.attr, node.value
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr"):
                if len(node.args) < 2 or not isinstance(node.args[1], ast.Constant):
                    continue
                name, owner = node.args[1].value, node.args[0]
            else:
                continue
            if not isinstance(name, str) or not _private(name):
                continue
            if isinstance(owner, ast.Name) and owner.id in modules:  # module._name: exact
                if modules[owner.id] != package:
                    reaches.append(f"{where}:{node.lineno} reads {owner.id}.{name} of {modules[owner.id]}")
                continue
            if isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or owner.id in outside):
                continue
            if name in attributes[package]:
                continue
            others = sorted(p for p, names in attributes.items() if name in names)
            if others:
                reaches.append(f"{where}:{node.lineno} reads {name} of {', '.join(others)}")
    assert not reaches, "use (or add) a public name for these:\n" + "\n".join(reaches)
