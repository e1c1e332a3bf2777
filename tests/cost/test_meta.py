"""MetaArray: arrays without values, for what-ifs too large to compute."""

import numpy as np
import pytest

from simulator import CostModel, World
from simulator.collectives import ALGORITHMS
from simulator.core.errors import ContractError
from simulator.cost.meta import MetaArray


def test_numpy_gives_the_right_shapes_and_dtypes():
    a = MetaArray((4, 6), np.float32)
    assert a.nbytes == 96 and a.size == 24 and a.ndim == 2 and a.T.shape == (6, 4)
    assert a.reshape(-1)[3:7] == MetaArray((4,), np.float32) and a[:, 2:4].shape == (4, 2)
    assert np.add(a, a) == a and (a + 1.0).dtype == np.float32 and (a * np.float64(2)).dtype == np.float64
    assert (a @ MetaArray((6, 3), np.float32)).shape == (4, 3) and (a @ MetaArray(6, np.float32)).shape == (4,)
    assert np.concatenate([a, a], axis=1).shape == (4, 12) and np.stack([a, a]).shape == (2, 4, 6)
    assert np.divide(MetaArray(3, np.int32), 2).dtype == np.float64
    with pytest.raises(ValueError, match="do not line up"):
        a @ a
    with pytest.raises(TypeError, match="no values"):
        np.asarray(a)


def test_devices_send_hold_and_compute_on_them():
    def program(dev):
        if dev.rank == 0:
            w = dev.hold("w", MetaArray((1024, 1024), np.float16))
            h = dev.compute("h", lambda v: v @ v, w, flops=2 * 1024**3)
            dev.send(h, dst=1)
            return h
        return dev.recv(src=0, shape=(1024, 1024), dtype=np.float16)

    run = World(2, cost=CostModel(), keep_payloads=False).run(program)  # 100 TFLOP/s
    (m,) = run.trace.messages
    assert m.nbytes == 2 * 1024**2 and run.outputs[1] == MetaArray((1024, 1024), np.float16)
    assert run.trace.ops[0].t_end == pytest.approx(2 * 1024**3 / 100e12)
    with pytest.raises(ContractError):
        World(2, keep_payloads=False).run(
            lambda dev: dev.send(MetaArray(3), dst=1) if dev.rank == 0 else dev.recv(src=0, shape=(4,))
        )


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS["all_reduce"]))
def test_every_all_reduce_takes_them_and_books_real_sizes(algorithm):
    def program(dev, x):
        return dev.all_reduce(x, algorithm=algorithm)

    meta = World(6, keep_payloads=False).run(program, MetaArray(600, np.float32))
    real = World(6, keep_payloads=False).run(program, np.ones(600, np.float32))
    assert all(out == MetaArray(600, np.float32) for out in meta.outputs)
    assert meta.trace.signature() == real.trace.signature()  # the same messages, sizes and times


def test_the_other_collectives_take_them():
    def program(dev):
        x = MetaArray((6, 4), np.float32)
        parts = dev.all_gather(x, axis=0)
        mine = dev.reduce_scatter(parts, axis=0)
        return parts, mine, dev.all_to_all([x] * dev.world_size)

    parts, mine, swapped = World(3, keep_payloads=False).run(program).outputs[0]
    assert parts.shape == (18, 4) and mine.shape == (6, 4) and swapped == [MetaArray((6, 4), np.float32)] * 3
