"""The guard of a student's process (``student_process``): limits, an audit hook, and the library's schedules
disarmed.

``limit`` sets hard resource limits (what a process cannot raise again): address space, CPU seconds, the bytes
of any one file it writes (its printed output included). ``install_guard`` adds an audit hook
(``sys.addaudithook``, which Python code cannot remove) that refuses, with a ``PermissionError`` saying "graded
code may not ...": reading or listing a denied folder (the teacher's ``instructor/``, the class's files, the
other answers' scratch folders), by any path (symbolic links and ``/proc/<pid>/cwd`` resolved as the kernel
resolves them); another process's ``/proc`` files, and its own memory; importing a denied module; starting another
program (it would run without the hook), loading C code through ctypes, reaching the hook through the garbage
collector, rewriting a function's code or defaults; more than a few forks. ``disarm`` replaces every function of
the library's schedule generators, wherever a loaded module holds it, by one that refuses.

An audit hook is not an operating-system sandbox: it stops what a student can try in Python.
"""

from __future__ import annotations

import contextlib
import importlib
import resource
import signal
import sys
from pathlib import Path
from types import FunctionType
from typing import Any

_GENERATORS = ("classic", "looped", "v")  # the library's schedule generators, in simulator.parallel.schedules


def limit(memory: int, cpu: float, output: int) -> None:
    """Hard limits on this process and what it starts: address space, CPU seconds, bytes per file written. A limit
    the system does not enforce (macOS and the address space) is left as it is; the time limit still holds."""
    for what, value in (
        (resource.RLIMIT_AS, memory),
        (resource.RLIMIT_CPU, max(1, int(cpu) + 1)),
        (resource.RLIMIT_FSIZE, output),
        (resource.RLIMIT_CORE, 0),
    ):
        hard = resource.getrlimit(what)[1]
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(what, (value, value))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the output limit a write fails (an error), not the process


def install_guard(own: str, denied_dirs: tuple[str, ...], denied_modules: tuple[str, ...], forks: int) -> None:
    """The audit hook (see the module docstring): ``own`` is the scratch folder (always allowed), ``denied_dirs``
    what may not be read. Its settings are default arguments (immutable tuples; rebinding them is refused) and it
    calls only what it captured here, builtins too (``builtins.any = ...`` changes nothing), so student code cannot
    loosen it."""
    import posix

    encoding = sys.getfilesystemencoding()

    def inside(
        path: Any,
        _own=own,
        _dirs=denied_dirs,
        _lstat=posix.lstat,
        _readlink=posix.readlink,
        _cwd=posix.getcwd,
        _pid=posix.getpid,
        _encoding=encoding,
        _isinstance=isinstance,
        _str=str,
        _int=int,
        _bytes=bytes,
        _len=len,
        _any=any,
    ) -> bool:
        if _isinstance(path, _int):
            return False
        path = path.decode(_encoding, "surrogateescape") if _isinstance(path, _bytes) else _str(path)
        if not path.startswith("/"):
            path = _cwd() + "/" + path
        # resolve the path one component at a time, following symbolic links (as the kernel will)
        todo, done, hops = [p for p in path.split("/") if p], [], 0
        while todo:
            part = todo.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            here = "/" + "/".join([*done, part])
            try:
                link = _readlink(here) if (_lstat(here).st_mode & 0o170000) == 0o120000 else None
            except OSError:
                link = None
            if link is not None and hops < 40:
                hops += 1
                todo = [p for p in link.split("/") if p] + todo
                if link.startswith("/"):
                    done = []
                continue
            done.append(part)
        real = "/" + "/".join(done)
        if real == _own or real.startswith(_own + "/"):
            return False
        if _len(done) > 1 and done[0] == "proc" and done[1].isdigit():
            # another process's files (the grader's, another answer's) are out of reach; its own memory too (writing
            # it would undo the hook)
            return _int(done[1]) != _pid() or real.endswith("/mem")
        return _any(real == d or real.startswith(d + "/") for d in _dirs)

    def hook(
        event: str,
        args: tuple,
        _inside=inside,
        _any=any,
        _modules=(*denied_modules, "_posixsubprocess"),
        _forks=[forks],  # noqa: B006 (the one counter it keeps: forks left)
        _denied=frozenset(
            {
                "subprocess.Popen",
                "os.exec",
                "os.posix_spawn",
                "os.spawn",
                "os.system",
                "os.forkpty",
                "pty.spawn",
                "ctypes.dlopen",
                "ctypes.dlsym",
                "ctypes.dlsym/handle",
                "ctypes.cdata",
                "ctypes.cdata/buffer",
                "gc.get_objects",
                "gc.get_referrers",
                "gc.get_referents",
                "os.symlink",
                "os.link",
                "os.chroot",
                "sys.setprofile_all_threads",
                "sys.settrace_all_threads",
            }
        ),  # fmt: skip
        _paths=frozenset({"open", "os.listdir", "os.scandir", "os.chdir", "os.rename", "os.truncate", "os.walk"}),
    ) -> None:
        if event in _denied:
            raise PermissionError(f"graded code may not do this ({event}): an exercise's answer never needs it")
        if event == "object.__setattr__" and args[1] in ("__code__", "__defaults__", "__kwdefaults__"):
            raise PermissionError("graded code may not rewrite a function's code or defaults")
        if event == "os.fork":
            if _forks[0] <= 0:
                raise PermissionError("graded code may not start more than a few processes")
            _forks[0] -= 1
        elif event == "import" and _any(args[0] == m or args[0].startswith(m + ".") for m in _modules):
            raise ImportError(f"graded code may not import {args[0]}")
        elif event in _paths and args and _inside(args[0]):
            raise PermissionError(f"graded code may not read {args[0]!s}: it is outside the student's folder")

    _no_fork_exec()
    sys.addaudithook(hook)


def _no_fork_exec() -> None:
    """``subprocess`` audits before it calls ``_posixsubprocess.fork_exec``, which audits nothing: every holder of
    that function gets one that refuses (and the guard refuses loading it again)."""
    import subprocess

    try:
        import _posixsubprocess
    except ImportError:  # not a POSIX system: nothing to replace
        return

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError("graded code may not start another program (fork_exec)")

    _posixsubprocess.fork_exec = refused
    if hasattr(subprocess, "_fork_exec"):  # its own name for it (multiprocessing asks the module, now refusing)
        subprocess._fork_exec = refused


def disarm(package: str) -> str:
    """Replace every function of the library's schedule generators, wherever a loaded module of the simulator holds
    it (as a name, or in a registry), by one that refuses; returns the package's folder (which the guard then keeps
    unread, so the code cannot be loaded again)."""
    originals: dict[int, Any] = {}
    for name in _GENERATORS:
        module = importlib.import_module(f"{package}.{name}")
        for value in vars(module).values():
            if isinstance(value, FunctionType) and value.__module__ == module.__name__:
                originals[id(value)] = _refuser(f"{module.__name__}.{value.__name__}")
    for name, module in list(sys.modules.items()):
        if not name.startswith("simulator.") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if id(value) in originals:
                setattr(module, attr, originals[id(value)])
            elif isinstance(value, dict):
                for key, item in list(value.items()):
                    if id(item) in originals:
                        value[key] = originals[id(item)]
    return str(Path(importlib.import_module(package).__file__).parent)


def _refuser(name: str) -> Any:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise PermissionError(
            f"graded code may not call {name}, the library's own schedule: the exercise is to write the rows "
            "yourself, from the rule"
        )

    return refused
