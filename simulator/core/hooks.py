"""What the layers above need of a device beyond what a rank program sees, as public functions.

The collectives send their parts, reduce their chunks and agree on a call through a device's messaging
(``messaging.py`` on the simulator, ``simulator.real.messages`` on real ranks: the protocol of ``p2p.py``); the
booked ring moves a device's clock. These functions are that protocol's public face, so that no package reaches
into another's private names (``tests/test_architecture.py`` checks it). Each is a thin wrapper: the fast path
pays one call when it binds a function per collective call, nothing per message. What the layers above need of the
engine itself is public on ``Engine`` (``recorder``, ``wake``, ``advance``, ``pending``, the link and op prices).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from .lanes import ring_lane as _lane

if TYPE_CHECKING:
    from .engine import Engine


def engine_of(dev: Any) -> Engine | None:
    """The engine a simulated device runs on; None for a device of another backend (a real rank)."""
    return getattr(dev, "_engine", None)


def call_label(dev: Any, label: str) -> Any:
    """``label`` as the device records it (on the simulator, a number interned once per text)."""
    return dev._call_label(label)


def op_name(dev: Any, name: str) -> int:
    """An op's name as a simulated device records it: a number interned once per text."""
    return dev._op_name(name)


def post(dev: Any, tag: int, label: Any, value: Any, dst: int, step: Any, chunk: Any) -> Any:
    """Send part (step, chunk) of a collective call (tag, ``call_label``) to rank ``dst``: a request to wait on, or
    None when the send is complete already."""
    return dev._post(tag, label, value, dst, step, chunk)


def message_payload(dev: Any, value: Any, dst: int) -> Any:
    """What a message of ``dev``'s to rank ``dst`` would carry for ``value``: the value itself when immutable, else
    a read-only copy, counted against the world's buffer budget as a send counts it (a ring booked whole sends
    its members' own chunks so)."""
    return dev._payload(value, dst)[0]


def keep_named(dev: Any, name: str, value: Any) -> None:
    """Hold ``value`` in ``dev``'s memory under ``name``, as a receive that names what it carries holds it (a ring
    booked whole receives its named partial sums so)."""
    dev._keep_named(name, value)


def poster(dev: Any, tag: int, label: str) -> Callable[..., Any]:
    """``post`` with the call's tag and label bound: ``send(value, dst, step, chunk)``."""
    return partial(dev._post, tag, dev._call_label(label))


def fast_reducer(dev: Any, name: str, label: str, fn: Callable[[Any, Any], Any]) -> Callable[..., Any] | None:
    """A simulated device's reduction of a received chunk into a local one, its ids interned once per call:
    ``reduce(received, local, flops)``; None on a device without one (then reduce with ``dev.compute``)."""
    fast = getattr(dev, "_reduce", None)
    if fast is None:
        return None
    return partial(fast, dev._op_name(name), dev._call_label(label), fn)


def ring_lane(dev: Any, tag: int, label: str, right: int, left: int, p: int) -> Any:
    """A simulated device's lane in a ring call of ``p`` members (tag, label) that sends to ``right`` and receives
    from ``left``: ``lane.pass_along(...)`` runs its steps in one loop (``lanes.RingLane``); None where each step
    must go through ``post``, ``recv`` and a reducer (a real rank, rendezvous sends, shared links, strict
    contracts, program time, the isolation replay)."""
    return _lane(dev, tag, label, right, left, p) if engine_of(dev) is not None else None


def agreement(dev: Any) -> Callable[[tuple[int, ...], int, Any], None] | None:
    """The device's check that every member of a group calls the same collective: ``agree(members, number,
    signature)``; None on a device that does not check."""
    return getattr(dev, "_agree_collective", None)


def note_call(dev: Any, call: Any) -> None:
    """Remember ``call`` (with ``label``, ``tag``, ``members``, ``number``) as the collective the device is in: a
    deadlock report names a device blocked on its tag by it (``run_errors.py``)."""
    dev._last_call = call
