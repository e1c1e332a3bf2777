"""Keeping a local world to itself: the launcher's store, and gloo's connections on the loopback interface.

The ranks rendezvous through a store (torch.distributed's key-value store: each rank writes where it
listens, and reads where the others do). A ``TCPStore`` has no authentication: any local process that
reaches its port can list, read and write every key, and so could steer a rank to connect to it. So a
local world uses a ``FileStore`` instead (``PrivateStore``): a file whose name holds a random secret
(``secrets.token_hex``), in a folder only this user may enter (mode 0700, made by ``tempfile.mkdtemp``).
No socket listens for it; a rank joins by presenting the file's path, which it gets from the launcher
over its private command pipe; another user's process cannot open it, and the folder goes when the world
stops. (A process of the same user could read the ranks' memory anyway: that is the boundary.) A launcher
killed outright (SIGKILL) cannot remove its folder: the folder names its owner (``owner``: the launcher's pid
and start time), and the next ``PrivateStore`` of this user removes every folder whose owner is gone.
Gloo's connections between ranks bind to the interface ``GLOO_SOCKET_IFNAME`` names: the worker sets
it to ``loopback_interface()``. Nothing the ranks exchange is unpickled: payloads travel as raw bytes
(``wire``), and the start-up exchanges are arrays (``worker``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import tempfile
from pathlib import Path

PREFIX = "simulator-world-"
OWNER = "owner"  # in each folder: "<pid> <start time>" of the launcher that made it


class PrivateStore:
    """Where one world's ranks rendezvous: a file, not there yet, in a new folder private to this user.

    The ranks open it as a ``torch.distributed.FileStore`` (``path``); ``close`` removes the folder. The folders
    that launchers killed before they could close theirs go first (``remove_orphans``)."""

    def __init__(self) -> None:
        remove_orphans()
        self.folder = Path(tempfile.mkdtemp(prefix=PREFIX))  # mode 0700
        (self.folder / OWNER).write_text(f"{os.getpid()} {_started(os.getpid())}")
        self.path = str(self.folder / f"store-{secrets.token_hex(16)}")

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __repr__(self) -> str:
        return f"<PrivateStore in {self.folder}>"


def remove_orphans(where: str | None = None) -> list[Path]:
    """Remove this user's store folders in ``where`` (the temporary folder) whose launcher is gone; returns them.

    A folder without its owner file yet (a launcher between making it and writing the file) is left alone."""
    removed = []
    for folder in Path(where or tempfile.gettempdir()).glob(f"{PREFIX}*"):
        with contextlib.suppress(OSError, ValueError):  # gone meanwhile, another user's, or not ours to read
            if folder.is_symlink() or folder.stat().st_uid != os.getuid():
                continue
            pid, started = (folder / OWNER).read_text().split(" ", 1)
            if not _alive(int(pid), started):
                shutil.rmtree(folder)
                removed.append(folder)
    return removed


def _alive(pid: int, started: str) -> bool:
    """Whether process ``pid`` runs and is the one that started at ``started`` (pids are reused)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process has that pid now: not our launcher
        return False
    now = _started(pid)
    return now == "" or started == "" or now == started


def _started(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot, from /proc on Linux), or "" where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]  # field 22, counting the two before the command's closing ")"


def loopback_interface() -> str | None:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS), if any."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in names if n in ("lo", "lo0")), None)
