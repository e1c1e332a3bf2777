"""A rank process's stderr, read through a pipe: passed on as it comes, its last lines kept for errors.

Why: a rank that gloo aborts (a collective with mismatched sizes ends in SIGABRT, exit code -6) dies
before it can report; its only explanation is what gloo's C++ code wrote to file descriptor 2. So the
launcher makes each rank's descriptor 2 the write end of a pipe (``redirect_stderr``, in the rank),
reads the other end in a thread (``StderrTail``, in the launcher), writes every line on to its own
``sys.stderr`` (prints and warnings still show, in a terminal or a notebook cell) and keeps the last
``KEEP`` lines for the error that reports the death. The thread ends when the rank process has gone
(the pipe reaches end of file).
"""

from __future__ import annotations

import codecs
import os
import sys
import threading
from collections import deque
from typing import Any

KEEP = 20  # lines kept per rank; gloo's abort message and a Python traceback's last frames fit


def redirect_stderr(write_end: Any) -> None:
    """In a rank process: make descriptor 2 (C and Python code alike) the pipe's write end."""
    sys.stderr.flush()
    os.dup2(write_end.fileno(), 2)
    write_end.close()


class StderrTail:
    """In the launcher: pass one rank's stderr on to ``sys.stderr`` and keep its last lines.

    read_end: the pipe's read end (a ``multiprocessing`` connection or anything with ``fileno``);
    closed when the rank's stderr ends.
    """

    def __init__(self, rank: int, read_end: Any, keep: int = KEEP) -> None:
        self.rank = rank
        self._end = read_end
        self._keep_lines = keep
        self._lines: deque[str] = deque(maxlen=keep)
        self._partial = ""  # the text after the last newline so far
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, name=f"simulator-device-{rank}-stderr", daemon=True)
        self._thread.start()

    def last_lines(self, wait: float = 1.0) -> list[str]:
        """The last lines the rank wrote; waits up to ``wait`` s for the rest of a process that has exited."""
        self._thread.join(wait)
        with self._lock:
            tail = [*self._lines, self._partial] if self._partial else list(self._lines)
        return tail[-self._keep_lines :]

    def close(self, wait: float = 0.5) -> None:
        """Wait (boundedly) for the rank's stderr to end; the daemon thread never outlives the process."""
        self._thread.join(wait)

    def _pump(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        fd = self._end.fileno()
        try:
            while True:
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    break
                text = decoder.decode(chunk, final=not chunk)
                if text:
                    _forward(text)
                    self._keep(text)
                if not chunk:
                    break
        finally:
            self._end.close()

    def _keep(self, text: str) -> None:
        with self._lock:
            *complete, self._partial = (self._partial + text).split("\n")
            self._lines.extend(line.rstrip("\r") for line in complete)


def _forward(text: str) -> None:
    """Pass text on to this process's stderr as it is now (pytest or a notebook may have replaced it)."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):  # closed, or None (pythonw): the lines are still kept
        pass
