"""``ScheduleRecord``: everything the project knows about one pipeline schedule, kept beside its generator.

A schedule's facts used to live in five tables (the generators by name, the bubble formulas, the what-if's
stage counts, torch's class names); a new schedule missing from one passed silently. Now each generator module
ends with the records of its schedules, ``catalog.py`` gathers them into ``SCHEDULES``, and every other place
(the bubble table, the explorer page, the what-if's layout, the torch comparison, the figures) reads a record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from .schedule import Schedule

BubbleForm = Callable[[int, int, int], "Fraction | None"]


@dataclass(frozen=True)
class ScheduleRecord:
    """One pipeline schedule: how to make it and what is known about it.

    Attributes:
        name: the name commands and ``make_schedule`` take (``"1f1b"``).
        make: the generator, ``make(ranks, microbatches)`` or, for a looped one, ``make(ranks, microbatches,
            virtual=v)``.
        stages_per_rank: model chunks each rank holds: a number, or ``None`` where the caller chooses it
            (``virtual=``, the looped schedules).
        bubble: the bubble in closed form, ``bubble(p, m, v)`` -> idle over busy time per rank, or ``None``
            where no closed form is stated for that case.
        formula: the same form as a page writes it (``"(p - 1) / m"``).
        short_formula: the form once m is large enough (m >= 2p), as the papers and the figures' titles write
            it (``"(p-1)/(vm)"``).
        torch_class: the class of ``torch.distributed.pipelining.schedules`` that makes the same order, or
            ``None`` where torch has none.
        placement: ``"loop"`` (stage s on rank s % p) or ``"v"`` (down the ranks and back up).
        whatif: whether the what-if (``simulator.parallel.whatif``) prices steps of this schedule.

    Examples:
        >>> from fractions import Fraction
        >>> from simulator.parallel.schedules import SCHEDULES
        >>> record = SCHEDULES["1f1b"]
        >>> record.formula, record.torch_class, record.bubble(4, 8, 1)
        ('(p - 1) / m', 'Schedule1F1B', Fraction(3, 8))
        >>> record.make(2, 2).actions[0]
        (0F0, 0F1, 0B0, 0B1)
    """

    name: str
    make: Callable[..., Schedule]
    stages_per_rank: int | None
    bubble: BubbleForm
    formula: str
    short_formula: str
    torch_class: str | None = None
    placement: Literal["loop", "v"] = "loop"
    whatif: bool = True

    @property
    def looped(self) -> bool:
        """Whether the caller chooses the stages per rank (``virtual=``)."""
        return self.stages_per_rank is None

    @property
    def title(self) -> str:
        """The first line of the generator's docstring."""
        return (self.make.__doc__ or self.name).strip().splitlines()[0]

    def stages_on_each_rank(self, virtual: int = 1) -> int:
        """Model chunks per rank when the caller asks for ``virtual`` (ignored unless the schedule is looped)."""
        return virtual if self.stages_per_rank is None else self.stages_per_rank

    def __call__(self, ranks: int, microbatches: int, **options: int) -> Schedule:
        return self.make(ranks, microbatches, **options)
