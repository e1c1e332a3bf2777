"""A ring booked whole reduces in the messages' operand order, which shows where the order is all that differs: max
and min of a +0.0 and a -0.0 (NumPy returns its second operand when they compare equal). Those are the same numbers
either way, so only a comparison of bytes sees them: the booked payloads and results must have the messages' bytes.
(Which of two NaNs a sum keeps is not held to it: NumPy's vector loops keep the first operand's, its scalar loops,
which take an array's last few elements, may keep the second, so that depends on where an element falls.)"""

import numpy as np
import pytest

from simulator import World
from tests.collectives.test_booked_payloads import same_runs


def signed(dev, n, op):
    """Each member's vector: zeros of both signs, in a pattern that differs by member."""
    k = np.arange(n) + dev.rank
    return dev.all_reduce(np.where(k % 2 == 0, 0.0, -0.0), op=op)


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("p", [3, 4])
def test_signed_zeros_reduce_to_the_messages_bytes(op, p):
    n = 4 * p + 1
    whole, messages = (World(p, book_collectives=b).run(signed, n, op) for b in (True, False))
    same_runs(whole, messages)
    assert any(np.signbit(v).any() and (~np.signbit(v)).any() for v in whole.outputs)  # (both signs are there)
