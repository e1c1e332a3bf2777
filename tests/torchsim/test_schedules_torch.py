"""Every schedule torch.distributed.pipelining ships, generated here action for action as torch generates it.

For p in 2..8 and m in 1..16 (and 1 to 4 stages per rank where the schedule takes any number), our
generator and torch's schedule class give the same compute order on every rank wherever torch
accepts the case, and refuse the same cases (our 1F1B also runs m < p, which torch refuses). Every
order passes the validator's rules, with and without the comm pass.
"""

from __future__ import annotations

import pytest

from simulator.parallel.schedules import SCHEDULES, Action, Schedule, ScheduleError, make_schedule
from simulator.torchsim.schedules import torch_order, torch_schedules

pytest.importorskip("torch.distributed.pipelining")

P_RANGE = range(2, 9)
M_RANGE = range(1, 17)
CASES = [
    (name, v)
    for name in torch_schedules()
    for v in ((1, 2, 3, 4) if SCHEDULES[name].looped else (SCHEDULES[name].stages_per_rank,))
]


def ours(name: str, p: int, m: int, v: int) -> Schedule:
    return make_schedule(name, p, m, virtual=v) if SCHEDULES[name].looped else make_schedule(name, p, m)


@pytest.mark.parametrize(("name", "v"), CASES)
def test_compute_order_equals_torchs(name, v):
    compared = 0
    for p in P_RANGE:
        for m in M_RANGE:
            try:
                want = torch_order(name, p, m, v)
            except ValueError:
                if name == "1f1b":  # torch's 1F1B refuses m < p; ours runs it with a shorter warm-up
                    assert m < p
                    ours(name, p, m, v).validate()
                else:
                    with pytest.raises(ValueError):
                        ours(name, p, m, v)
                continue
            sched = ours(name, p, m, v)
            got = dict(sched.actions)
            if name == "1f1b" and got != want:
                assert_torch_1f1b_off_by_one(sched, want)
            else:
                assert got == want, f"{name} v={v} p={p} m={m}"
            sched.validate()
            sched.with_comms().validate()
            compared += 1
    assert compared >= 49  # DualPipeV, the pickiest, takes 49 of the 112 (p, m) cases


def assert_torch_1f1b_off_by_one(sched: Schedule, want: dict[int, tuple[Action, ...]]) -> None:
    """torch 2.13's ``Schedule1F1B._get_pipeline_order`` (the order it reports, not the one its runtime
    runs) numbers the last rank's forwards from 1: it lists F1..Fm, a microbatch that does not exist,
    and no F0. Every other rank matches; our validator refuses torch's order under rule 1."""
    last = sched.ranks - 1
    assert {r: acts for r, acts in sched.actions.items() if r < last} == {r: want[r] for r in range(last)}
    shifted = tuple(Action(a.stage, a.kind, a.microbatch + (a.kind == "F")) for a in sched.actions[last])
    assert want[last] == shifted
    with pytest.raises(ScheduleError, match=f"names microbatch {sched.microbatches}"):
        Schedule("torch's 1F1B", sched.ranks, sched.stages, sched.microbatches, want).validate()


def test_the_v_placement_puts_the_turn_on_the_last_rank():
    s = make_schedule("zbv", 4, 8)
    assert s.placement == (0, 1, 2, 3, 3, 2, 1, 0)
    comms = [a for a in s.with_comms().actions[3] if not a.is_compute]
    assert all(a.stage in (3, 4) for a in comms)
    assert {a.kind for a in comms if a.stage == 3} == {"RECV_F", "SEND_B"}  # stage 3 hands stage 4 its output in memory
    assert {a.kind for a in comms if a.stage == 4} == {"SEND_F", "RECV_B"}


def test_dualpipe_v_runs_overlapped_pairs_as_forward_then_full_backward():
    """torch lists (0F3;3B1)OVERLAP_F_B on rank 0 for p = 2, m = 4; here it is 0F3 then 3B1."""
    acts = make_schedule("dualpipe-v", 2, 4).actions[0]
    k = acts.index(Action(0, "F", 3))
    assert acts[k + 1] == Action(3, "B", 1)
    with pytest.raises(ValueError, match="m >= 4"):
        make_schedule("dualpipe-v", 2, 3)
