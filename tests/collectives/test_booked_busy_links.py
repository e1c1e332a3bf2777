"""A ring all-reduce booked whole where one member's link to its right is still busy with an earlier message of the
program's (a large ``isend`` not yet received): its times must be the ones its messages make. Two replicas' rings
of one shape, one on a busy link and one not, must not share times; nor may a large ring whose members arrive
together treat them as together when their links are free at different times."""

import numpy as np
import pytest

from simulator import World

from .test_booked_payloads import same_runs


def busy_then_all_reduce(dev, n: int, big: int, busy: tuple[int, ...], groups: int):
    """Each device in ``busy`` sends ``big`` numbers to its right neighbour (in its group) and moves on without
    waiting; every device then all-reduces its vector in its group, only then takes the message it was sent, and
    last sends its result on to the right (on the links the ring left busy, each until its last chunk left)."""
    size = dev.world_size // groups
    group = list(range(dev.rank // size * size, dev.rank // size * size + size))
    me = group.index(dev.rank)
    right, left = group[(me + 1) % size], group[(me - 1) % size]
    req = dev.isend(np.ones(big), right) if dev.rank in busy else None
    y = dev.all_reduce(np.arange(n, dtype=np.float64) + dev.rank, group=group)
    if left in busy:
        dev.recv(left)
    if req is not None:
        dev.wait(req)
    dev.send(y, right, tag=1)
    return dev.recv(left, tag=1)


@pytest.mark.parametrize(
    "p, groups, busy",
    [
        (8, 2, (0,)),  # two rings of 4 of one shape: the first's member 0 on a busy link, the second's not
        (8, 2, (4,)),  # ... the other way round (the ring booked first is the busy one, then the other)
        (40, 1, (3,)),  # a ring of 40 members that arrive together, one link busy
    ],
)
def test_a_ring_on_a_link_still_busy_takes_the_times_its_messages_take(bookings, p, groups, busy):
    args = (2 * p, 1 << 14, busy, groups)
    whole = World(p).run(busy_then_all_reduce, *args)
    assert bookings[0] == groups
    same_runs(whole, World(p, book_collectives=False).run(busy_then_all_reduce, *args))
