"""Keeping a local world to itself: the launcher's store, and gloo's connections on the loopback interface.

The ranks rendezvous through a store (torch.distributed's key-value store: each rank writes where it
listens, and reads where the others do). A ``TCPStore`` has no authentication: any local process that
reaches its port can list, read and write every key, and so could steer a rank to connect to it. So a
local world uses a ``FileStore`` instead (``PrivateStore``): a file whose name holds a random secret
(``secrets.token_hex``), in a folder only this user may enter (mode 0700, made by ``tempfile.mkdtemp``).
No socket listens for it; a rank joins by presenting the file's path, which it gets from the launcher
over its private command pipe; another user's process cannot open it, and the folder goes when the world
stops. (A process of the same user could read the ranks' memory anyway: that is the boundary.)
Gloo's connections between ranks bind to the interface ``GLOO_SOCKET_IFNAME`` names: the worker sets
it to ``loopback_interface()``. Nothing the ranks exchange is unpickled: payloads travel as raw bytes
(``wire``), and the start-up exchanges are arrays (``worker``).
"""

from __future__ import annotations

import secrets
import shutil
import socket
import tempfile
from pathlib import Path


class PrivateStore:
    """Where one world's ranks rendezvous: a file, not there yet, in a new folder private to this user.

    The ranks open it as a ``torch.distributed.FileStore`` (``path``); ``close`` removes the folder."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="simulator-world-"))  # mode 0700
        self.path = str(self.folder / f"store-{secrets.token_hex(16)}")

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)

    def __repr__(self) -> str:
        return f"<PrivateStore in {self.folder}>"


def loopback_interface() -> str | None:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS), if any."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in names if n in ("lo", "lo0")), None)
