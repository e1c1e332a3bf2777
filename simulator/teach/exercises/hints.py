"""Hints chosen by the diagnosis: what kind of thing went wrong decides what the hint is about.

A try's diagnosis is one short key (``diagnosis``): ``stopped`` (an error), ``deadlock``, ``contract``,
``isolation`` (data reached a device outside messages), a
broken rule of the split (``split:compute``, ``split:given``, ``split:cross``, ``split:collective``,
``split:budget``), a value that differs (``value:message``, ``value:input``, ``value:output``, ``value:held
value``, ``value:partial sums``, ``value:result``), something not compared (``unverified:unknown name``,
``unverified:never computed``, ``unverified:unplaced message``, ``unverified:result``, ...), an unmet
requirement (``requirement:<key>``), an answer of the wrong kind (``answer``), or a grader changed by the
notebook's own code (``grader``). An exercise may give its own hints for a diagnosis, each more specific than
the last; ``GENERIC`` says something useful for every other one.
"""

from __future__ import annotations

from ...checker import CheckReport
from ...core.errors import ContractError, DeadlockError

GENERIC: dict[str, str] = {
    "stopped": "Your program stopped with an error before the run could be checked: fix the line the error "
    "names first (a device that is given nothing of an input receives None for it).",
    "deadlock": "Every device still running is waiting: a recv whose send never comes (check src=, dst= and "
    "tags on both sides), or a device that returned before sending what another waits for.",
    "contract": "A recv declared another shape or dtype than the value sent: a receiver must say exactly what "
    "arrives, as a real one allocates its buffer from it.",
    "isolation": "A device used data another device holds without receiving it in a message: devices are "
    "processes with private memory, so a module-level variable, a class attribute or another device's frame "
    "is not shared on real processes. Send what the other device needs with dev.send, and receive it.",
    "split:compute": "The numbers may be right, but a device computed a value that belongs to another: each "
    "device computes only its own part, and what another device needs crosses as a message.",
    "split:given": "A device worked on more of an input than it was given: use the part your program receives "
    "as its argument, and let what it lacks arrive as messages.",
    "split:cross": "Only the values the split names may cross a boundary: send what the next device needs, "
    "not something it would have to recompute from.",
    "split:collective": "This exercise asks for the communication it teaches: use only the collectives it "
    "names, or write it with dev.send and dev.recv.",
    "split:budget": "Your program sends more than the algorithm does: each device sends each piece once, to the "
    "one device that needs it next.",
    "value:message": "A message carried another value than the one that should cross there: look at what that "
    "device sends, and which value it should be.",
    "value:input": "An op was fed another value than the model feeds it: follow that input back to where it "
    "came from (a message, a hold, an op).",
    "value:output": "An op computed another value than the model's op of that name: check its inputs and its "
    "function, and which part of the value it computes (index=, partial=).",
    "value:held value": "A device holds another value than the model's of that name (or another block of it): "
    "check what it holds and index=.",
    "value:partial sums": "The devices' partial sums do not add up to the model's value: each device's term "
    "must come from its own part of the inputs.",
    "value:result": "What a device returns differs from the model's result: is it the complete value (after "
    "the collective that completes it), and in the model's form?",
    "unverified:unknown name": "Nothing differs, but a value has a name the model does not have and equals one "
    "of the model's: give it the model's name, so it can be compared.",
    "unverified:never computed": "Nothing differs, but a value the model computes was never computed under its "
    "name: compute it with dev.compute(name, ...), or name what you received with recv(..., name=...).",
    "unverified:unplaced message": "Nothing differs, but a message carries a value the checker cannot place: "
    "say what it carries with dev.recv(..., name=...).",
    "unverified:result": "Nothing differs, but the result was not compared: return it from the device(s) that "
    "hold it, and None from the others.",
    "unverified:partial sums": "Nothing differs, but some partial sums were never completed: every device of "
    "the group computes its term.",
    "answer": "The grade takes what the notebook asks for: a function, called as the exercise says.",
    "grader": "Restart the kernel and run the notebook from the top: the grade only runs with the grader as "
    "it was loaded.",
}


def diagnosis(report: CheckReport) -> str:
    """The key of what a check report found first (see the module docstring)."""
    if report.leaks:
        return "isolation"
    if report.broken and (report.first is None or report.split_first):
        return f"split:{report.broken[0].kind}"
    if report.first is not None:
        return f"value:{report.first.where}"
    if report.unchecked:
        return f"unverified:{report.unchecked[0].kind}"
    return "passed"


def error_diagnosis(exc: BaseException) -> str:
    cause = exc.__cause__ or exc
    if isinstance(exc, DeadlockError) or isinstance(cause, DeadlockError):
        return "deadlock"
    if isinstance(exc, ContractError) or isinstance(cause, ContractError):
        return "contract"
    return "stopped"


def generic(kind: str) -> str:
    if kind in GENERIC:
        return GENERIC[kind]
    family = kind.split(":", 1)[0]
    return {
        "value": GENERIC["value:output"],
        "unverified": "Nothing differs, but something could not be compared: the list above says what, and how.",
        "split": GENERIC["split:compute"],
        "requirement": "The values are right, but the program does not yet do what the exercise is about: read "
        "the FAILED line.",
    }.get(family, "Read the verdict above: it says what differs, and where.")
