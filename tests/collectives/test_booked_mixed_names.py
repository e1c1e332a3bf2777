"""Members of one all-reduce that name it differently (one says ``name=``, another not; ``partials=`` on some members
only, or two prefixes): message by message, each receive names what it carries by its own call, each reduction by
its own member's names. A ring booked whole names them the same way, so the run, and the check's verdict, are the
messages' (a wrong name on one member is not lost because the last member to arrive gave none)."""

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check
from tests.collectives.test_booked_payloads import same_runs

P = 4
XS = np.random.default_rng(0).standard_normal((P, 9))


def summed(dev):
    for r in range(P):
        dev.hold(f"x[{r}]", XS[r])
        dev.hold(f"y[{r}]", XS[r])
    return dev.compute("v", lambda: XS.sum(axis=0))


def mixed(dev, names, partials):
    """Device r's all-reduce with ``name=names[r]`` and ``partials=partials[r]``; returns (result, names it holds)."""
    x = dev.hold(f"x[{dev.rank}]", XS[dev.rank])
    v = dev.all_reduce(x, name=names[dev.rank], partials=partials[dev.rank])
    return v, sorted(dev.memory)


CASES = {
    "one names the result": (["v", None, None, None], [None] * P),
    "the last names it wrongly": ([None, None, None, "x[1]"], [None] * P),
    "the first names it wrongly": (["x[1]", None, None, None], [None] * P),
    "partials on one member": ([None] * P, ["x", None, None, None]),
    "partials on the last only": ([None] * P, [None, None, None, "x"]),
    "partials the model lacks on one": ([None] * P, ["z", None, None, None]),
    "two prefixes": (["v"] * P, ["x", "y", "x", "y"]),
}


@pytest.mark.parametrize("case", CASES)
def test_members_that_name_a_call_differently_get_the_messages_run_and_verdict(case):
    names, partials = CASES[case]
    whole, messages = (World(P, book_collectives=b).run(mixed, names, partials) for b in (True, False))
    assert [o[1] for o in whole.outputs] == [o[1] for o in messages.outputs]  # what each device holds by name
    strip = [(o[0] if o is not None else None) for o in whole.outputs], [o[0] for o in messages.outputs]
    whole.outputs, messages.outputs = strip
    same_runs(whole, messages)
    reports = [check(run, Reference.of(summed)) for run in (whole, messages)]
    assert reports[0].text() == reports[1].text()


@pytest.mark.parametrize("who", [0, 3])
def test_partials_on_one_member_without_payloads_are_named_as_the_messages_name_them(who):
    """A world that keeps no payloads: the first member decides to book the call whole, and a later member's
    partials= still name what it receives and makes, and it holds them, as message by message."""
    partials = ["x" if r == who else None for r in range(P)]
    whole, messages = (
        World(P, book_collectives=b, keep_payloads=False).run(mixed, [None] * P, partials) for b in (True, False)
    )
    assert [o[1] for o in whole.outputs] == [o[1] for o in messages.outputs]
    for a, b in ((whole.trace.messages, messages.trace.messages), (whole.trace.ops, messages.trace.ops)):
        assert [(r.name, r.index) for r in a] == [(r.name, r.index) for r in b]
