"""V-shaped schedules: two stages per rank placed down and back up, as torch.distributed.pipelining makes them.

With 2p stages on p ranks, the V placement puts stage s on rank s for the first half and on rank
2p - 1 - s for the second: rank 0 holds the first and the last stage, rank p - 1 the two middle ones
(which are adjacent, so the turn of the V costs no message). A microbatch goes down the ranks and
comes back up, and the loss is computed on rank 0, where the backward then starts: every rank holds
the same amount of work at every point of the step, which is what lets these schedules close the
bubble with the weight-gradient passes.

- ``zbv`` (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", section 6, ZB-V; torch's
  ``ScheduleZBVZeroBubble``): with equal F, I and W times and m >= 2p - 1 no rank idles in the
  steady state; the ramps leave (p - 1) F per rank, (p - 1) / (6 m) of its work (see
  ``simulator.parallel.schedules.bubbles``).
- ``dualpipe_v`` (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", DualPipe, in its "cut in half"
  V form; torch's ``ScheduleDualPipeV``): forward of one microbatch and backward of another are
  paired so that one's communication hides behind the other's compute. torch lists each pair as one
  overlapped action (``OVERLAP_F_B``); on the simulator's one compute stream per device the pair runs
  as its forward, then its full backward, which is the order torch's runtime runs it in too.

Both are the compute orders torch generates (tests compare them action for action).
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

from .actions import Action, B, F, I, W
from .classic import _check_sizes
from .record import ScheduleRecord
from .schedule import Schedule


def v_placement(ranks: int) -> tuple[int, ...]:
    """Stage s on rank s for s < p, on rank 2p - 1 - s after: (0, 1, ..., p-1, p-1, ..., 1, 0)."""
    return tuple(range(ranks)) + tuple(reversed(range(ranks)))


class _Counter:
    """Per (stage, kind), the next microbatch: each stage takes its microbatches in order."""

    def __init__(self) -> None:
        self.next: dict[tuple[int, str], int] = defaultdict(int)

    def take(self, stage: int, kind: str) -> Action:
        i = self.next[stage, kind]
        self.next[stage, kind] = i + 1
        return Action(stage, kind, i)


def zbv(ranks: int, microbatches: int) -> Schedule:
    """ZB-V (torch's ``ScheduleZBVZeroBubble``): the V placement, backward split into I and W.

    Rank r (stages a = r and b = 2p - 1 - r): 2(p - r) - 1 forwards of a; r pairs (F of b, F of a);
    p - r rounds of (F, I, W of b); then the steady state, F of a, I and W of a, F of b, I and W of b,
    until every microbatch has gone through; the cool-down runs the remaining I passes and the W
    passes last. torch plans the warm-up for at least 2p - 1 microbatches and drops the actions of
    those that do not exist, so any m >= 1 works.
    """
    _check_sizes(ranks, microbatches)
    p, m = ranks, microbatches
    n = max(2 * p - 1, m)
    acts = {}
    for r in range(p):
        a, b = r, 2 * p - 1 - r
        c = _Counter()
        seq = [c.take(a, F) for _ in range(2 * (p - r) - 1)]
        for _ in range(r):
            seq += [c.take(b, F), c.take(a, F)]
        for _ in range(p - r):
            seq += [c.take(b, F), c.take(b, I), c.take(b, W)]
        while c.next[b, F] < c.next[a, F] or c.next[a, F] < n:
            if c.next[a, F] < n:
                seq.append(c.take(a, F))
            seq += [c.take(a, I), c.take(a, W), c.take(b, F), c.take(b, I), c.take(b, W)]
        for _ in range(r):
            seq += [c.take(a, I), c.take(b, I)]
        for _ in range(p - r):
            seq += [c.take(a, I), c.take(a, W)]
        while c.next[b, W] < c.next[b, I]:
            seq.append(c.take(b, W))
        while c.next[a, W] < c.next[a, I]:
            seq.append(c.take(a, W))
        acts[r] = tuple(x for x in seq if x.microbatch < m)
    return Schedule("ZB-V", p, 2 * p, m, acts, v_placement(p))


def dualpipe_v(ranks: int, microbatches: int) -> Schedule:
    """DualPipeV (torch's ``ScheduleDualPipeV``): the V placement, forward-backward pairs, needs m >= 2p.

    Rank r (stages a = r and b = 2p - 1 - r), in torch's eight steps: 2(p - r - 1) forwards of a;
    r + 1 pairs (F of a, F of b); p - r - 1 rounds of (I of b, a held-back W, F of b); m - 2p + r + 1
    rounds of two overlapped pairs (F of a with the backward of b, F of b with the backward of a);
    p - r - 1 rounds of (backward of b, then F of b with the backward of a); r + 1 pairs of backwards
    of b and a (the second half split into I, their W held back); p - r - 1 rounds of (a held-back W,
    a backward of a); the remaining W passes.
    """
    _check_sizes(ranks, microbatches)
    p, m = ranks, microbatches
    if m < 2 * p:
        raise ValueError(
            f"DualPipeV needs at least as many microbatches as stages: {2 * p} stages on {p} ranks need m >= "
            f"{2 * p}, got {m}"
        )
    acts = {}
    for r in range(p):
        a, b = r, 2 * p - 1 - r
        c = _Counter()
        held: list[Action] = []  # I passes whose W comes later, oldest first
        seq: list[Action] = []

        def act(stage: int, kind: str, c=c, held=held, seq=seq) -> None:
            if kind == B:  # a full backward counts as both parts, so the I and W counters stay in step
                i = c.take(stage, I).microbatch
                c.take(stage, W)
                seq.append(Action(stage, B, i))
                return
            done = c.take(stage, kind)
            if kind == I:
                held.append(Action(stage, W, done.microbatch))
            seq.append(done)

        def weight(held=held, seq=seq, c=c) -> None:
            if held:
                w = held.pop(0)
                c.next[w.stage, W] += 1
                seq.append(w)

        def pair(forward: int, backward: int) -> None:  # torch's OVERLAP_F_B: F, then the full backward
            act(forward, F)
            act(backward, B)

        for _ in range(2 * (p - r - 1)):
            act(a, F)
        for _ in range(r + 1):
            act(a, F)
            act(b, F)
        for _ in range(p - r - 1):
            act(b, I)
            weight()
            act(b, F)
        for i in range(m - 2 * p + r + 1):
            if i == 0 and r == p - 1:  # not overlapped: it shortens the bubble (torch's note)
                act(a, F)
                act(b, B)
            else:
                pair(a, b)
            pair(b, a)
        for _ in range(p - r - 1):
            act(b, B)
            pair(b, a)
        split = False
        for i in range(r + 1):  # the second half of these backwards is split, its W held back
            if i == (r + 1) // 2 and r % 2 == 1:
                split = True
            act(b, I if split else B)
            if i == (r + 1) // 2 and r % 2 == 0:
                split = True
            act(a, I if split else B)
        for _ in range(p - r - 1):
            weight()
            act(a, I if split else B)
        for _ in range(r + 1):
            weight()
        acts[r] = tuple(seq)
    return Schedule("DualPipeV", p, 2 * p, m, acts, v_placement(p))


def _zbv_bubble(p: int, m: int, v: int) -> Fraction | None:
    """ZB-V: the ramps leave (p - 1) F per rank of 6 m F of work, stated for m >= 2p - 1."""
    return Fraction(p - 1, 6 * m) if m >= 2 * p - 1 else None


def _dualpipe_v_bubble(p: int, m: int, v: int) -> Fraction | None:
    """DualPipeV: as ZB-V, for every m it accepts (m >= 2p)."""
    return Fraction(p - 1, 6 * m) if m >= 2 * p else None


RECORDS = (
    ScheduleRecord(
        "zbv", zbv, 2, _zbv_bubble, "(p - 1) / (6 m), for m >= 2p - 1", "(p-1)/(6m)", "ScheduleZBVZeroBubble", "v"
    ),
    ScheduleRecord(
        "dualpipe-v",
        dualpipe_v,
        2,
        _dualpipe_v_bubble,
        "(p - 1) / (6 m), for m >= 2p",
        "(p-1)/(6m)",
        "ScheduleDualPipeV",
        "v",
    ),
)
