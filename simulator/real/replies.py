"""Gathering the ranks' replies to one command, and turning a failure into one error that names its cause.

The launcher sends a command to every rank, then ``collect`` waits for one reply per rank, watching
three things at once: each rank's pipe, each process's exit, and the deadline. Replies carry the
number of the run they answer, and only the awaited run's count. When a rank reports an error, dies,
or the deadline passes, every rank is stopped (``stop``) and the error is raised: the reports that
arrive at about the same time are gathered and the root cause is picked (a program's own error
beats a timeout, which beats a failed transfer; see ``worker.PRIORITY``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import wait as wait_any

from .errors import RankTimeoutError, RemoteRankError
from .rankproc import RankProcess
from .worker import PROGRAM_ERROR, ErrorReport


@dataclass(frozen=True)
class Awaited:
    """One reply of kind ``kind`` to run ``run`` from every rank, within ``timeout`` seconds (None: no limit).

    what:  what the ranks are doing, for the timeout's message ("finish split")
    limit: the TorchWorld argument that sets ``timeout`` ("run_timeout"), named in that message
    comm_timeout: the per-communication timeout, named in that message too
    """

    kind: str
    run: int
    timeout: float | None
    what: str
    limit: str
    comm_timeout: float


def collect(ranks: list[RankProcess], awaited: Awaited, stop: Callable[[], None]) -> list[tuple]:
    """The awaited reply of every rank, in rank order; on an error, a death or the deadline: ``stop()`` and raise."""
    replies: dict[int, tuple] = {}
    deadline = None if awaited.timeout is None else time.monotonic() + awaited.timeout
    by_conn = {r.conn: r for r in ranks}
    by_sentinel = {r.proc.sentinel: r for r in ranks}
    while len(replies) < len(ranks):
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        waiting = [r.conn for r in ranks if r.rank not in replies]
        ready = wait_any(waiting + list(by_sentinel), left)
        if not ready:
            _fail_timeout(ranks, awaited, replies, stop)
        for obj in ready:
            if obj in by_conn:
                try:
                    reply = obj.recv()
                except EOFError:  # its process is gone; the sentinel says how
                    continue
                if reply[1] != awaited.run:
                    continue  # an answer to an earlier run: it never counts for this one
                if reply[0] == "error":
                    _fail(ranks, reply[2], awaited.run, replies, stop)
                if reply[0] == awaited.kind:
                    replies[by_conn[obj].rank] = reply
            else:
                r = by_sentinel.pop(obj)
                r.proc.join(0.5)
                if r.rank not in replies or r.proc.exitcode:
                    _fail(ranks, died(r, starting=awaited.kind == "ready"), awaited.run, replies, stop)
    return [replies[r.rank] for r in ranks]


def died(r: RankProcess, starting: bool = False) -> ErrorReport:
    """The report of a rank process that exited without reporting (a crash, an abort, a kill, os._exit)."""
    text = f"the process of device {r.rank} {r.describe_exit()} without reporting a result"
    lines = r.stderr.last_lines()
    if lines:
        text += "; the last lines it wrote to stderr:\n" + "\n".join(f"    {line}" for line in lines)
    elif starting and r.proc.exitcode == 1:  # it failed before its own error handling: most often, the script's
        text += (  # module-level code started ranks again while a rank imported it (spawn re-imports __main__)
            ", while starting. If your script starts the TorchWorld (or run_real) at module level, put that code "
            'under `if __name__ == "__main__":`: each rank is a new process that imports your script first'
        )
    return ErrorReport(r.rank, "ProcessDied", text, "", PROGRAM_ERROR, False, time.time(), None)


def progress(replies: dict[int, tuple], size: int) -> str:
    done = sorted(replies)
    if not done:
        return "no device had finished"
    return f"device(s) {', '.join(map(str, done))} had finished; {size - len(done)} had not"


def where_they_waited(reports: list[ErrorReport]) -> str:
    """Where each device whose communication failed waited (timed out, or failed when a peer that timed out gave
    up), when several did; devices waiting in different collectives made different collective calls (the
    simulation names those before they run; gloo's own collectives just hang)."""
    waits = {rep.rank: rep for rep in reports if rep.waiting}
    if len(waits) < 2:
        return ""
    lines = []
    for rank, rep in sorted(waits.items()):
        call = next((line.strip() for line in rep.message.splitlines() if line.startswith(f"  rank {rank}: ")), "")
        lines.append(f"  device {rank}: {call.split(': ', 1)[1] if call else rep.waiting}")
    text = "\nwhere the devices waited when their communication failed:\n" + "\n".join(lines)
    collectives = {rep.waiting for rep in waits.values() if rep.collective}
    if len(collectives) > 1:
        text += (
            f"\n  they wait in different collectives ({', '.join(sorted(collectives))}): the devices made different "
            "collective calls. Every member of a group must make the same collective calls, in the same order"
        )
    return text


def _fail_timeout(ranks: list[RankProcess], a: Awaited, replies: dict[int, tuple], stop: Callable[[], None]) -> None:
    missing = [r.rank for r in ranks if r.rank not in replies]
    stop()
    raise RankTimeoutError(
        missing[0],
        "TimeoutError",
        f"device(s) {', '.join(map(str, missing))} did not {a.what} within {a.timeout:g} s ({a.limit}); they were "
        f"still running and have been stopped. A hang outside any single communication (each of those times "
        f"out after timeout={a.comm_timeout:g} s), or a longer program: then give TorchWorld({a.limit}=...) more",
        "",
        progress(replies, len(ranks)),
    )


def _fail(
    ranks: list[RankProcess], first: ErrorReport, run: int, replies: dict[int, tuple], stop: Callable[[], None]
) -> None:
    """Gather the reports that arrive at about the same time, pick the root cause, stop all, raise.

    A process that died without a word counts as a report too: the peers' "connection reset"
    errors that follow it are echoes, and rank below it (see ``worker.PRIORITY``).
    """
    reports = [first]
    # the peers of a hang time out about when it does: wait longer for them, to say where each one waited
    deadline = time.monotonic() + (2.0 if first.timeout else 0.2)
    for r in ranks:
        while r.conn.poll(max(0.0, deadline - time.monotonic())):
            try:
                reply = r.conn.recv()
            except EOFError:
                break
            if reply[0] == "error" and reply[1] == run:
                reports.append(reply[2])
    reported = {rep.rank for rep in reports}
    for r in ranks:
        if r.rank not in reported and not r.proc.is_alive() and r.proc.exitcode:
            reports.append(died(r))
    stop()
    root = max(reports, key=lambda rep: (rep.priority, -rep.t))
    others = sorted({rep.rank for rep in reports} - {root.rank})
    note = progress(replies, len(ranks))
    if others:
        note += f"; device(s) {', '.join(map(str, others))} failed after it"
    if root.timeout:
        note += where_they_waited(reports)
    cls = RankTimeoutError if root.timeout else RemoteRankError
    raise cls(root.rank, root.exc_type, root.message, root.traceback, note) from root.exception()
