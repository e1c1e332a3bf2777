"""The pipeline bubble in closed form, per schedule: idle time over busy time on every rank.

Each schedule's record (``SCHEDULES[name].bubble`` and ``.formula``, beside its generator) holds its form;
``bubble_ratio`` looks it up. Costs are per stage and microbatch, ``schedules.UNIT_COSTS``: F = I = W = 1 and
B = I + W = 2 (a backward twice a forward, the 1F1B papers' assumption; its two parts equal, the ZB paper's); messages
take no time. With v stages per rank a stage is 1/v of a plain stage's work, so these
ratios compare schedules doing the same work per rank.

Every rank idles the same time in these regimes. The forms for GPipe, 1F1B (Huang et al. 2019;
Narayanan et al. 2019), interleaved 1F1B (Narayanan et al. 2021: "(p - 1) / (v m)") and ZB-H1 (Qi et al.
2024: the bubble drops to (p - 1) F) are the papers'; the others, and the terms for m < p, are what the
schedules torch generates give, measured by ``schedules.execute`` and the simulation for p in 2..8 and
m in 1..16 (tests/parallel/test_schedule_bubbles.py): a microbatch short of p leaves a ramp slot empty once
per extra stage a rank holds. The zero-bubble schedules leave (p - 1) F idle per rank: the first
forward has to travel the pipeline before anything else can start.
"""

from __future__ import annotations

from fractions import Fraction

from .catalog import schedule_record


def bubble_ratio(name: str, p: int, m: int, v: int = 1) -> Fraction | None:
    """Idle over busy time per rank for schedule ``name``, or None where no closed form is stated (an
    interleaved zero-bubble step with m < p, a ZB-V step with m < 2p - 1).

    Args:
        name: a key of ``SCHEDULES``.
        p: pipeline ranks.
        m: microbatches per step.
        v: stages per rank, for the looped schedules.

    Examples:
        >>> from simulator.parallel.schedules import bubble_ratio
        >>> bubble_ratio("1f1b", 4, 8), bubble_ratio("zbv", 4, 5)
        (Fraction(3, 8), None)
    """
    return schedule_record(name).bubble(p, m, v)
