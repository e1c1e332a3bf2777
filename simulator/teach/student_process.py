"""The student's process: it loads one student file, runs what the grader asks, and sends back records, not verdicts.

``python -I -B simulator/teach/student_process.py``, started by ``remote_answer.RemoteAnswer``. The grader decides
every verdict in its own process, which never runs student code; this process only answers requests, one frame
each, on a private copy of its standard output:

- ``{"kind": "run", "size": n, "args": [...]}``: run the answer as a rank program on ``World(n)`` (each argument a
  value, or ``("per device", [part of device 0, ...])``), answered by the run's record: a plain ``Trace``, the
  outputs, and the student's lines that made each device call (for the hint);
- ``{"kind": "call", "args": [...]}``: call the answer (the schedule exercise's ``schedule(p, m)``), answered by
  what it returned, as plain data;
- ``{"kind": "bye"}``: end. Whatever this process writes on the channel after that is tampering.

Before any student code loads, it limits itself and installs an audit hook that refuses what real graded code
never needs and a forger does (``answer_guard``: the teacher's folder, the class's other files, another program,
and for the schedule exercise the library's schedules, however reached), and seals the grader's code in this process
(``answer_seal``: a reply made after the file changed it, a rebound ``plain_trace`` or a patched collective, says
"tampered", not the record). The file runs from a scratch folder
holding a copy of it alone. The notebook's setup names (``stage_a``, ``BETA``, ...) are
given to the file, so an answer cell copied from its notebook runs as it ran there.

Nothing here is a verdict: whatever this process sends, the grader checks it against the single-device run and the
split as it checks a run made in its own process.
"""

from __future__ import annotations

import importlib
import os
import pickle
import runpy
import struct
import sys
import traceback
from collections.abc import Iterator, Mapping
from itertools import islice
from pathlib import Path
from types import FunctionType
from typing import Any

from simulator.teach.answer_guard import disarm, install_guard, limit
from simulator.teach.answer_seal import load_all, seal

MAGIC = b"SIMR"  # every frame: MAGIC, its length (8 bytes, big-endian), then a pickle
HEADER = struct.Struct(">4sQ")
ITEMS = 1_000_000  # the most items of a list (or of what an iterator gives) a reply carries

# The names each exercise's notebook sets up before its answer cell (its first cell's imports), by exercise: name ->
# the module it comes from. ``np`` is given too, where the notebook imports NumPy. A test keeps this in step with
# the notebooks.
_SEEDS, _TENSOR, _DATA = (
    "simulator.teach.exercises.seeds",
    "simulator.teach.exercises.tensor",
    "simulator.teach.exercises.data",
)
SETUP: dict[str, dict[str, str]] = {
    "split-the-seed": {"X": _SEEDS, "model": _SEEDS, "stage_a": _SEEDS, "stage_b": _SEEDS},
    "raw-input-bug": {"X": _SEEDS, "stage_a": _SEEDS, "stage_b": _SEEDS},
    "column-split": {"W": _TENSOR, "X": _TENSOR},
    "row-split": {"W": _TENSOR, "X": _TENSOR},
    "ring-all-reduce": {"P": "simulator.teach.exercises.ring", "XS": "simulator.teach.exercises.ring"},
    "1f1b-schedule": {
        "pipeline_of": "simulator.teach.exercises.schedule",
        "run_schedule": "simulator.teach.exercises.schedule",
        "bubble": "simulator.parallel.measure",
        "peak_activation_microbatches": "simulator.parallel.measure",
    },
    "data-parallel-average": {"W": _DATA, "X": _DATA, "Y": _DATA, "mean_gradient": _DATA},
    "zero-1-step": {"BETA": _DATA, "G": _DATA, "LR": _DATA, "M": _DATA, "P8": _DATA},
}
WITHOUT_NUMPY = frozenset({"1f1b-schedule"})  # its notebook's setup cell does not import NumPy
# The exercises whose answer must not come from the library: the modules whose every function is replaced, in
# the student's process, by one that refuses (however it is reached: at import, in a thread, profiler or not).
LIBRARY = {"1f1b-schedule": "simulator.parallel.schedules"}
SETUP_NAMES = frozenset({"np", *(n for names in SETUP.values() for n in names)})


# ---- frames -------------------------------------------------------------------------------------------


def frame(obj: Any) -> bytes:
    data = pickle.dumps(obj, protocol=4)
    return HEADER.pack(MAGIC, len(data)) + data


def write_frame(fd: int, obj: Any) -> None:
    view = memoryview(frame(obj))
    while view:
        view = view[os.write(fd, view) :]


def read_frame(fd: int) -> Any:
    """A frame from the grader (trusted: it wrote it)."""
    head = _read_exactly(fd, HEADER.size)
    magic, size = HEADER.unpack(head)
    if magic != MAGIC:
        raise ValueError("not a frame from the grader")
    return pickle.loads(_read_exactly(fd, size))


def _read_exactly(fd: int, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            raise EOFError("the grader closed the channel")
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


# ---- loading the file and answering ------------------------------------------------------------------


def load(path: Path, exercise: str) -> tuple[dict[str, Any], Any]:
    """The file's names (the notebook's setup names given to it) and its answer: a function, or the reason none."""
    given: dict[str, Any] = {n: getattr(importlib.import_module(m), n) for n, m in SETUP.get(exercise, {}).items()}
    if exercise in SETUP and exercise not in WITHOUT_NUMPY:
        import numpy as np

        given["np"] = np
    space = runpy.run_path(str(path), init_globals=given, run_name="__student__")
    return space, answer_of(space)


def answer_of(space: dict[str, Any]) -> Any:
    """The function to grade: ANSWER, else the one function the file defines; a string says why there is none."""
    if "ANSWER" in space:
        return space["ANSWER"]
    own = [v for v in space.values() if isinstance(v, FunctionType) and v.__module__ == "__student__"]
    if len(own) == 1:
        return own[0]
    defined = f"defines {len(own)} functions ({', '.join(f.__name__ for f in own)})" if own else "defines no function"
    return f"the file {defined}: write ANSWER = the one to grade"


def error_words(exc: BaseException, path: Path) -> dict[str, Any]:
    """An exception as data: its type, its message, the student's line, the missing name of a NameError."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc  # a device's error carries the program's as its cause
    line = ""
    for frame in traceback.extract_tb(cause.__traceback__):
        if Path(frame.filename).name == path.name:
            line = f"your line {frame.lineno}: `{(frame.line or '').strip()}`"
    if isinstance(cause, SyntaxError):
        line = f"your line {cause.lineno}: `{(cause.text or '').strip()}`"
    missing = getattr(cause, "name", None) if isinstance(cause, NameError) else None
    kinds = {k.__name__ for e in (exc, cause) for k in type(e).__mro__}
    diagnosis = getattr(exc, "diagnosis", None)
    if not isinstance(diagnosis, str):
        diagnosis = "deadlock" if "DeadlockError" in kinds else "contract" if "ContractError" in kinds else None
    return {
        "type": type(exc).__name__,
        "cause": type(cause).__name__,
        "message": str(exc).splitlines()[0] if str(exc) else "",
        "where": line,
        "missing": missing if isinstance(missing, str) else None,
        "refused": any(str(e).startswith("graded code may not") for e in (exc, cause)),
        "diagnosis": diagnosis,
    }


def plain(value: Any, depth: int = 0) -> Any:
    """Data the grader can read without running any of this process's code: arrays, numbers, strings, and lists,
    tuples and dicts of them; anything else becomes a string saying what it was."""
    import numpy as np

    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return value if type(value) in (bool, int, float, complex, str, bytes) or value is None else _base(value)
    if isinstance(value, np.generic):
        return value if value.dtype != object else repr(value)
    if isinstance(value, np.ndarray):
        return np.array(value) if value.dtype != object else f"<an array of Python objects, shape {value.shape}>"
    if depth < 8 and isinstance(value, Mapping):  # a dict of any kind: a dict
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in value.items()}
    if depth < 8 and isinstance(value, (list, tuple, range, set, frozenset, Iterator)):
        # a list, a tuple (named or not), or what iterating gives (a generator of rows, say): a list or a tuple
        items = [plain(v, depth + 1) for v in islice(value, ITEMS)]
        return tuple(items) if isinstance(value, tuple) else items
    if type(value) is slice:
        return slice(plain(value.start), plain(value.stop), plain(value.step))
    if value is Ellipsis:
        return value
    if type(value).__name__ == "FlatSlice" and type(value).__module__ == "simulator.tensors.placements":
        return type(value)(int(value.start), int(value.stop))  # a chunk of an all-reduce, by its two numbers
    return f"<{type(value).__name__} object>"


def _base(value: Any) -> Any:
    for kind in (bool, int, float, complex, str, bytes):
        if isinstance(value, kind):
            return kind(value)
    return repr(value)


def plain_trace(trace: Any) -> Any:
    """The run's trace as plain ``Trace``, ``Message`` and ``Op`` objects holding plain data."""
    from simulator.core.tags import CollectiveTag
    from simulator.core.trace import Message, Op, Trace

    out = Trace(trace.world_size, trace.payloads)
    out.groups = {tuple(int(r) for r in g) for g in trace.groups}
    made: dict[tuple[str, int], Any] = {}
    for kind, rec in trace.events:
        key = ("msg" if kind in ("send", "recv") else "op", rec.id)
        if key not in made:
            if key[0] == "msg":
                tag = CollectiveTag(int(rec.tag)) if isinstance(rec.tag, CollectiveTag) else int(rec.tag)
                new = Message(
                    rec.id, rec.src, rec.dst, tag, plain(rec.shape), plain(rec.dtype), rec.nbytes, rec.t_send,
                    plain(rec.payload), plain(rec.label), rec.t_start, rec.t_arrive,
                )  # fmt: skip
                new.t_recv, new.name, new.index = rec.t_recv, plain(rec.name), plain(rec.index)
                out.messages.append(new)
            else:
                new = Op(
                    rec.id, rec.rank, plain(rec.name), rec.t_start, rec.t_end, rec.flops, plain(rec.inputs),
                    plain(rec.output), plain(rec.index), plain(rec.doc), rec.keep, rec.nbytes, plain(rec.partial),
                    plain(rec.label),
                )  # fmt: skip
                out.ops.append(new)
            made[key] = new
        out.events.append((kind, made[key]))
    out.messages.sort(key=lambda m: m.id)
    out.ops.sort(key=lambda o: o.id)
    out.outputs = plain(trace.outputs)
    return out


def answer(request: dict[str, Any], program: Any, path: Path, reset: Any = lambda: None) -> dict[str, Any]:
    """One request's reply (see the module docstring); ``reset()`` puts the random generators back first."""
    if request["kind"] == "call":
        try:
            return {"kind": "called", "value": plain(program(*request["args"]))}
        except BaseException as exc:  # noqa: BLE001 (the answer's error is the reply)
            return {"kind": "error", "error": error_words(exc, path)}
    from simulator.core.arguments import PerDevice
    from simulator.core.world import World
    from simulator.teach.exercises.callsites import CallSites

    args = [PerDevice(a[1]) if isinstance(a, tuple) and a[0] == "per device" else a for a in request["args"]]
    sites = CallSites()
    reset()  # every run starts NumPy's and Python's random generators where the first did (the reruns compare)
    try:
        with sites:
            engine = World(request["size"]).start(program, *args)
            engine.replay = request.get("replay")  # the isolation check's rerun: what the others received before
            run = engine.finish()
    except BaseException as exc:  # noqa: BLE001 (SystemExit in the answer too: the run's error is the reply)
        return {"kind": "error", "error": error_words(exc, path), "calls": _calls(sites)}
    return {"kind": "ran", "trace": plain_trace(run.trace), "outputs": plain(run.outputs), "calls": _calls(sites)}


def _calls(sites: Any) -> list[tuple]:
    return [plain((c.rank, c.method, c.name, c.peer, c.lineno, c.line)) for c in sites.calls]


def main() -> int:
    requests = os.dup(0)
    channel = os.dup(1)
    config = read_frame(requests)
    scratch = Path(config["file"]).parent
    os.chdir(scratch)
    out = os.open(scratch / ".output.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the requests are the grader's: student code reads nothing there
    os.dup2(out, 1)  # the student's prints go to a file whose tail the grader shows
    os.dup2(out, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    import numpy  # noqa: F401 (loaded before the limits: its threads' memory is counted once)

    import simulator.core.world  # noqa: F401 (the grader's code, loaded before any of the student's)
    import simulator.teach.exercises.callsites  # noqa: F401

    exercise = config["exercise"]
    denied = list(config["denied_dirs"])
    for module in set(SETUP.get(exercise, {}).values()):
        importlib.import_module(module)
    load_all()
    if exercise in LIBRARY:
        denied.append(disarm(LIBRARY[exercise]))
    # what answers, checks and replies, bound before the file loads; the grader's code as it is now (answer_seal)
    respond, ask, reply_with, changed = answer, read_frame, write_frame, seal()
    me, pid, leave = os.getpid(), os.getpid, os._exit

    def say(reply: dict[str, Any]) -> None:
        """Reply on the channel; a child the file forked is not the answer's process: it leaves without a word
        (else its copy of this code answers too, and the grader reads two replies as tampering)."""
        if pid() != me:
            leave(0)
        reply_with(channel, reply)

    limit(config["memory"], config["cpu"], config["output"])
    install_guard(os.path.realpath(scratch), tuple(denied), tuple(config["denied_modules"]), config["forks"])
    path = Path(config["file"])
    try:
        space, program = load(path, exercise)
    except BaseException as exc:  # noqa: BLE001 (any error while loading is this file's reply)
        say({"kind": "load failed", "error": error_words(exc, path)})
        return 0
    named = space.get("EXERCISE")
    student = space.get("STUDENT")
    say(
        {
            "kind": "loaded",
            "exercise": named if isinstance(named, str) else None,
            "student": str(student) if student else "",
            "answer": program if isinstance(program, str) else ("" if callable(program) else "not a function"),
        },
    )
    import random

    import numpy as np

    states = np.random.get_state(), random.getstate()

    def reset() -> None:
        np.random.set_state(states[0])
        random.setstate(states[1])

    while True:
        request = ask(requests)
        if request["kind"] == "bye":
            return 0
        reply = respond(request, program, path, reset)
        tampered = changed()
        if tampered:  # the record would come from patched code: say so, not the record
            reply = {"kind": "tampered", "what": [str(name) for name in tampered[:5]]}
        say(reply)


if __name__ == "__main__":
    sys.exit(main())
