"""Bad torch programs on simulated ranks get the simulator's errors, naming the ranks and their torch calls; never
a hang, never a traceback from deep inside torch."""

import os
import threading

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from simulator import World, simulate_torch  # noqa: E402
from simulator.core.errors import CollectiveMismatchError, ContractError, DeadlockError, RankError  # noqa: E402


def one_rank_broadcasts():
    t = torch.ones(4)
    if dist.get_rank() == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, src=0)


def test_a_rank_calling_another_collective():
    with pytest.raises(CollectiveMismatchError) as info:
        simulate_torch(one_rank_broadcasts, 2)
    text = str(info.value)
    assert "device 0 calls all_reduce(op='sum', shape=(4,)" in text and "device 1 calls broadcast(src=0" in text
    assert "rank 0: all_reduce on ranks [0, 1], at test_torch_errors.py:" in text and "`dist.all_reduce(t)`" in text
    assert "rank 1: broadcast on ranks [0, 1], at test_torch_errors.py:" in text


def one_rank_gathers():  # all_gather_into_tensor is wrapped by typing_extensions.deprecated in torch 2.x
    t = torch.ones(4)
    if dist.get_rank() == 0:
        dist.all_reduce(t)
    else:
        dist.all_gather_into_tensor(torch.empty(8), t)


def test_a_deprecated_torch_call_is_named_at_the_programs_line():
    with pytest.raises(CollectiveMismatchError) as info:
        simulate_torch(one_rank_gathers, 2)
    text = str(info.value)
    assert "rank 1: all_gather_into_tensor on ranks [0, 1], at test_torch_errors.py:" in text, text
    assert "`dist.all_gather_into_tensor(torch.empty(8), t)`" in text


def one_rank_skips():
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(4))


def test_a_rank_that_never_calls_the_collective():
    with pytest.raises(DeadlockError) as info:
        simulate_torch(one_rank_skips, 2)
    text = str(info.value)
    assert "device 1 finished without calling it" in text
    assert "rank 0: all_reduce on ranks [0, 1]" in text and "rank 1: finished" in text


def both_send_first():
    t = torch.ones(4)
    other = 1 - dist.get_rank()
    dist.send(t, dst=other)
    dist.recv(t, src=other)


def test_a_deadlock_of_sends_names_the_cycle_and_the_torch_calls():
    with pytest.raises(DeadlockError) as info:
        simulate_torch(both_send_first, 2)
    text = str(info.value)
    assert "wait-for cycle: device 0 -> device 1 -> device 0" in text
    assert "a send waits for its matching recv" in text
    assert "rank 0: send to rank 1, waiting for it, at test_torch_errors.py:" in text
    assert "`dist.send(t, dst=other)`" in text
    assert info.value.cycle == [0, 1]


def shapes_differ():
    dist.all_reduce(torch.ones(4 + dist.get_rank()))


def test_collective_shape_mismatch():
    with pytest.raises(CollectiveMismatchError, match=r"shape=\(4,\).*\n.*shape=\(5,\)"):
        simulate_torch(shapes_differ, 2)


def receive_too_small():
    if dist.get_rank() == 0:
        dist.send(torch.ones(3), dst=1)
    else:
        dist.recv(torch.ones(4), src=0)


def test_receive_of_another_shape_names_both_ends():
    with pytest.raises(ContractError) as info:
        simulate_torch(receive_too_small, 2)
    text = str(info.value)
    assert "device 1 declared (4,) float32, device 0 sent (3,) float32" in text
    assert "rank 1: recv from rank 0, waiting for it" in text and "rank 0: finished" in text


def raises_on_rank_one():
    if dist.get_rank() == 1:
        raise ValueError("boom")
    dist.barrier()


def test_a_rank_that_raises_ends_every_rank_thread():
    before = threading.active_count()
    with pytest.raises(RankError, match="device 1 raised ValueError: boom") as info:
        simulate_torch(raises_on_rank_one, 2)
    assert isinstance(info.value.__cause__, ValueError)
    assert "rank 0: barrier on ranks [0, 1]" in str(info.value)
    assert threading.active_count() == before  # rank 0's thread, blocked in its barrier, was ended


def any_source():
    if dist.get_rank() == 0:
        dist.send(torch.ones(1), dst=1)
    else:
        dist.recv(torch.ones(1))


def test_receive_from_any_rank_is_refused_with_the_fix():
    with pytest.raises(RankError, match=r"recv without src .* Give recv\(tensor, src=\.\.\.\)"):
        simulate_torch(any_source, 2)


def bfloat16():
    dist.all_reduce(torch.ones(2, dtype=torch.bfloat16))


def test_a_dtype_numpy_lacks():
    with pytest.raises(RankError, match="bfloat16 has no NumPy dtype"):
        simulate_torch(bfloat16, 2)


def device_api_program(dev, x):
    return x


def test_a_device_program_given_to_simulate_torch():
    with pytest.raises(TypeError, match=r"device_api_program\(dev, \.\.\.\) is a program of the simulator's device"):
        simulate_torch(device_api_program, 2, 1.0)


def initialises_itself():
    dist.init_process_group("gloo")


def test_a_program_that_initialises_torch_distributed_itself():
    with pytest.raises(RankError, match="leave init_process_group out of the program"):
        simulate_torch(initialises_itself, 2)


def reads_torchrun_variables():
    rank = int(os.environ["RANK"])  # as a script written for torchrun does
    return torch.ones(1) * rank


def moves_to_the_gpu():
    torch.cuda.set_device(dist.get_rank())
    return torch.ones(1).cuda()


def test_a_program_written_for_torchrun_is_told_what_simulated_ranks_give_instead(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(
        RankError, match=r"torchrun's RANK is not set: .* ask torch.distributed instead \(dist.get_rank"
    ):
        simulate_torch(reads_torchrun_variables, 2)
    if not torch.cuda.is_available():
        with pytest.raises(RankError, match=r"the simulated ranks run on the CPU, without CUDA: leave .cuda\(\)"):
            simulate_torch(moves_to_the_gpu, 2)


def destroys_its_group():
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t


def test_a_program_may_destroy_its_process_group():
    assert [float(o[0]) for o in simulate_torch(destroys_its_group, 2).outputs] == [2.0, 2.0]
    assert [float(o[0]) for o in simulate_torch(destroys_its_group, 2).outputs] == [2.0, 2.0]  # and run again


def receive_into(shape):
    """Rank 0 sends a (2, 2) tensor; rank 1 receives it into a tensor of ``shape`` and returns that."""
    if dist.get_rank() == 0:
        dist.send(torch.arange(4.0).reshape(2, 2), dst=1)
        return None
    buf = torch.empty(shape)
    dist.recv(buf, src=0)
    return buf


def test_a_message_fills_a_tensor_of_another_shape_with_as_many_elements_as_torch_does():
    assert simulate_torch(receive_into, 2, (4,)).outputs[1].tolist() == [0.0, 1.0, 2.0, 3.0]
    with pytest.raises(ContractError, match=r"device 1 declared \(3,\) float32, device 0 sent \(2, 2\) float32"):
        simulate_torch(receive_into, 2, (3,))


def test_in_strict_mode_a_receive_declares_its_tensor_s_shape():
    strict = World(2, send_mode="rendezvous", strict=True)
    assert simulate_torch(receive_into, 2, (2, 2), world=strict).outputs[1].shape == (2, 2)
    with pytest.raises(ContractError, match=r"device 1 declared \(4,\) float32, device 0 sent \(2, 2\) float32"):
        simulate_torch(receive_into, 2, (4,), world=World(2, send_mode="rendezvous", strict=True))
