"""What a view document shows at a step, read in Python: the same replay ``view.js`` does.

The widget uses it for its text form (what a stored notebook shows where no browser draws the
widget), and the tests use it to hold the document to the ``Stepper``: for every step of a run, the
cards list what the stepper's memory holds. It reads only the document, as the module does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.values import fill_line, fit_lines


@dataclass(frozen=True)
class Item:
    """One value on a device's card."""

    name: str
    value: str  # the short text the card shows
    part: str | None  # the shard's part, e.g. "[0:2, 2:4]"
    partial: tuple[int, ...] | None  # the ranks a partial sum is over
    microbatch: int | None
    event: int  # the document event that placed it
    diverged: bool  # it shows the first divergence

    def render(self) -> str:
        part = f" {self.part}" if self.part else ""
        partial = f" (partial over {', '.join(map(str, self.partial))})" if self.partial else ""
        flag = "  <- first divergence" if self.diverged else ""
        return f"{self.name}{part}{partial}={self.value}{flag}"


@dataclass(frozen=True)
class Arrow:
    """A message in flight, drawn from its sender to its receiver."""

    message: int
    src: int
    dst: int
    name: str | None
    label: str | None
    value: str
    event: int  # its send, in the document
    diverged: bool
    part: str | None = None
    partial: tuple[int, ...] | None = None

    def render(self) -> str:
        what = f" {self.name}" if self.name else ""
        partial = f" (partial over {', '.join(map(str, self.partial))})" if self.partial else ""
        label = f" ({self.label})" if self.label else ""
        flag = "  <- first divergence" if self.diverged else ""
        return f"#{self.message} {self.src}->{self.dst}{what}{partial}={self.value}{label}{flag}"


@dataclass(frozen=True)
class ViewState:
    """The view at one step: the cards, the arrows, and the event that led here."""

    step: int
    steps: int
    cards: list[list[Item]]
    arrows: list[Arrow]
    said: str  # the current event in words

    def render(self, width: int = 110) -> str:
        """The state in lines of at most ``width`` characters: a device's values, and the messages in
        flight, continue on lines of their own."""
        lines = fit_lines(f"step {self.step}/{self.steps}  {self.said}", width).split("\n")
        label = len(f"device {len(self.cards) - 1}")
        for rank, items in enumerate(self.cards):
            lines += _block(f"  {f'device {rank}':<{label}} | ", [i.render() for i in items] or ["(empty)"], width)
        lines += _block("  in flight: ", [a.render() for a in self.arrows] or ["none"], width, sep="; ")
        return "\n".join(lines)

    __str__ = render


def _block(head: str, items: list[str], width: int, sep: str = "  ") -> list[str]:
    """``items`` after ``head``, as many to a line as fit in ``width``; later lines start where the first item
    does, and an item too long for a line of its own goes on over the next ones."""
    indent = " " * len(head)
    lines, line = [], head
    for item in items:
        if line not in (head, indent) and len(line) + len(sep) + len(item) > width:
            lines.append(line)
            line = indent
        line += ("" if line in (head, indent) else sep) + item
    lines.append(line)
    return [piece for x in lines for piece in fill_line(x, width, indent + "  ")]


def steps(doc: dict[str, Any]) -> int:
    """How many steps the document has (positions run from 0 to this)."""
    return len(doc["events"]) - doc["base"]


def state_at(doc: dict[str, Any], step: int) -> ViewState:
    """Apply the first ``step`` events' memory and flight effects to the document's initial state."""
    n = steps(doc)
    if not 0 <= step <= n:
        raise ValueError(f"step {step}: this view has steps 0 to {n}")
    events, base = doc["events"], doc["base"]
    memory: list[dict[str, int]] = [dict(map(tuple, held)) for held in doc["initial"]["mem"]]
    flying: dict[int, int] = {events[i]["m"]: i for i in doc["initial"]["fly"]}
    for i in range(base, base + step):
        e = events[i]
        if e.get("fly") == 1:
            flying[e["m"]] = i
        elif e.get("fly") == -1:
            flying.pop(e["m"], None)
        if e.get("mem") == 1:
            memory[e["r"]][e["n"]] = i
        elif e.get("mem") == -1:
            memory[e["r"]].pop(e["n"], None)
    marks = set((doc.get("check") or {}).get("marks") or [])
    cards = [[_item(doc, name, i, i in marks) for name, i in held.items()] for held in memory]
    arrows = [_arrow(doc, i, i in marks) for i in flying.values()]
    said = said_at(doc, base + step - 1) if step else "start: nothing has happened yet"
    return ViewState(step, n, cards, arrows, said)


def said_at(doc: dict[str, Any], i: int) -> str:
    """Document event i in words (its value's text goes between the two halves of ``say``)."""
    e = doc["events"][i]
    say = e["say"]
    return say if isinstance(say, str) else _short(doc, e).join(say)


def _short(doc: dict[str, Any], e: dict[str, Any]) -> str:
    if "v" not in e:
        return ""
    text = doc["values"][e["v"]]
    return text if isinstance(text, str) else text[0]


def _item(doc: dict[str, Any], name: str, i: int, diverged: bool) -> Item:
    e = doc["events"][i]
    partial = tuple(e["ps"]) if "ps" in e else None
    return Item(name, _short(doc, e), e.get("pt"), partial, e.get("mb"), i, diverged)


def _arrow(doc: dict[str, Any], i: int, diverged: bool) -> Arrow:
    e = doc["events"][i]
    partial = tuple(e["ps"]) if "ps" in e else None
    return Arrow(e["m"], e["r"], e["o"], e.get("n"), e.get("lb"), _short(doc, e), i, diverged, e.get("pt"), partial)
