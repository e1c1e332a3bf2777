"""An op's inputs as the trace keeps them: what the op read, whatever the program writes afterwards."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import World


def read_through_a_read_only_view(dev):
    """The op reads its working buffer through a read-only view; the buffer is reused right after."""
    buf = np.array([3.0, 4.0])
    view = buf.view()
    view.setflags(write=False)  # read-only, but its base is not: the program still writes through buf
    out = dev.compute("a", lambda v: 2.0 * v, view)
    buf[:] = 100.0
    return out


@pytest.mark.parametrize("book", [True, False])
def test_a_read_only_view_of_a_buffer_written_later_is_kept_as_the_op_read_it(book):
    # Before: the view was kept as it was, and the trace showed the op computing 6 and 8 from 100 and 100.
    run = World(1, book_collectives=book).run(read_through_a_read_only_view)
    (op,) = run.trace.ops
    np.testing.assert_array_equal(op.inputs[0], [3.0, 4.0])
    np.testing.assert_array_equal(op.output, [6.0, 8.0])
    assert not op.inputs[0].flags.writeable or op.inputs[0].base is None


def test_an_immutable_input_is_kept_without_a_copy():
    """What hold, compute and recv hand out cannot change: the trace keeps that very object."""
    seen = {}

    def program(dev):
        x = dev.hold("x", np.array([1.0, 2.0]))
        seen["x"] = x
        return dev.compute("y", lambda v: v + 1.0, x)

    run = World(1).run(program)
    assert run.trace.ops[-1].inputs[0] is seen["x"]


def test_a_read_only_broadcast_of_the_programs_array_is_not_made_whole_to_be_kept():
    """A broadcast view is kept as it is (as an op's output is, ``kept``): copying it for the trace made 32 bytes a
    128 MiB array (4,194,304 rows of a 4-element vector), and would have made gigabytes of a larger one."""

    def program(dev):
        w = np.arange(4.0)  # the program's own, writable
        return dev.compute("s", lambda b: b.sum(axis=0), np.broadcast_to(w, (1 << 22, 4)))

    run = World(1).run(program)
    (op,) = run.trace.ops
    assert op.inputs[0].strides == (0, 8) and op.inputs[0].shape == (1 << 22, 4)
    np.testing.assert_array_equal(op.output, np.arange(4.0) * (1 << 22))
