"""What real-process tests check afterwards: no process left alive, no socket left listening."""

from __future__ import annotations

import os
import time

import psutil


def alive(pid: int) -> bool:
    """True while the process runs (a zombie has exited: only its parent's bookkeeping is left)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def survivors(pids: list[int], within: float = 10.0) -> list[int]:
    """The processes among ``pids`` still alive after waiting up to ``within`` seconds for them to go."""
    deadline = time.monotonic() + within
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def listening(pid: int | None = None) -> set[tuple[str, int]]:
    """The (address, port) pairs this process (default: the current one) listens on over TCP."""
    proc = psutil.Process(os.getpid() if pid is None else pid)
    return {(c.laddr.ip, c.laddr.port) for c in proc.net_connections("inet") if c.status == psutil.CONN_LISTEN}
