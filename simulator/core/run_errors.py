"""What the engine reports when a program goes wrong: a deadlock, messages nobody received, a rank
program that is not a plain function.

A deadlock names every blocked device, what it waits for, the wait-for cycle (``find_cycle``) and, where
a message with another tag waits between the same devices, the likely tag mismatch. Messages left
unreceived at the end, receives never matched and receives never waited on are reported by the
world's ``leftovers`` policy (warn, error or ignore). These run once, at the end of a run (or when it
cannot go on), never on the path of each message.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from ..cost.units import binary_size
from .errors import (
    BufferLimitError,
    DeadlockError,
    UnreceivedMessagesError,
    UnreceivedMessagesWarning,
)
from .tags import TAG_BASE

if TYPE_CHECKING:
    from .device import Device, Request
    from .trace import Message


def raise_deadlock(eng: Any) -> None:
    """Every unfinished device is blocked: end the run, and raise a DeadlockError naming what each waits for."""
    blocked: dict[int, str] = {}
    waits_for: dict[int, int] = {}
    for dev in eng.devices:
        if dev._done:
            continue
        req = dev._blocked
        if req is None:  # cannot happen: a live device off the heap is blocked on something
            blocked[dev.rank] = "not blocked (engine error)"
            continue
        blocked[dev.rank] = _blocked_in(eng, dev, req)
        waits_for[dev.rank] = req.peer
    cycle = find_cycle(waits_for)
    lines = [f"deadlock: all {len(blocked)} unfinished devices are blocked and nothing is in flight."]
    lines += [f"  device {r} is blocked in {what}" for r, what in blocked.items()]
    if cycle:
        lines.append("  wait-for cycle: " + " -> ".join(f"device {r}" for r in cycle + cycle[:1]))
        if eng.rendezvous and any(eng.devices[r]._blocked.kind == "send" for r in cycle):
            lines.append(
                "  with rendezvous sends, a send waits for its matching recv: let one side "
                "receive first, or use isend/irecv and wait on both"
            )
        elif (absent := _member_elsewhere(eng, cycle)) is not None:
            lines.append(absent)
        elif all(eng.devices[r]._blocked.kind == "recv" for r in cycle):
            lines.append(
                "  each of them waits to receive before it sends: let one of them send first, "
                "or post its isend before the recv"
            )
    else:
        lines.append("  no cycle: some device waits for a device that has finished or never sends")
    lines += tag_hints(eng)
    eng.close()
    eng._settle()
    exc = DeadlockError("\n".join(lines), blocked, cycle)
    eng.trace.finish()
    exc.partial = eng.result()  # the run up to the deadlock
    raise exc


def _member_elsewhere(eng: Any, cycle: list[int]) -> str | None:
    """A device of the cycle waits in a collective for a member that waits in something else (a plain receive,
    another call): say that the member has not made the call (booked whole, a call's members wait for each other
    before any chunk is sent, so no unreceived message points at it)."""
    for r in cycle:
        dev = eng.devices[r]
        req, call = dev._blocked, getattr(dev, "_last_call", None)
        if req.tag < TAG_BASE or call is None or call.tag != req.tag:
            continue
        peer = eng.devices[req.peer]
        other = peer._blocked
        if other is not None and other.tag != req.tag:
            theirs = getattr(peer, "_last_call", None)
            collective = theirs is not None and theirs.tag == other.tag
            elsewhere = f"{theirs.label} of group {theirs.group}" if collective else other.describe()
            return (
                f"  device {req.peer} is a member of {call.label} of group {call.group} but waits in {elsewhere}: "
                "every member of a "
                "group must make the same collective calls, in the same order (is its call missing, or after "
                "that wait?)"
            )
    return None


def _blocked_in(eng: Any, dev: Device, req: Request) -> str:
    """What one blocked device waits in: a collective by its label (``all_reduce#0 ring``), never its raw tag."""
    at = f"at t={dev.clock * 1e6:.3f}us"
    peer = eng.devices[req.peer]
    call = getattr(dev, "_last_call", None)  # a device blocked on a collective's tag is in its latest call
    if req.tag >= TAG_BASE and call is not None and call.tag == req.tag:
        way = "recv from" if req.kind == "recv" else "send to"
        what = f"{call.label} (its {way} device {req.peer}) {at}"
        if peer._done and getattr(peer, "_collective_calls", {}).get(call.members, 0) <= call.number:
            return f"{what}, and device {req.peer} finished without calling it"
        return f"{what}, waiting for device {req.peer}{' (which has finished)' if peer._done else ''}"
    return f"{req.describe()} {at}, waiting for device {req.peer}{' (which has finished)' if peer._done else ''}"


def tag_hints(eng: Any) -> list[str]:
    """Point at unreceived messages between the same devices with another tag: the likely culprit."""
    hints = []
    for dev in eng.devices:
        req = dev._blocked
        if dev._done or req is None or req.kind != "recv":
            continue
        for (src, dst, tag), ch in eng._chans.items():
            if src == req.peer and dst == dev.rank and tag != req.tag and ch.mail:
                label = eng.trace.message_at_row(ch.mail[0][0]).label if tag >= TAG_BASE else None
                # a collective's messages are named by their call (``all_reduce#0 ring``), not their tag
                via = f"of {label.split(' step ')[0]}" if label else f"with tag {tag}"
                hints.append(
                    f"  device {src} did send device {dev.rank} {len(ch.mail)} message(s) {via}, "
                    f"which nobody received: do the tags of the send and the recv match?"
                )
    return hints


def raise_over_budget(eng: Any, rank: int, nbytes: int) -> None:
    """A send took the payload copies the engine holds past ``World.max_buffered_bytes``: name the sender,
    the bytes, and the fix."""
    budget = eng.world.max_buffered_bytes
    mine = eng._buffered_by[rank]
    held = f"{eng._buffered:,} bytes ({binary_size(eng._buffered)})"
    if eng.keep_payloads:
        raise BufferLimitError(
            f"device {rank} sent a copy of {binary_size(nbytes)}, and the trace now keeps {held} of copied payloads, "
            f"{mine:,} bytes ({binary_size(mine)}) of them sent by device {rank}: over the budget of {budget:,} bytes "
            f"({binary_size(budget)}), World(max_buffered_bytes=...). Every send of a writable array copies it, and "
            "the trace keeps every payload (World(keep_payloads=True), the default). For a long run record "
            "metadata only (World(..., keep_payloads=False)); or send read-only arrays (what dev.hold, dev.compute "
            "and dev.recv return), which need no copy; or raise max_buffered_bytes if this machine has the memory."
        )
    waiting = sum(1 for r, _ in eng._queued.values() if r == rank)
    raise BufferLimitError(
        f"device {rank} has sent {waiting:,} messages that no device has received yet, {mine:,} bytes "
        f"({binary_size(mine)}) of copied payloads; the engine holds {held} of them in all, over the budget of "
        f"{budget:,} bytes ({binary_size(budget)}), World(max_buffered_bytes=...). An eager send returns at once, "
        "so a sender that never waits buffers every message. Let the receiver receive sooner (between the sends), "
        'or send with World(..., send_mode="rendezvous"), where each send waits for its receive; or send '
        "read-only arrays, which need no copy; or raise max_buffered_bytes if this machine has the memory."
    )


def report_leftovers(eng: Any) -> None:
    """Messages never received, and receives never matched or never waited on: by ``World(leftovers=...)``."""
    policy = eng.world.leftovers
    if policy == "ignore":
        return
    trace = eng.trace
    rows = [entry[0] for ch in eng._chans.values() for entry in ch.mail]
    left = sorted((trace.message_at_row(r) for r in rows), key=lambda m: m.id)
    unmatched = [req for ch in eng._chans.values() for req in ch.posted]
    in_mail = set(rows)
    if not unmatched and trace.all_received():
        return  # (the common case, decided without making a record, or an array, per message)
    t_recv = trace.receive_times()  # in number order
    late = np.flatnonzero(np.isnan(t_recv))
    if not len(late) and not unmatched:
        return
    unwaited = [m for m in (trace.message(int(i)) for i in late) if m._row not in in_mail]
    if not left and not unmatched and not unwaited:
        return
    parts = []
    if left:
        shown = "\n".join(f"  {m.describe()}" for m in left[:10])
        more = f"\n  ... and {len(left) - 10} more" if len(left) > 10 else ""
        fix = "add the matching recv on the destination, or drop the send"
        calls = sorted({m.label.split(" ")[0] for m in left if m.label})
        if calls:  # a collective's messages: the destination never made the call
            fix = f"every member of a collective's group must call it: the destination never called {', '.join(calls)}"
        parts.append(f"{len(left)} message(s) were sent but never received:\n{shown}{more}\n  {fix}")
    if unmatched:
        shown = "\n".join(f"  device {r.owner}: irecv(src={r.peer}, tag={r.tag})" for r in unmatched[:10])
        parts.append(
            f"{len(unmatched)} receive(s) were posted but no message ever matched them:\n{shown}\n"
            "  the program never waited on them; add the matching send, or drop the irecv"
        )
    if unwaited:
        shown = "\n".join(f"  device {m.dst}: irecv(src={m.src}, tag={m.tag}) got {_short(m)}" for m in unwaited[:10])
        parts.append(
            f"{len(unwaited)} message(s) arrived for a posted irecv that the program never waited on:\n{shown}\n"
            "  wait on the request (dev.wait(req)) to complete the receive"
        )
    text = "\n".join(parts)
    if policy == "error":
        raise UnreceivedMessagesError(text)
    warnings.warn(text, UnreceivedMessagesWarning, stacklevel=3)


def _short(m: Message) -> str:
    return f"message #{m.id} {tuple(m.shape)} {np.dtype(m.dtype).name}"


def check_program(program: Any) -> None:
    if not callable(program):
        raise TypeError(f"a rank program is a function of the device, program(dev, *args); got {program!r:.60}")
    if inspect.isgeneratorfunction(program) or inspect.iscoroutinefunction(program):
        not_a_plain_function(program, None)


def not_a_plain_function(program: Any, made: Any) -> None:
    if inspect.iscoroutine(made):
        made.close()  # never awaited: close it quietly
    what = (
        "an async def function"
        if inspect.iscoroutinefunction(program) or inspect.iscoroutine(made)
        else ("a generator function (it uses yield)")
    )
    raise TypeError(
        f"the rank program {getattr(program, '__name__', program)!r} is {what}: write it as a plain function "
        "that calls dev.send / dev.recv; the simulator runs each device as a coroutine for you"
    )


def find_cycle(waits_for: Mapping[int, int]) -> list[int] | None:
    """The first cycle in a graph where each node waits for exactly one other, from the lowest rank."""
    for start in sorted(waits_for):
        path: list[int] = []
        seen: dict[int, int] = {}
        node = start
        while node in waits_for and node not in seen:
            seen[node] = len(path)
            path.append(node)
            node = waits_for[node]
        if node in seen:
            return path[seen[node] :]
    return None
