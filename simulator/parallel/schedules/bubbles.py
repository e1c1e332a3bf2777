"""The pipeline bubble in closed form, per schedule: idle time over busy time on every rank.

Costs are per stage and microbatch, ``schedules.UNIT_COSTS``: F = I = W = 1 and B = I + W = 2 (a
backward twice a forward, the 1F1B papers' assumption; its two parts equal, the ZB paper's); messages
take no time. With v stages per rank a stage is 1/v of a plain stage's work, so these
ratios compare schedules doing the same work per rank.

    gpipe, 1f1b                  (p - 1) / m                               any m
    interleaved-1f1b, looped-bfs ((p - 1) + (v - 1) max(0, p - m)) / (v m)  any m torch accepts
    zb-h1                        ((p - 1) + max(0, p - m)) / (3 m)         any m
    interleaved-zb               (p - 1) / (3 v m)                         m >= p
    zbv                          (p - 1) / (6 m)                           m >= 2p - 1
    dualpipe-v                   (p - 1) / (6 m)                           m >= 2p (all it accepts)

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

NAMES = ("gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "zb-h1", "interleaved-zb", "zbv", "dualpipe-v")
FORMULAS = {  # the table above, as a page or a figure writes it
    "gpipe": "(p - 1) / m",
    "1f1b": "(p - 1) / m",
    "interleaved-1f1b": "((p - 1) + (v - 1) max(0, p - m)) / (v m)",
    "looped-bfs": "((p - 1) + (v - 1) max(0, p - m)) / (v m)",
    "zb-h1": "((p - 1) + max(0, p - m)) / (3 m)",
    "interleaved-zb": "(p - 1) / (3 v m), for m >= p",
    "zbv": "(p - 1) / (6 m), for m >= 2p - 1",
    "dualpipe-v": "(p - 1) / (6 m), for m >= 2p",
}


def bubble_ratio(name: str, p: int, m: int, v: int = 1) -> Fraction | None:
    """Idle over busy time per rank for schedule ``name`` (see the table above), or None where no closed
    form is stated (an interleaved zero-bubble step with m < p, a ZB-V step with m < 2p - 1)."""
    if name in ("gpipe", "1f1b"):
        return Fraction(p - 1, m)
    if name in ("interleaved-1f1b", "looped-bfs"):
        return Fraction((p - 1) + (v - 1) * max(0, p - m), v * m)
    if name == "zb-h1":
        return Fraction((p - 1) + max(0, p - m), 3 * m)
    if name == "interleaved-zb":
        return Fraction(p - 1, 3 * v * m) if m >= p else None
    if name == "zbv":
        return Fraction(p - 1, 6 * m) if m >= 2 * p - 1 else None
    if name == "dualpipe-v":
        return Fraction(p - 1, 6 * m) if m >= 2 * p else None
    raise KeyError(f"no closed form for schedule {name!r}; known: {', '.join(NAMES)}")
