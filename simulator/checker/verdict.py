"""The checker's verdict: ``CheckReport`` (passed, FAILED, not verified), the first ``Divergence`` and what
was left ``Unchecked``, and the text that says each of them.

These are what ``check`` returns; the walk that fills them in is ``run_check.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.trace import Message, Op
from ..core.values import fit_lines, part_text
from ..tensors.placements import FlatSlice
from . import diagnose
from .compare import difference, show_pair, structured
from .reference import Reference

PASSED, FAILED, NOT_VERIFIED = "passed", "FAILED", "not verified"


@dataclass
class Divergence:
    """The first place a parallel run differs from the single-device run."""

    where: str  # "message", "input", "output", "held value", "partial sums", "result"
    rank: int  # the device that holds the wrong value
    event: int  # index into trace.events (for a result: the device's last event)
    record: Message | Op | None
    name: str
    expected: Any
    found: Any
    is_also: list[str]  # other reference values equal to the found one
    reference: Reference
    position: int | None = None  # which input of an op
    part_of: list[str] = field(default_factory=list)  # reference values whose same part equals the found one
    hint: str | None = None  # a pattern in the difference (scaled, blocks reordered, a partial sum), in words
    path: str = ""  # for a result: which part of a structured result ("['dW1']")

    def explain(self) -> str:
        got, exp = show_pair(self.found, self.expected)
        if got == exp and got.startswith("an array of shape"):  # large arrays described alike: say what differs
            exp = "an array of that shape with other values"
        what = self.reference.describe(self.name)
        rec = self.record
        # a shard (a ring step's chunk, or an op's block) is compared with its part of the value, not the whole
        if self.where in ("message", "output") and isinstance(getattr(rec, "index", None), (FlatSlice, tuple, slice)):
            part = part_text(rec.index)  # a chunk of the value (a ring step's), not the whole of it
            what = f"{part} of {what}" if part.startswith("element") else f"the block {part} of {what}"
        if self.where == "message":
            head = (
                f"{_message(rec)} carried {got}, but device {rec.dst} should have received {what} = {exp}."
                if rec.name is not None
                else f"{_message(rec)} carried {got}, but it should carry {what} = {exp}."
            )
        elif self.where == "input":
            head = (
                f"op {rec.name} on device {rec.rank} got {got} as input {self.position}, but on one device it is {exp}."
            )
        elif self.where == "held value":
            head = f"device {rec.rank} holds {got} as {what}, but it should hold {exp}."
        elif self.where == "partial sums":
            head = f"the partial sums of {self.name} on devices {self.path} add up to {got}, but {what} is {exp} on one device."
        elif self.where == "result":
            head = f"device {self.rank} returned {got} as the result{self.path}, but on one device it is {exp}."
        else:
            head = f"op {rec.name} on device {rec.rank} computed {got}, but {what} is {exp} on one device."
        if self.is_also:
            small = structured(self.found) or np.asarray(self.found).size <= 16
            value = got if small else "The value found"
            head += " " + value + " is " + " and ".join(self.reference.describe(n) for n in self.is_also) + "."
        elif self.part_of:
            head += (
                f" What arrived is the same part ({diagnose.show_index(getattr(rec, 'index', None))}) of "
                + " and ".join(self.reference.describe(n) for n in self.part_of)
                + "."
            )
        if self.hint:
            head += " " + self.hint
        more = None if structured(self.found) or structured(self.expected) else difference(self.found, self.expected)
        if more and more.rstrip(".") not in head:  # a hint may have said it already (a shape, joined wrongly)
            head += " " + more
        return head


@dataclass
class Unchecked:
    """Something the checker could not compare, and what to do about it."""

    kind: str  # "unknown name", "never computed", "unplaced message", "result", "partial sums"
    text: str
    name: str | None = None  # the name in question, for an unknown name


@dataclass
class Violation:
    """Something the run did that its declared split does not allow (``simulator.checker.split``)."""

    kind: str  # "compute", "given", "cross", "collective", "budget"; "isolation" (outside messages)
    rank: int  # the device that broke it
    event: int  # index into trace.events
    text: str  # what broke, in words
    record: Message | Op | None = None


@dataclass
class CheckReport:
    """The verdict of ``check``: passed, FAILED (with the first divergence, or the first place the run breaks
    its declared split), or not verified (with why).

    Examples:
        >>> import numpy as np
        >>> from simulator import Reference, World, check
        >>> model = lambda dev, x: dev.compute("y", np.add, x, 1.0)
        >>> wrong = lambda dev, x: dev.compute("y", np.add, x, 2.0)
        >>> report = check(World(1).run(wrong, np.ones(1)), Reference.of(model, np.ones(1)))
        >>> report.ok, report.verdict, report.first.name
        (False, 'FAILED', 'y')
    """

    first: Divergence | None
    checked: int  # values compared
    divergent: int  # values that differ (the first and every later one)
    unchecked: list[Unchecked] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # values these inputs cannot tell apart (see _ambiguous)
    broken: list[Violation] = field(default_factory=list)  # what breaks the declared split, first cause first
    split_first: bool = False  # the first broken rule comes before the first divergence (by cause)
    split_checked: bool = False  # a split was declared and checked
    leaks: list[Violation] = field(default_factory=list)  # data that reached a device outside messages (isolation)
    isolation_runs: int = 0  # the runs the isolation check made with devices' own inputs changed (0: not checked)

    @property
    def verdict(self) -> str:
        if self.first is not None or self.broken or self.leaks:
            return FAILED
        return NOT_VERIFIED if self.unchecked else PASSED

    @property
    def ok(self) -> bool:
        """True only when the run passed: every value compared and equal, nothing left unchecked."""
        return self.verdict == PASSED

    @property
    def unknown(self) -> list[str]:
        """Names in the run that the reference does not have."""
        return [u.name for u in self.unchecked if u.kind == "unknown name"]

    def __str__(self) -> str:
        return self.text()

    def text(self, width: int | None = 110) -> str:
        """The report in words, each line wrapped to ``width`` (None: one line per paragraph, for a caller
        that wraps it with text of its own)."""
        text = self._verdict_text() + _notes(self.notes)
        return text if width is None else fit_lines(text, width)

    def _verdict_text(self) -> str:
        if self.verdict == PASSED:
            split = ", and the declared split is kept" if self.split_checked else ""
            if self.isolation_runs:
                split += ", and nothing reaches a device outside messages"
            return f"check passed: {self.checked} values and the result match the single-device run{split}"
        if self.leaks:
            return self._leak_text()
        if self.broken and (self.first is None or self.split_first):
            return self._split_text()
        if self.verdict == FAILED:
            text = f"check FAILED at the first divergence: {self.first.explain()}"
            if self.divergent > 1:  # later, not necessarily caused by it: on other devices, or a second bug
                more = self.divergent - 1
                differ = "value differs" if more == 1 else "values differ"
                text += f"\n  ({more} more {differ} after it: fix this one first, the others often follow from it)"
            if self.broken:
                text += "\n  the run breaks its declared split too:" + _bullets(self.broken, limit=3)
            if self.unchecked:
                text += "\n  also not checked:" + _bullets(self.unchecked, limit=3)
            return text
        n = len(self.unchecked)
        return (
            f"check NOT VERIFIED: {_compared(self.checked)} the single-device run, but "
            f"{n} thing{'s' if n > 1 else ''} could not be checked:" + _bullets(self.unchecked)
        )

    def _leak_text(self) -> str:
        """FAILED where data reached a device outside messages: said first, whatever else is wrong."""
        first, rest = self.leaks[0], self.leaks[1:]
        text = f"check FAILED: data reached a device outside messages: {first.text}."
        if rest:
            text += "\n  also outside messages:" + _bullets(rest, limit=3)
        if self.broken:
            text += "\n  the run breaks its declared split too:" + _bullets(self.broken, limit=3)
        if self.first is not None:
            text += f"\n  and a value differs: {self.first.explain()}"
        return text

    def _split_text(self) -> str:
        """FAILED where the first cause is a broken rule of the split (the values may all be right)."""
        first, rest = self.broken[0], self.broken[1:]
        text = f"check FAILED: the run breaks its declared split: {first.text}."
        if self.first is not None:
            text += f"\n  and a value differs after it: {self.first.explain()}"
        elif not self.divergent:
            text += (
                f"\n  (the {self.checked} values compared match the single-device run: the numbers are right, "
                "but computed or moved where the split does not allow)"
            )
        if rest:
            text += "\n  also breaking the split:" + _bullets(rest, limit=3)
        if self.unchecked:
            text += "\n  also not checked:" + _bullets(self.unchecked, limit=3)
        return text

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def _compared(n: int) -> str:
    return "the 1 value compared matches" if n == 1 else f"the {n} values compared match"


def _bullets(items: list[Unchecked] | list[Violation], limit: int = 12) -> str:
    lines = [f"\n  - {u.text}" for u in items[:limit]]
    if len(items) > limit:
        where = "report.broken" if isinstance(items[0], Violation) else "report.unchecked"
        lines.append(f"\n  - ... and {len(items) - limit} more ({where} lists every one)")
    return "".join(lines)


def _notes(notes: list[str], limit: int = 3) -> str:
    if not notes:
        return ""
    more = f"\n  (and {len(notes) - limit} more like it)" if len(notes) > limit else ""
    return "\n  note: " + "\n  note: ".join(notes[:limit]) + more


def _message(rec: Message) -> str:
    via = f"({rec.label})" if rec.label else f"(tag {rec.tag})"
    return f"message #{rec.id} from device {rec.src} to device {rec.dst} {via}"
