"""The grader's code in the student's process, sealed: a reply is sent only while it is as it was before the file
loaded.

The student's process (``student_process``) runs the answer and builds the record the grader checks: which
messages a collective sent, their labels, what each device received. Student code runs in that process, so it could
rebind what builds the record (``__main__.plain_trace``) or patch the library (``Device.all_reduce``, a
collective's labels) and hand back the library's all-reduce dressed as a hand-written ring. ``seal()`` notes, before
the file loads, every function, class, method and constant of the simulator's modules and of the student process's
own module (and loads every module a run can use, so none is loaded later, after the student's code could have
patched it); the check it returns lists what differs. The process checks it after each run and before it replies:
anything changed is tampering, and the grader says FAILED.

The check calls only what it captured when the seal was made (builtins too), so rebinding ``builtins.vars`` or a
module's ``inspect`` changes nothing. It is not an operating-system sandbox (see ``answer_guard``).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from collections.abc import Callable
from types import FunctionType, ModuleType
from typing import Any

# what a run on the simulator and the record may use: every module of these packages is loaded before the seal
PACKAGES = (
    "simulator.core",
    "simulator.cost",
    "simulator.tensors",
    "simulator.collectives",
    "simulator.teach.exercises",
)
_CONSTANTS = (str, bytes, int, float, complex, bool, type(None))  # compared by value (a tuple, a set: by identity)


def load_all(packages: tuple[str, ...] = PACKAGES) -> None:
    """Import every module of ``packages`` (what a run can reach), so that the seal covers them as they are now."""
    for name in packages:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{name}."):
            importlib.import_module(info.name)


def seal(own: str = "__main__") -> Callable[[], list[str]]:
    """Note the simulator's modules and ``own`` as they are now; the function returned lists, as dotted names, what
    differs later (an empty list: nothing)."""
    names = tuple(n for n, m in sys.modules.items() if m is not None and (n == own or n.startswith("simulator")))
    modules = tuple(sys.modules[n] for n in names)

    def take(
        _modules=modules,
        _names=names,
        _vars=vars,
        _id=id,
        _type=type,
        _isinstance=isinstance,
        _getattr=getattr,
        _list=list,
        _function=FunctionType,
        _module=ModuleType,
        _constants=_CONSTANTS,
        _zip=zip,
    ) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        for name, module in _zip(_names, _modules):
            for attr, value in _list(_vars(module).items()):
                key = name + "." + attr
                if _isinstance(value, _module) and _getattr(value, "__name__", None) == key:
                    continue  # a submodule, bound on its package when it is imported (later is no change)
                if _type(value) is _function:
                    seen[key] = (_id(value), value.__code__, value.__defaults__)
                elif _isinstance(value, type) and _getattr(value, "__module__", "") == name:
                    seen[key] = _id(value)
                    for m, fn in _list(_vars(value).items()):
                        inner = _getattr(fn, "__func__", fn)
                        code = inner.__code__ if _type(inner) is _function else None
                        if code is not None or not m.startswith("__"):  # pickle notes __slotnames__ on a class
                            seen[key + "." + m] = (_id(fn), code)
                elif _isinstance(value, (type, _module, tuple, frozenset)) or _type(value) in _constants:
                    seen[key] = (_id(value), value) if _type(value) in _constants else _id(value)
        return seen

    before = take()

    def changed(_take=take, _before=before, _sorted=sorted, _set=set) -> list[str]:
        now = _take()
        return _sorted(k for k in _set(_before) | _set(now) if _before.get(k, None) != now.get(k, None))

    return changed


__all__ = ["PACKAGES", "load_all", "seal"]
