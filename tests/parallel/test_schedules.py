"""Schedules as data: the short form, the generators, the comm pass, the numbered rules, the grid."""

from __future__ import annotations

import pytest

from simulator.parallel.schedules import (
    RULES,
    SCHEDULES,
    Action,
    Schedule,
    ScheduleError,
    add_comms,
    execute,
    gpipe,
    interleaved_1f1b,
    make_schedule,
    one_f_one_b,
    zb_h1,
)

P_RANGE = range(2, 9)
M_RANGE = range(1, 17)


def rows(schedule: Schedule) -> list[str]:
    return [" ".join(map(str, acts)) for acts in schedule.actions.values()]


def makespan(schedule: Schedule, costs: dict[str, float]) -> float:
    return max(end for spans in execute(schedule, costs).values() for _, end, _ in spans)


# ---- the short form -------------------------------------------------------------------------
def test_action_short_form_round_trips():
    for text in ("2F0", "0B13", "1I2", "3W0", "1SEND_F0", "2RECV_B7", "10F11"):
        assert str(Action.parse(text)) == text
    assert Action.parse("2F0") == Action(2, "F", 0)


def test_action_parse_names_the_format():
    with pytest.raises(ValueError, match=r"'2X0'.*stage, kind, microbatch, e.g. 2F0"):
        Action.parse("2X0")


def test_actions_for_a_rank_that_does_not_exist_are_refused():
    with pytest.raises(ValueError, match="actions for rank 2, but its ranks are 0..1"):
        Schedule("bad", 2, 2, 1, {0: (Action(0, "F", 0),), 2: (Action(1, "F", 0),)})


def test_from_text_reads_one_line_per_rank():
    s = Schedule.from_text(["0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"], microbatches=2)
    assert (s.ranks, s.stages, s.placement) == (2, 2, (0, 1))
    assert rows(s) == ["0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"]
    s.validate()


# ---- the generators -------------------------------------------------------------------------
def test_gpipe_and_1f1b_orders():
    assert rows(gpipe(2, 3)) == ["0F0 0F1 0F2 0B0 0B1 0B2", "1F0 1F1 1F2 1B0 1B1 1B2"]
    assert rows(one_f_one_b(4, 6)) == [
        "0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0B3 0B4 0B5",
        "1F0 1F1 1F2 1B0 1F3 1B1 1F4 1B2 1F5 1B3 1B4 1B5",
        "2F0 2F1 2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2B5",
        "3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5",
    ]
    # fewer microbatches than ranks: the warm-up is capped at m
    assert rows(one_f_one_b(4, 2))[0] == "0F0 0F1 0B0 0B1"


def test_interleaved_places_stage_s_on_rank_s_mod_p():
    s = interleaved_1f1b(2, 4, virtual=2)
    assert (s.stages, s.placement) == (4, (0, 1, 0, 1))
    assert rows(s) == [
        "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3",
        "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3",
    ]


def test_interleaved_needs_rounds_of_equal_size():
    """torch's rule: rounds = max(1, m // p) of equal size. m = 6 on p = 4 is one round of six; m = 9 is
    two rounds, which 9 microbatches cannot fill equally."""
    assert interleaved_1f1b(4, 6, 2).microbatches == 6
    with pytest.raises(ValueError, match="9 microbatches do not split into 2 equal rounds; use a multiple of 2"):
        interleaved_1f1b(4, 9, 2)


def test_zb_h1_holds_back_r_weight_passes_on_rank_r():
    s = zb_h1(4, 6)
    for r, acts in s.actions.items():
        last_i = max(k for k, a in enumerate(acts) if a.kind == "I")
        assert [a.kind for a in acts[last_i + 1 :]] == ["W"] * (r + 1)
    assert rows(s)[3].startswith("3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4")


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_every_generated_schedule_passes_every_rule(name):
    for p in P_RANGE:
        for m in M_RANGE:
            if name == "dualpipe-v" and m < 2 * p:
                continue
            if name in ("interleaved-1f1b", "interleaved-zb") and m % max(1, m // p):
                continue
            s = make_schedule(name, p, m)
            s.validate()
            add_comms(s).validate()


def test_make_schedule_lists_the_names():
    with pytest.raises(KeyError, match="choose one of gpipe, 1f1b, interleaved-1f1b, zb-h1"):
        make_schedule("pipedream", 2, 2)


@pytest.mark.parametrize("p", P_RANGE)
def test_ideal_makespans_match_the_closed_forms(p):
    """On the idealised machine (execute), before any simulation: the formulas the engine must reproduce."""
    for m in M_RANGE:
        assert makespan(gpipe(p, m), {"B": 1}) == 2 * (m + p - 1)
        assert makespan(one_f_one_b(p, m), {"B": 1}) == 2 * (m + p - 1)
        if m >= p:
            assert makespan(zb_h1(p, m), {"I": 1, "W": 1}) == 3 * m + p - 1
        if m % p == 0:
            v = 2
            assert makespan(interleaved_1f1b(p, m, v), {"B": 1}) == 2 * (m * v + p - 1)


# ---- the comm pass --------------------------------------------------------------------------
def test_comm_pass_puts_sends_after_and_receives_before():
    assert rows(add_comms(gpipe(2, 2))) == [
        "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
        "1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1",
    ]
    zb = rows(add_comms(zb_h1(2, 2)))
    assert zb[1].startswith("1RECV_F0 1F0 1I0 1SEND_B0")  # the input gradient leaves before W runs


def test_comm_pass_skips_neighbours_on_the_same_rank():
    s = Schedule.from_text(["0F0 1F0 1B0 0B0"], microbatches=1, placement=(0, 0))
    assert rows(add_comms(s)) == ["0F0 1F0 1B0 0B0"]


# ---- the rules, one broken schedule each ------------------------------------------------------
def broken(lines: list[str], m: int = 2, **kw) -> ScheduleError:
    with pytest.raises(ScheduleError) as info:
        Schedule.from_text(lines, microbatches=m, **kw).validate()
    return info.value


def test_rule_1_action_on_the_wrong_rank():
    err = broken(["0F0 0F1 0B0 0B1 1F0", "1F1 1B0 1B1"], stages=2)
    assert err.rule == 1
    assert "1F0 is in rank 0's list, but stage 1 lives on rank 1" in str(err)


def test_rule_1_unknown_microbatch():
    err = broken(["0F0 0F5 0B0", "1F0 1B0"], m=1)
    assert err.rule == 1 and "microbatch 5" in str(err)


def test_rule_2_missing_and_duplicate_actions():
    err = broken(["0F0 0F1 0B0 0B1", "1F0 1B0 1F1"])
    assert err.rule == 2 and "1B1 is missing" in str(err)
    err = broken(["0F0 0F1 0B0 0B1 0F1", "1F0 1B0 1F1 1B1"])
    assert err.rule == 2 and "0F1 appears 2 times" in str(err)
    err = broken(["0F0 0I0 0W0 0B0", "1F0 1B0"], m=1)
    assert err.rule == 2 and "backward twice" in str(err)


def test_rule_3_forward_before_backward():
    err = broken(["0F0 0B1 0F1 0B0", "1F0 1B0 1F1 1B1"])
    assert err.rule == 3
    assert "0B1 (position 1) comes before 0F1 (position 2)" in str(err)
    assert RULES[3] in str(err)


def test_rule_4_every_recv_has_its_send():
    err = broken(["0F0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"], m=1)
    assert err.rule == 4
    assert "recv 1RECV_F0 has no matching 0SEND_F0 on rank 0" in str(err)
    err = broken(["0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0"], m=1)
    assert err.rule == 4 and "0RECV_B0 has no matching 1SEND_B0" in str(err)


def test_rule_4_recv_after_its_user():
    err = broken(["0F0 0SEND_F0 0RECV_B0 0B0", "1F0 1RECV_F0 1B0 1SEND_B0"], m=1)
    assert err.rule == 4 and "1RECV_F0 comes after 1F0" in str(err)


def test_rule_5_names_the_cycle():
    err = broken(["0F0 0B0 0F1 0B1", "1F1 1F0 1B0 1B1"])
    assert err.rule == 5 and err.cycle == [0, 1]
    assert "rank 0 waits at 0B0 for 1B0 on rank 1; rank 1 waits at 1F1 for 0F1 on rank 0" in str(err)
    assert "Wait-for cycle: rank 0 -> rank 1 -> rank 0" in str(err)


def test_rule_5_blocking_rendezvous_sends_in_1f1b():
    sched = add_comms(one_f_one_b(2, 3))
    sched.validate()  # asynchronous sends: fine
    with pytest.raises(ScheduleError) as info:
        sched.validate(blocking_sends=True)
    err = info.value
    assert err.rule == 5 and err.cycle == [0, 1]
    assert "rank 0 waits at 0SEND_F1 for 1RECV_F1 on rank 1" in str(err)
    assert "rank 1 waits at 1SEND_B0 for 0RECV_B0 on rank 0" in str(err)
    assert "both send first" in str(err)
    add_comms(gpipe(3, 3)).validate(blocking_sends=True)  # GPipe never sends both ways at once


# ---- the grid --------------------------------------------------------------------------------
def test_grid_shows_each_time_unit():
    assert gpipe(2, 2).grid({"B": 1}) == (
        "rank 0 | 0F0 0F1 .   .   0B0 0B1\n"  # idle slots show as dots
        "rank 1 | .   1F0 1F1 1B0 1B1 ."
    )
    assert one_f_one_b(2, 2).grid().splitlines()[1] == "rank 1 | .   1F0 1B0 1B0 1F1 1B1 1B1 .   ."
