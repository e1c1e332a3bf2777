"""A rank program's own mistakes are reported as its own, with the device and the fix: never as an engine error."""

import numpy as np
import pytest
from greenlet import GreenletExit

from simulator import DeadlockError, RankError, World


def exits_its_greenlet(dev):
    if dev.rank == 0:
        raise GreenletExit("the program's own")
    return dev.recv(src=0)


def test_greenlet_exit_in_a_program_is_the_programs_exception_not_a_deadlock():
    with pytest.raises(RankError, match="device 0 raised GreenletExit: the program's own") as info:
        World(2).run(exits_its_greenlet)
    assert isinstance(info.value.__cause__, GreenletExit)


def test_greenlet_exit_while_stepping_is_reported_the_same_way():
    engine = World(2).start(exits_its_greenlet)
    with pytest.raises(RankError, match="device 0 raised GreenletExit"):
        list(engine.events())


def test_a_real_deadlock_is_still_a_deadlock_after_a_greenlet_exit_elsewhere():
    def both_receive(dev):
        return dev.recv(src=1 - dev.rank)

    with pytest.raises(DeadlockError, match="wait-for cycle"):
        World(2).run(both_receive)


@pytest.mark.parametrize("op", ["wait", "test"])
@pytest.mark.parametrize("req", ["req", None, 3, np.ones(1)])
def test_waiting_on_something_that_is_no_request_names_it(op, req):
    def program(dev):
        getattr(dev, op)(req)

    with pytest.raises(RankError) as info:
        World(2).run(program)
    text = str(info.value)
    assert f"{op}({req!r:.60}) takes the Request that isend or irecv returned, got {type(req).__name__}" in text
    assert isinstance(info.value.__cause__, TypeError)
