"""Keeping a local world on the loopback interface: the launcher's store and gloo's own connections.

The launcher's ``TCPStore`` is unauthenticated (anyone who reaches it can read and write the keys the
ranks rendezvous on), so it must listen on 127.0.0.1 only. torch's TCPStore server binds every
interface whatever host it is given (the host is where *clients* connect), but it accepts an already
listening socket (``master_listen_fd``): ``loopback_store`` binds one to 127.0.0.1 on a port the
operating system picks (no port race) and hands it over; the store then owns and closes it.
Gloo's connections between ranks bind to the interface ``GLOO_SOCKET_IFNAME`` names: the worker sets
it to ``loopback_interface()``.
"""

from __future__ import annotations

import socket
from datetime import timedelta

import torch.distributed as dist

HOST = "127.0.0.1"


def loopback_store(timeout: float) -> dist.TCPStore:
    """A TCPStore server listening on 127.0.0.1 only, on a free port (``store.port``)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((HOST, 0))
        sock.listen(128)
        store = dist.TCPStore(
            HOST,
            sock.getsockname()[1],
            None,
            True,
            timeout=timedelta(seconds=timeout),
            wait_for_workers=False,
            master_listen_fd=sock.fileno(),
            use_libuv=True,  # the libuv server takes the socket over (and closes it when the store goes)
        )
    except BaseException:
        sock.close()
        raise
    sock.detach()  # the store owns the descriptor now: the socket object must not close it too
    return store


def loopback_interface() -> str | None:
    """The name of the loopback network interface (``lo`` on Linux, ``lo0`` on macOS), if any."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((n for n in names if n in ("lo", "lo0")), None)
