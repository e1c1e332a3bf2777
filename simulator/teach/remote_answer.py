"""A student's answer in its own process, seen from the grader: every run asked for, every wait bounded.

``RemoteAnswer(path, exercise)`` copies the student's file alone into a scratch folder and starts
``student_process.py`` there, in its own session, limited (memory, CPU, output, processes) and guarded (see that
module). The grader then uses it as an answer (``exercises.core.AnswerElsewhere``): ``Exercise.start_program`` asks
it for each run the grade needs (the notebook's inputs, the random ones, and the isolation check's reruns, whose
``replay`` crosses with the request) and gets the run's record, which the grade checks in this process as it
checks a run made here. This process never loads
the student's code, nor anything the student's process made except plain data: a record is read by an unpickler
that builds only traces, messages, ops, arrays and Python's own values.

The first reply to each request is the one that counts. Anything else on the channel (a reply nobody asked for, a
frame that is not a record, bytes after the end, a written "passed") is tampering, and the grade is FAILED with
``tampered`` saying what came. Every read has a deadline: past it, or when the process ends without a reply,
``timed_out`` or ``died`` says so. ``finish()`` ends the process and everything it started, however detached
(its session, and every process that carries this answer's token in its environment), within a bounded time, and
keeps what had already arrived.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.arguments import PerDevice
from ..core.engine import RunResult
from ..core.trace import Message, Op, Trace
from ..core.world import World
from .exercises.callsites import Call
from .exercises.core import AnswerElsewhere
from .student_process import HEADER, MAGIC, frame

MEMORY = 2 * 2**30  # bytes of address space a student's process may map (Python and NumPy take about 0.5 GiB)
OUTPUT = 4 * 2**20  # bytes it may print, or write to any one file
FORKS = 4  # processes it may start (forks: starting another program is refused)
RECORD = 64 * 2**20  # the largest reply read: a run of an exercise is a few kB
GRACE = 2.0  # seconds the process is given to end after its last reply
SCRIPT = Path(__file__).with_name("student_process.py")
PACKAGE = Path(__file__).resolve().parents[1]  # simulator/


class AnswerLost(RuntimeError):
    """No usable reply: the process timed out, ended, or sent something other than what was asked for."""


class RemoteError(Exception):
    """The answer's own error, reported by its process (named by the original type, e.g. ``RankError``)."""

    diagnosis: str | None = None
    where: str | None = None


class RemoteAnswer(AnswerElsewhere):
    """One student file's answer in its own process (see the module docstring)."""

    def __init__(
        self,
        path: str | Path,
        exercise: str,
        *,
        timeout: float,
        denied: Sequence[str | Path] = (),
        scratch: str | Path | None = None,
        memory: int = MEMORY,
        output: int = OUTPUT,
    ) -> None:
        self.path = Path(path).resolve()
        self.deadline = time.monotonic() + timeout
        self.timeout = timeout
        self.timed_out = False
        self.died: str | None = None  # how the process ended before a reply
        self.tampered: str | None = None  # what came on the channel that was not asked for
        self.printed = ""  # the tail of what the student's code printed, once finished
        self._calls: list[Call] = []
        self._token = secrets.token_hex(16)
        # a folder of its own, in ``scratch`` (where the other answers' folders are, out of its reach) or a new one
        self._scratch = Path(tempfile.mkdtemp(prefix="answer-", dir=scratch))
        copy = self._scratch / self.path.name
        shutil.copyfile(self.path, copy)
        repo = PACKAGE.parent
        dirs = [repo / "instructor", repo / ".git", self.path.parent, *map(Path, denied)]
        if scratch is not None:  # the other answers' folders
            dirs.append(Path(scratch))
        modules = ["instructor"]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "MPLBACKEND": "Agg",
            "OMP_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "SIMULATOR_GRADED_ANSWER": self._token,  # how finish() finds whatever it started
        }
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-B", str(SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self._scratch,
            env=env,
            start_new_session=True,
        )
        self._channel = self._proc.stdout.fileno()
        self._requests = self._proc.stdin.fileno()
        for fd in (self._channel, self._requests):
            os.set_blocking(fd, False)
        self._buffer = bytearray()
        self._send_first(
            {
                "file": str(copy),
                "exercise": exercise,
                "memory": memory,
                "cpu": timeout,
                "output": output,
                "forks": FORKS,
                "denied_dirs": sorted({os.path.realpath(d) for d in dirs}),
                "denied_modules": modules,
            }
        )
        self.loaded: dict[str, Any] = {"kind": "lost"}  # what the file holds, once its process has loaded it
        with contextlib.suppress(AnswerLost):  # timed_out, died or tampered says why not
            self.loaded = self._reply(("loaded", "load failed"))

    # ---- what the grade asks ----------------------------------------------------------------------
    def start(self, size: int, args: Sequence[Any]) -> _Started:
        return _Started(self, size, args)

    def run(self, size: int, args: Sequence[Any], replay: Any = None) -> RunResult:
        """Run the answer there on these arguments; ``replay``: what the isolation check hands the devices a rerun
        does not change (``Engine.replay``; it crosses to that process with the request)."""
        given = [("per device", [a.part(r) for r in range(size)]) if isinstance(a, PerDevice) else a for a in args]
        reply = self._ask({"kind": "run", "size": size, "args": given, "replay": replay}, ("ran", "error"))
        self._calls = [Call(*c) for c in reply.get("calls", ()) if _is_call(c)]
        if reply["kind"] == "error":
            raise _error(reply["error"])
        trace, outputs = reply["trace"], reply["outputs"]
        if not _is_trace(trace, size) or not isinstance(outputs, list) or len(outputs) != size:
            raise self._tamper("a reply that is not a run's record")
        trace.outputs = outputs
        return RunResult(outputs, trace, World(size))

    def __call__(self, *args: Any) -> Any:
        reply = self._ask({"kind": "call", "args": list(args)}, ("called", "error"))
        if reply["kind"] == "error":
            raise _error(reply["error"])
        return reply["value"]

    def calls(self) -> list[Call]:
        return list(self._calls)

    # ---- the end --------------------------------------------------------------------------------
    def finish(self) -> None:
        """Say goodbye, wait (bounded) for the process to end and the channel to close, note anything sent after
        the last reply, then stop the process and all it started, keep the tail of what it printed
        (``printed``), and remove the scratch folder."""
        try:
            said_bye = False
            if self._proc.poll() is None and not (self.timed_out or self.tampered):
                with contextlib.suppress(AnswerLost):
                    self._send({"kind": "bye"})
                    said_bye = True
            end = min(self.deadline, time.monotonic() + GRACE)
            while self._read_some(end) == "data":
                pass
            self._stop()
            while self._read_some(time.monotonic()) == "data":  # whatever was written before the stop
                pass
            if said_bye and self._buffer and self.tampered is None:
                self.tampered = "more on the grader's channel after the last reply (a forged result line?)"
        finally:
            self._stop()
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self._proc.wait(timeout=GRACE)
            for pipe in (self._proc.stdin, self._proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()
            self.printed = self._tail()
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _tail(self, lines: int = 3) -> str:
        """The last lines the student's code printed (or the error it ended with)."""
        try:
            with (self._scratch / ".output.txt").open("rb") as f:
                f.seek(0, io.SEEK_END)
                f.seek(max(0, f.tell() - 4096))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    # ---- frames, each wait bounded ---------------------------------------------------------------
    def _ask(self, request: dict[str, Any], kinds: tuple[str, ...]) -> dict[str, Any]:
        if self.timed_out or self.died or self.tampered:
            raise AnswerLost("the answer's process is gone")
        if self.loaded.get("kind") != "loaded":
            raise AnswerLost("the file did not load")
        self._send(request)
        return self._reply(kinds)

    def _send_first(self, obj: Any) -> None:
        with contextlib.suppress(AnswerLost):  # a process that cannot even start is a crash, found at its reply
            self._send(obj)

    def _send(self, obj: Any) -> None:
        """Write a frame, waiting for room in the pipe until the deadline at most (a process that reads nothing
        cannot stall the grader)."""
        view = memoryview(frame(obj))
        with selectors.DefaultSelector() as sel:
            sel.register(self._requests, selectors.EVENT_WRITE)
            while view:
                if time.monotonic() >= self.deadline:
                    self.timed_out = True
                    self._stop()
                    raise AnswerLost(f"stopped after {self.timeout:g} s")
                if not sel.select(timeout=max(0.0, self.deadline - time.monotonic())):
                    continue
                try:
                    view = view[os.write(self._requests, view) :]
                except BlockingIOError:
                    continue
                except OSError:
                    self._ended()
                    raise AnswerLost(self.died or "the answer's process is gone") from None

    def _reply(self, kinds: tuple[str, ...]) -> dict[str, Any]:
        while True:
            if len(self._buffer) >= HEADER.size:
                magic, size = HEADER.unpack(bytes(self._buffer[: HEADER.size]))
                if magic != MAGIC:
                    raise self._tamper("bytes that are not the grader's frames")
                if size > RECORD:
                    raise self._tamper(f"a reply of {size} bytes")
                if len(self._buffer) >= HEADER.size + size:
                    data = bytes(self._buffer[HEADER.size : HEADER.size + size])
                    del self._buffer[: HEADER.size + size]
                    try:
                        reply = _Records(io.BytesIO(data)).load()
                    except Exception as exc:  # noqa: BLE001 (a malformed frame is the student's process's doing)
                        raise self._tamper(f"a reply that is not a record ({exc})") from None
                    if isinstance(reply, dict) and reply.get("kind") == "tampered":  # student_process: answer_seal
                        what = reply.get("what")
                        names = ", ".join(str(n) for n in what[:5]) if isinstance(what, list) else "its code"
                        self.tampered = f"the answer changed the grader's code in its own process ({names})"
                        self._stop()
                        raise AnswerLost(self.tampered)
                    if not isinstance(reply, dict) or reply.get("kind") not in kinds:
                        raise self._tamper("a reply to a question the grader did not ask")
                    return reply
            if time.monotonic() >= self.deadline:
                self.timed_out = True
                self._stop()
                raise AnswerLost(f"stopped after {self.timeout:g} s")
            if self._read_some(self.deadline) == "end":
                self._ended()
                raise AnswerLost(self.died or "the answer's process ended")

    def _read_some(self, deadline: float) -> str:
        """Read what the channel has, waiting until ``deadline`` at most: "data", "waited" (nothing came) or "end"."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._channel, selectors.EVENT_READ)
            while True:
                if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                    return "waited"
                try:
                    chunk = os.read(self._channel, 1 << 16)
                except BlockingIOError:
                    continue
                if not chunk:
                    return "end"
                if len(self._buffer) < RECORD + HEADER.size:  # past that, read and dropped: a flood cannot stall us
                    self._buffer += chunk
                return "data"

    def _ended(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=min(GRACE, max(0.0, self.deadline - time.monotonic())))
        code = self._proc.returncode
        if code is None:
            self.died = "the answer's process stopped answering"
        elif code >= 0:
            self.died = f"exit status {code}"
        else:
            self.died = f"killed by {signal.Signals(-code).name}"

    def _tamper(self, what: str) -> AnswerLost:
        self.tampered = f"the answer's process sent {what} on the grader's channel"
        self._stop()
        return AnswerLost(self.tampered)

    def _stop(self) -> None:
        """SIGKILL the process's session, and every process that carries this answer's token (a fork that left
        the session)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        token = f"SIMULATOR_GRADED_ANSWER={self._token}".encode()
        with contextlib.suppress(OSError):
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit():
                    continue
                with contextlib.suppress(OSError):
                    if token in Path(entry.path, "environ").read_bytes().split(b"\0"):
                        os.kill(int(entry.name), signal.SIGKILL)


class _Started:
    """A run asked for but not yet made (``World.start``'s counterpart): set ``replay``, then ``finish()``."""

    def __init__(self, answer: RemoteAnswer, size: int, args: Sequence[Any]) -> None:
        self.answer, self.size, self.args = answer, size, args
        self.replay: Any = None

    def finish(self) -> RunResult:
        return self.answer.run(self.size, self.args, self.replay)


# ---- reading a record without running anything of the student's ------------------------------------

_ALLOWED = {
    ("simulator.core.trace", "Trace"): Trace,
    ("simulator.core.trace", "Message"): Message,
    ("simulator.core.trace", "Op"): Op,
    ("builtins", "slice"): slice,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "complex"): complex,
    ("builtins", "Ellipsis"): Ellipsis,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class _Records(pickle.Unpickler):
    """Builds only a record's kinds of objects (``_ALLOWED``, NumPy arrays, scalars and dtypes): no name that could
    run code can be reached from a frame."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED:
            return _ALLOWED[module, name]
        if module == "simulator.core.tags" and name == "CollectiveTag":
            from ..core.tags import CollectiveTag

            return CollectiveTag
        if module == "simulator.tensors.placements" and name == "FlatSlice":  # an index: two numbers
            from ..tensors.placements import FlatSlice

            return FlatSlice
        if module in ("numpy._core.multiarray", "numpy.core.multiarray") and name in ("_reconstruct", "scalar"):
            return super().find_class(module, name)
        if module in ("numpy", "numpy.dtypes"):
            found = getattr(np if module == "numpy" else np.dtypes, name, None)
            if isinstance(found, type) and (issubclass(found, np.generic) or issubclass(found, np.dtype)):
                return found
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a run's record")


def _is_trace(trace: Any, size: int) -> bool:
    if type(trace) is not Trace or trace.world_size != size or not isinstance(trace.events, list):
        return False
    kinds = {"send": Message, "recv": Message, "op": Op, "hold": Op, "free": Op}
    return (
        all(isinstance(e, tuple) and len(e) == 2 and e[0] in kinds and type(e[1]) is kinds[e[0]] for e in trace.events)
        and all(type(m) is Message for m in trace.messages)
        and all(type(o) is Op for o in trace.ops)
    )


def _is_call(c: Any) -> bool:
    return isinstance(c, tuple) and len(c) == 6 and isinstance(c[0], int) and isinstance(c[4], int)


def _error(words: dict[str, Any]) -> RemoteError:
    name = words.get("type") if isinstance(words.get("type"), str) and words["type"].isidentifier() else "Error"
    exc = type(name, (RemoteError,), {})(str(words.get("message", "")))
    exc.where = words.get("where") or None
    exc.diagnosis = words.get("diagnosis") or None
    exc.words = words
    return exc
