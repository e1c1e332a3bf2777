"""``Schedule``: a pipeline schedule as data, actions per rank and where each stage lives.

The same ``Schedule`` object drives the simulation (``simulator.parallel.pipeline``), the text grid
(``Schedule.grid``) and the timeline figure (drawn from the simulation's trace); ``Schedule.validate``
checks the numbered rules (``actions.RULES``) and names the first one broken.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .actions import Action, B, F, I, W, add_comms
from .labels import schedule_tag
from .rules import validate
from .timing import grid


@dataclass(frozen=True)
class Schedule:
    """Actions per rank for ``microbatches`` microbatches through ``stages`` stages on ``ranks`` ranks."""

    name: str
    ranks: int
    stages: int
    microbatches: int
    actions: Mapping[int, tuple[Action, ...]]
    placement: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        for key in self.actions:
            if not (isinstance(key, int) and 0 <= key < self.ranks):
                raise ValueError(
                    f"schedule {self.name!r} has actions for rank {key!r}, but its ranks are 0..{self.ranks - 1}"
                )
        placement = tuple(self.placement) or tuple(s % self.ranks for s in range(self.stages))
        object.__setattr__(self, "placement", placement)
        object.__setattr__(self, "actions", {r: tuple(self.actions.get(r, ())) for r in range(self.ranks)})

    # ---- reading and writing ------------------------------------------------------------------
    @classmethod
    def from_text(
        cls,
        rows: Mapping[int, str] | Iterable[str],
        *,
        microbatches: int,
        stages: int | None = None,
        placement: Iterable[int] | None = None,
        name: str = "hand-written",
    ) -> Schedule:
        """A schedule from one line of short forms per rank, e.g. ``["0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"]``, or a list
        of them per rank (``[["0F0", "0B0"], ...]``, or ``Action``s): a schedule is a list of actions per rank."""
        rows = dict(rows) if isinstance(rows, Mapping) else dict(enumerate(rows))
        actions = {r: _row(r, line) for r, line in rows.items()}
        ranks = max(rows) + 1 if rows else 0
        if placement is not None:
            placement = tuple(placement)
        if stages is None:
            stages = (
                len(placement)
                if placement
                else max((a.stage for acts in actions.values() for a in acts), default=0) + 1
            )
        return cls(name, ranks, stages, microbatches, actions, placement or ())

    def __repr__(self) -> str:  # one short line: the actions are what str() and a notebook show
        return f"<Schedule {self.name}: {self.ranks} ranks, {self.stages} stages, {self.microbatches} microbatches>"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def __str__(self) -> str:
        lines = [f"{self.name}: {self.ranks} ranks, {self.stages} stages, {self.microbatches} microbatches"]
        for r, acts in self.actions.items():  # a long rank goes on over lines within 110 columns
            head = f"  rank {r}: "
            lines.append(
                textwrap.fill(" ".join(map(str, acts)), 110, initial_indent=head, subsequent_indent=" " * len(head))
            )
        return "\n".join(lines)

    def rank_of(self, stage: int) -> int:
        return self.placement[stage]

    @cached_property  # (a schedule is immutable; execute asks for every action)
    def has_comms(self) -> bool:
        return any(not a.is_compute for acts in self.actions.values() for a in acts)

    @property
    def splits_backward(self) -> bool:
        """True when the schedule runs the backward as separate I and W actions."""
        return any(a.kind in (I, W) for acts in self.actions.values() for a in acts)

    def op_tag(self, name: str) -> str:
        """How a timeline labels an op of a run of this schedule: ``F3``, and ``B3`` for the whole backward
        (``I3``/``W3`` where the schedule splits it), as the pipeline papers draw them."""
        return schedule_tag((I,) if self.splits_backward else (F, B))(name)

    def compute_only(self) -> Schedule:
        """The same schedule without its send and receive actions."""
        acts = {r: tuple(a for a in acts if a.is_compute) for r, acts in self.actions.items()}
        return Schedule(self.name, self.ranks, self.stages, self.microbatches, acts, self.placement)

    def with_comms(self) -> Schedule:
        """This schedule with sends and receives inserted (see ``add_comms``)."""
        return add_comms(self)

    def validate(self, *, blocking_sends: bool = False) -> Schedule:
        """Check every rule in ``RULES``; raise ``ScheduleError`` naming the first broken one."""
        validate(self, blocking_sends=blocking_sends)
        return self

    def grid(self, costs: Mapping[str, float] | None = None, width: int = 110) -> str:
        """The schedule as a text grid, one row per rank, one column per time unit (see ``grid``)."""
        return grid(self, costs, width)


def _row(rank: Any, line: Any) -> tuple[Action, ...]:
    """One rank's actions: a line of short forms, or a list of short forms or ``Action``s."""
    if isinstance(line, str):
        return tuple(Action.parse(tok) for tok in line.split())
    if isinstance(line, (list, tuple)) and all(isinstance(a, (Action, str)) for a in line):
        return tuple(a if isinstance(a, Action) else Action.parse(a) for a in line)
    raise TypeError(
        f"the schedule's row for rank {rank!r} is {type(line).__name__} {line!r:.60}: give one line of actions per rank "
        '("0F0 0F1 0B0 0B1"), or a list of them (["0F0", "0F1", "0B0", "0B1"])'
    )
