"""The classic schedules, one stage per rank: GPipe, 1F1B and ZB-H1 (the backward split in I and W)."""

from __future__ import annotations

from fractions import Fraction

from .actions import Action, B, F, I, W
from .record import ScheduleRecord
from .schedule import Schedule


def gpipe(ranks: int, microbatches: int) -> Schedule:
    """GPipe: every rank runs all its forwards, then all its backwards (in microbatch order)."""
    _check_sizes(ranks, microbatches)
    acts = {
        r: tuple(Action(r, F, i) for i in range(microbatches)) + tuple(Action(r, B, i) for i in range(microbatches))
        for r in range(ranks)
    }
    return Schedule("GPipe", ranks, ranks, microbatches, acts)


def one_f_one_b(ranks: int, microbatches: int) -> Schedule:
    """1F1B (PipeDream-flush): p - r - 1 warm-up forwards, then one forward and one backward in turn.

    Rank r never holds more than p - r microbatches' activations, against m for GPipe, with the
    same bubble.
    """
    _check_sizes(ranks, microbatches)
    acts = {}
    for r in range(ranks):
        warmup = min(ranks - r - 1, microbatches)
        seq = [Action(r, F, i) for i in range(warmup)]
        for j in range(microbatches - warmup):
            seq += [Action(r, F, warmup + j), Action(r, B, j)]
        seq += [Action(r, B, j) for j in range(microbatches - warmup, microbatches)]
        acts[r] = tuple(seq)
    return Schedule("1F1B", ranks, ranks, microbatches, acts)


def zb_h1(ranks: int, microbatches: int) -> Schedule:
    """ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024): 1F1B with the backward split in I and W.

    The input-gradient pass I is what the previous stage waits for; the weight-gradient pass W only
    feeds the optimizer. Rank r runs 1F1B's order with I in place of B, and holds back its first r
    W passes: the input gradients then reach rank 0 sooner, and the held-back W fill the tail where
    1F1B idles. With equal F, I and W times and m >= p the bubble drops from 1F1B's (p-1)(F+I+W) to
    (p-1)F, a ratio of (p-1)/(3m) to the useful work. Rank r keeps at most p microbatches in flight
    (forward done, W not yet): the peak activation memory of 1F1B's first rank.
    """
    _check_sizes(ranks, microbatches)
    acts = {}
    for r in range(ranks):
        warmup = min(ranks - r, microbatches)
        seq = [Action(r, F, i) for i in range(warmup)]
        held_w = 0
        for k in range(microbatches):
            seq.append(Action(r, I, k))
            if k >= r:  # the first r weight passes wait until the end
                seq.append(Action(r, W, held_w))
                held_w += 1
            if warmup + k < microbatches:
                seq.append(Action(r, F, warmup + k))
        seq += [Action(r, W, j) for j in range(held_w, microbatches)]
        acts[r] = tuple(seq)
    return Schedule("ZB-H1", ranks, ranks, microbatches, acts)


def _check_sizes(ranks: int, microbatches: int) -> None:
    if not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"a pipeline needs at least 1 rank, got {ranks!r}")
    if not isinstance(microbatches, int) or microbatches < 1:
        raise ValueError(f"a pipeline step needs at least 1 microbatch, got {microbatches!r}")


def _plain_bubble(p: int, m: int, v: int) -> Fraction:
    """GPipe and 1F1B (Huang et al. 2019; Narayanan et al. 2019): (p - 1) / m, any m."""
    return Fraction(p - 1, m)


def _zb_h1_bubble(p: int, m: int, v: int) -> Fraction:
    """ZB-H1 (Qi et al. 2024: the bubble drops to (p - 1) F); a microbatch short of p leaves a ramp slot empty."""
    return Fraction((p - 1) + max(0, p - m), 3 * m)


RECORDS = (
    ScheduleRecord("gpipe", gpipe, 1, _plain_bubble, "(p - 1) / m", "(p-1)/m", "ScheduleGPipe"),
    ScheduleRecord("1f1b", one_f_one_b, 1, _plain_bubble, "(p - 1) / m", "(p-1)/m", "Schedule1F1B"),
    ScheduleRecord("zb-h1", zb_h1, 1, _zb_h1_bubble, "((p - 1) + max(0, p - m)) / (3 m)", "(p-1)/(3m)"),
)
