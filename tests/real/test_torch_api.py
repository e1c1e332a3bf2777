"""The torch backend's device offers exactly the simulator Device's API (no processes needed)."""

import inspect

import pytest

pytest.importorskip("torch.distributed")

from simulator import collectives  # noqa: E402
from simulator.core.device import Device  # noqa: E402
from simulator.real import native  # noqa: E402
from simulator.real.device import TorchDevice  # noqa: E402


def public(cls):
    return {n for n in dir(cls) if not n.startswith("_")}


def test_every_device_method_exists_with_the_same_signature():
    assert public(Device) <= public(TorchDevice)
    for name in public(Device):
        ours, theirs = getattr(TorchDevice, name), getattr(Device, name)
        if callable(theirs) and not isinstance(theirs, property):
            strip = str(inspect.signature(theirs)).replace("Request", "R")
            assert str(inspect.signature(ours)).replace("TorchRequest", "R") == strip, name


def test_native_collectives_take_every_argument_of_the_message_ones():
    names = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "scatter", "gather", "all_to_all")
    for name in (*names, "barrier"):
        want = list(inspect.signature(getattr(collectives, name)).parameters)
        have = list(inspect.signature(getattr(native, name)).parameters)
        assert have == want, name


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="send_mode='fast'"):
        TorchDevice(0, 2, send_mode="fast")
    with pytest.raises(ValueError, match="collectives='mpi'"):
        TorchDevice(0, 2, collectives="mpi")


def test_what_is_said_after_the_fact_reaches_a_real_ranks_record():
    import numpy as np

    from simulator.real.messages import TorchRequest
    from simulator.real.recording import RecvRecord

    dev = TorchDevice(0, 2)
    row = dev.ops_recorded
    dev.compute("Y", np.add, np.ones(2), np.ones(2))
    dev.amend_op(row, partial=True)
    assert dev.record.ops[row].op.partial == (0, 1) and dev.record.ops[row].op.index is None
    dev.record.recvs.append(RecvRecord(1, 0, 0, 3, 0.0, 0.0, None, None, dev.record.next_order()))
    dev.amend_received(TorchRequest("recv", 0, 1, 0, 3), name="b:in0", index=np.s_[0:2])
    assert (dev.record.recvs[-1].name, dev.record.recvs[-1].index) == ("b:in0", np.s_[0:2])
    with pytest.raises(ValueError, match="has not completed"):
        dev.amend_received(TorchRequest("recv", 0, 1, 0, 4), name="b:in0")
