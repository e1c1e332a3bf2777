"""Looped schedules: several stages per rank, stage s on rank s % p, as torch.distributed.pipelining makes them.

With ``v`` stages per rank ("virtual" stages, Megatron-LM's model chunks) every rank holds v thin
slices of the model spread along its depth: rank r holds stages r, r + p, ..., r + (v-1) p. A
microbatch therefore crosses every rank v times, and each pass through a stage is 1/v of the work of
a plain pipeline stage, so the ramp-up and ramp-down, the bubble, shrink by v.

Three orders, each the compute order torch.distributed.pipelining's schedule class of the same name
generates (tests compare them action for action, p in 2..8, m in 1..16):

- ``interleaved_1f1b`` (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
  Clusters", Megatron-LM; torch's ``ScheduleInterleaved1F1B``): depth first. Microbatches go through
  in rounds: a rank runs a round's microbatches through one of its stages, then the same ones through
  its next stage. Megatron needs m to be a multiple of p (a round is p microbatches); torch relaxes it
  to rounds = max(1, m // p) of m / rounds microbatches each, which needs m % rounds == 0 only
  (m = 10 on p = 4: two rounds of five).
- ``looped_bfs`` (Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism"; torch's ``ScheduleLoopedBFS``):
  breadth first. Every microbatch through the rank's first stage, then every microbatch through its
  next, and the backwards in reverse; all m microbatches' activations stay alive, as in GPipe.
- ``interleaved_zero_bubble`` (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", the ZB-1P
  schedule interleaved; torch's ``ScheduleInterleavedZeroBubble``): interleaved 1F1B with the backward
  split into I (input gradients, what the previous stage waits for) and W (weight gradients, which
  nobody waits for); rank r holds back its first r weight passes to fill the ramp-down.

All three share the warm-up / steady 1F1B / cool-down skeleton of ``_interleaved_order``, torch's
``_get_1f1b_rank_ops``, without the idle slots torch pads its lists with (here time comes from
``execute`` or the simulation, not from list positions).
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction

from .actions import Action, B, F, I, W
from .classic import _check_sizes
from .record import ScheduleRecord
from .schedule import Schedule


def _check_virtual(virtual: int, what: str) -> None:
    if not isinstance(virtual, int) or virtual < 1:
        raise ValueError(f"{what}(virtual={virtual!r}): give at least 1 stage per rank")


def microbatches_per_round(ranks: int, microbatches: int, what: str) -> int:
    """How many microbatches go through a stage before the rank moves on to its next stage.

    rounds = max(1, m // p), each of m / rounds microbatches (torch's rule; Megatron-LM's when p divides m).
    """
    rounds = max(1, microbatches // ranks)
    if microbatches % rounds:
        raise ValueError(
            f"{what} sends microbatches through in {rounds} rounds (m // p = {microbatches} // {ranks}) of equal "
            f"size: {microbatches} microbatches do not split into {rounds} equal rounds; use a multiple of {rounds} "
            f"(e.g. {microbatches - microbatches % rounds} or {microbatches - microbatches % rounds + rounds})"
        )
    return microbatches // rounds


def _interleaved_order(
    ranks: int, microbatches: int, virtual: int, rank: int, warmup: int, zero_bubble: bool
) -> tuple[Action, ...]:
    """One rank's compute order: ``warmup`` forwards, then a forward and a backward in turn, then the backwards.

    Step k of the forwards runs the rank's local stage (k // per_round) % v; step j of the backwards
    its local stage v - 1 - (j // per_round) % v (the last one first); each stage takes its microbatches
    in order. With ``zero_bubble`` the backward is I, and the W of the backward made ``rank`` steps
    earlier follows it, once the rank is past its first ``rank`` backwards (the held-back ones come last).
    """
    per_round = microbatches_per_round(ranks, microbatches, "this interleaved schedule")
    total = microbatches * virtual
    back = I if zero_bubble else B

    def fwd_stage(k: int) -> int:
        return (k // per_round) % virtual * ranks + rank

    def bwd_stage(j: int) -> int:
        return (virtual - 1 - (j // per_round) % virtual) * ranks + rank

    next_mb: dict[tuple[int, str], int] = defaultdict(int)

    def take(stage: int, kind: str) -> Action:
        i = next_mb[stage, kind]
        next_mb[stage, kind] = i + 1
        return Action(stage, kind, i)

    seq = [take(fwd_stage(k), F) for k in range(warmup)]
    backwards: list[int] = []  # the stage of each backward so far, in order: its W follows later
    weights = 0
    for k in range(warmup, total + warmup):
        if k < total:
            seq.append(take(fwd_stage(k), F))
        backwards.append(bwd_stage(k - warmup))
        seq.append(take(backwards[-1], back))
        if zero_bubble and k - warmup >= rank:
            seq.append(take(backwards[weights], W))
            weights += 1
    if zero_bubble:
        seq += [take(stage, W) for stage in backwards[weights:]]
    return tuple(seq)


def interleaved_1f1b(ranks: int, microbatches: int, virtual: int = 2) -> Schedule:
    """Interleaved 1F1B (Megatron-LM; torch's ``ScheduleInterleaved1F1B``): v stages per rank, depth first.

    Rank r warms up with (v - 1) * per_round + 2 (p - 1 - r) forwards (at most m v), then alternates one
    forward and one backward. With m a multiple of p and equal forward and backward costs the idle time
    is (p - 1) / (v m) of the busy time, 1/v of plain 1F1B's. m need not be a multiple of p (see
    ``microbatches_per_round``).
    """
    _check_sizes(ranks, microbatches)
    _check_virtual(virtual, "interleaved_1f1b")
    per_round = microbatches_per_round(ranks, microbatches, "interleaved 1F1B")
    acts = {}
    for r in range(ranks):
        warmup = min((virtual - 1) * per_round + 2 * (ranks - 1 - r), microbatches * virtual)
        acts[r] = _interleaved_order(ranks, microbatches, virtual, r, warmup, zero_bubble=False)
    return Schedule(f"interleaved 1F1B (v={virtual})", ranks, ranks * virtual, microbatches, acts)


def interleaved_zero_bubble(ranks: int, microbatches: int, virtual: int = 2) -> Schedule:
    """Interleaved zero bubble (ZB-1P interleaved; torch's ``ScheduleInterleavedZeroBubble``).

    The interleaved 1F1B skeleton with one forward less of warm-up per hop ((v - 1) * per_round + p - 1 - r),
    the backward split into I and W, and rank r's first r weight passes held back to the end.
    """
    _check_sizes(ranks, microbatches)
    _check_virtual(virtual, "interleaved_zero_bubble")
    per_round = microbatches_per_round(ranks, microbatches, "interleaved zero bubble")
    acts = {}
    for r in range(ranks):
        warmup = min((virtual - 1) * per_round + (ranks - 1 - r), microbatches * virtual)
        acts[r] = _interleaved_order(ranks, microbatches, virtual, r, warmup, zero_bubble=True)
    return Schedule(f"interleaved zero bubble (v={virtual})", ranks, ranks * virtual, microbatches, acts)


def looped_bfs(ranks: int, microbatches: int, virtual: int = 2) -> Schedule:
    """Breadth-first looped pipeline (torch's ``ScheduleLoopedBFS``): v stages per rank, one stage at a time.

    Rank r runs every microbatch through stage r, then through stage r + p, and so on; then the
    backwards, last stage first, each stage's microbatches in reverse order (the last forward first, as
    its activations are the freshest). Like GPipe it holds all m microbatches' activations at its peak;
    unlike it, a rank's next stage can start as soon as the rank below has passed it the first microbatch.
    """
    _check_sizes(ranks, microbatches)
    _check_virtual(virtual, "looped_bfs")
    acts = {}
    for r in range(ranks):
        stages = range(r, ranks * virtual, ranks)
        seq = [Action(s, F, i) for s in stages for i in range(microbatches)]
        seq += [Action(s, B, i) for s in reversed(stages) for i in reversed(range(microbatches))]
        acts[r] = tuple(seq)
    return Schedule(f"looped BFS (v={virtual})", ranks, ranks * virtual, microbatches, acts)


def _looped_bubble(p: int, m: int, v: int) -> Fraction:
    """Interleaved 1F1B and looped BFS: (p - 1) / (v m) (Narayanan et al. 2021), plus an empty ramp slot per
    extra stage a rank holds for each microbatch short of p."""
    return Fraction((p - 1) + (v - 1) * max(0, p - m), v * m)


def _interleaved_zb_bubble(p: int, m: int, v: int) -> Fraction | None:
    """Interleaved zero bubble: (p - 1) F idle over 3 v m F of work, stated for m >= p."""
    return Fraction(p - 1, 3 * v * m) if m >= p else None


_LOOPED_FORM = "((p - 1) + (v - 1) max(0, p - m)) / (v m)"
RECORDS = (
    ScheduleRecord(
        "interleaved-1f1b",
        interleaved_1f1b,
        None,
        _looped_bubble,
        _LOOPED_FORM,
        "(p-1)/(vm)",
        "ScheduleInterleaved1F1B",
    ),
    ScheduleRecord("looped-bfs", looped_bfs, None, _looped_bubble, _LOOPED_FORM, "(p-1)/(vm)", "ScheduleLoopedBFS"),
    ScheduleRecord(
        "interleaved-zb",
        interleaved_zero_bubble,
        None,
        _interleaved_zb_bubble,
        "(p - 1) / (3 v m), for m >= p",
        "(p-1)/(3vm)",
        "ScheduleInterleavedZeroBubble",
    ),
)
