"""A rank process ends when its launcher does, however the launcher ends (SIGKILL included).

Two mechanisms, because each misses a case the other covers:

- The lifeline pipe (portable): the launcher holds the write end of a pipe and never writes to it; a
  thread in the rank blocks reading the other end. When the launcher dies, the operating system closes
  its descriptors, the read returns end-of-file, and the rank exits at once. This works on every
  system, but needs the rank's interpreter to run that thread (a C call that holds the GIL would delay it).
- ``PR_SET_PDEATHSIG`` (Linux): the kernel sends the rank SIGKILL when its parent dies, whatever the rank
  is doing. But the kernel ties it to the *thread* that started the rank, not the process: a world
  started from a worker thread would lose its ranks when that thread ends. So it is set only for worlds
  started from the main thread (which ends only with the process).

Right after arming both, the rank checks that its parent is still the launcher (it may have died
before the rank got that far).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from typing import Any

ORPHANED = 70  # the exit code of a rank whose launcher has gone (nobody is left to read it; for ps and logs)
_PR_SET_PDEATHSIG = 1


def watch_launcher(read_end: Any, launcher_pid: int, death_signal: bool) -> None:
    """In a rank process: exit as soon as the launcher ``launcher_pid`` has gone (see the module docstring)."""
    if death_signal and sys.platform.startswith("linux"):
        _set_parent_death_signal()
    threading.Thread(target=_exit_at_eof, args=(read_end,), name="simulator-lifeline", daemon=True).start()
    if launcher_pid and os.getppid() != launcher_pid:  # it died before either was armed
        os._exit(ORPHANED)


def _exit_at_eof(read_end: Any) -> None:
    try:
        while True:
            read_end.recv_bytes()  # the launcher never writes: this returns only at end-of-file
    except (EOFError, OSError):
        pass
    os._exit(ORPHANED)


def _set_parent_death_signal() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl here: the lifeline pipe still covers it
        pass
