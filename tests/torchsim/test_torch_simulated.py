"""torch.distributed code, unchanged, on simulated ranks: every c10d call the docs list, as the simulator's messages."""

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from simulator import World, simulate_torch  # noqa: E402
from simulator.collectives import ALGORITHMS  # noqa: E402

# torch 2.13 renames all_gather_into_tensor and reduce_scatter_tensor (*_single); programs still call the old names
pytestmark = pytest.mark.filterwarnings("ignore:.*is deprecated. Please use:FutureWarning")


def ranks_and_sizes():
    return dist.get_rank(), dist.get_world_size()


def test_each_rank_knows_its_place():
    run = simulate_torch(ranks_and_sizes, 3)
    assert run.outputs == [(0, 3), (1, 3), (2, 3)]


def all_reduces():
    r = dist.get_rank()
    out = {}
    for name, op in [("sum", dist.ReduceOp.SUM), ("avg", dist.ReduceOp.AVG), ("max", dist.ReduceOp.MAX)]:
        t = torch.tensor([1.0, 2.0]) * (r + 1)
        dist.all_reduce(t, op=op)
        out[name] = t
    for name, op in [("min", dist.ReduceOp.MIN), ("product", dist.ReduceOp.PRODUCT)]:
        t = torch.tensor([1.0, 2.0]) * (r + 1)
        dist.all_reduce(t, op=op)
        out[name] = t
    return out


@pytest.mark.parametrize("algorithm", [None, "tree", "direct", {"all_reduce": "halving_doubling"}])
def test_all_reduce_ops_and_algorithms(algorithm):
    run = simulate_torch(all_reduces, 4, algorithm=algorithm)
    k = np.array([1.0, 2.0, 3.0, 4.0])
    for out in run.outputs:
        np.testing.assert_allclose(out["sum"], k.sum() * np.array([1, 2]))
        np.testing.assert_allclose(out["avg"], k.mean() * np.array([1, 2]))
        np.testing.assert_allclose(out["max"], [4, 8])
        np.testing.assert_allclose(out["min"], [1, 2])
        np.testing.assert_allclose(out["product"], [24, 24 * 16])
    kinds = {m.label.split("#")[0] for m in run.trace.messages if m.label}
    assert kinds == {"all_reduce"}
    wanted = algorithm if isinstance(algorithm, str) else (algorithm or {}).get("all_reduce", "ring")
    assert all(f" {wanted} " in m.label for m in run.trace.messages), run.trace.messages[0].label


def collectives():
    r, p = dist.get_rank(), dist.get_world_size()
    mine = torch.arange(2.0) + 10 * r
    gathered = [torch.zeros(2) for _ in range(p)]
    dist.all_gather(gathered, mine)
    into = torch.zeros(2 * p)
    dist.all_gather_into_tensor(into, mine)
    scattered = torch.zeros(2)
    dist.reduce_scatter_tensor(scattered, torch.arange(2.0 * p) * (r + 1))
    root = torch.full((3,), float(r))
    dist.broadcast(root, src=1)
    reduced = torch.full((2,), r + 1.0)
    dist.reduce(reduced, dst=0)
    pieces = [torch.zeros(2) for _ in range(p)] if r == 2 else None
    dist.gather(mine, gather_list=pieces, dst=2)
    got = torch.zeros(2)
    dist.scatter(got, scatter_list=[torch.full((2,), 100.0 + j) for j in range(p)] if r == 0 else None, src=0)
    a2a = torch.zeros(p)
    dist.all_to_all_single(a2a, torch.arange(float(p)) + 10 * r)
    dist.barrier()
    return {
        "all_gather": torch.stack(gathered),
        "into": into,
        "reduce_scatter": scattered,
        "broadcast": root,
        "reduce": reduced,
        "gather": torch.stack(pieces) if pieces else None,
        "scatter": got,
        "all_to_all_single": a2a,
    }


def test_every_collective_gives_what_torch_documents():
    p = 3
    run = simulate_torch(collectives, p)
    rows = np.stack([np.arange(2.0) + 10 * r for r in range(p)])
    total = sum(np.arange(2.0 * p) * (r + 1) for r in range(p))
    for r, out in enumerate(run.outputs):
        np.testing.assert_array_equal(out["all_gather"], rows)
        np.testing.assert_array_equal(out["into"], rows.ravel())
        np.testing.assert_array_equal(out["reduce_scatter"], total[2 * r : 2 * r + 2])
        np.testing.assert_array_equal(out["broadcast"], [1.0, 1.0, 1.0])
        np.testing.assert_array_equal(out["reduce"], [6.0, 6.0] if r == 0 else [r + 1.0] * 2)
        assert (out["gather"] is None) == (r != 2)
        np.testing.assert_array_equal(out["scatter"], [100.0 + r] * 2)
        np.testing.assert_array_equal(out["all_to_all_single"], [r + 10.0 * j for j in range(p)])
    np.testing.assert_array_equal(run.outputs[2]["gather"], rows)
    kinds = {m.label.split("#")[0] for m in run.trace.messages if m.label}
    assert kinds == {
        "all_gather",
        "reduce_scatter",
        "broadcast",
        "reduce",
        "gather",
        "scatter",
        "all_to_all",
        "barrier",
    }


def point_to_point():
    r = dist.get_rank()
    other = 1 - r
    out = torch.zeros(2)
    # both post their receive first, then send: the pattern that needs isend/irecv
    recv = dist.irecv(out, src=other)
    send = dist.isend(torch.full((2,), r + 1.0), dst=other)
    send.wait()
    recv.wait()
    batched = torch.zeros(3)
    works = dist.batch_isend_irecv(
        [dist.P2POp(dist.isend, torch.full((3,), 10.0 * r), other), dist.P2POp(dist.irecv, batched, other)]
    )
    for w in works:
        w.wait()
    blocking = torch.zeros(1)
    if r == 0:
        dist.send(torch.tensor([7.0]), dst=1)
    else:
        dist.recv(blocking, src=0)
    return out, batched, blocking


def test_point_to_point_with_work_handles():
    run = simulate_torch(point_to_point, 2)
    (a0, b0, _), (a1, b1, c1) = run.outputs
    np.testing.assert_array_equal(a0, [2.0, 2.0])
    np.testing.assert_array_equal(a1, [1.0, 1.0])
    np.testing.assert_array_equal(b0, [10.0] * 3)
    np.testing.assert_array_equal(b1, [0.0] * 3)
    np.testing.assert_array_equal(c1, [7.0])
    assert len(run.trace.messages) == 5 and all(m.label is None for m in run.trace.messages)


def subgroups():
    r = dist.get_rank()
    evens, odds = dist.new_group([0, 2]), dist.new_group([1, 3])
    t = torch.tensor([float(r)])
    dist.all_reduce(t, group=evens if r % 2 == 0 else odds)
    return t


def test_new_group_reduces_within_the_group():
    run = simulate_torch(subgroups, 4)
    assert [float(o[0]) for o in run.outputs] == [2.0, 4.0, 2.0, 4.0]
    assert {(m.src, m.dst) for m in run.trace.messages} <= {(0, 2), (2, 0), (1, 3), (3, 1)}


def functional():
    import torch.distributed._functional_collectives as fc

    r = dist.get_rank()
    group = dist.group.WORLD
    y = fc.all_reduce(torch.tensor([r + 1.0]), "sum", group)
    z = fc.all_gather_tensor(torch.tensor([r + 1.0]), 0, group)
    w = fc.reduce_scatter_tensor(torch.arange(2.0) * (r + 1), "sum", 0, group)
    return y.wait() if hasattr(y, "wait") else y, z, w


def test_functional_collectives_as_dtensor_calls_them():
    run = simulate_torch(functional, 2)
    for r, (y, z, w) in enumerate(run.outputs):
        assert float(y[0]) == 3.0 and list(z) == [1.0, 2.0] and list(w) == [3.0 * r]


def seeded_random():
    torch.manual_seed(dist.get_rank())
    a = torch.rand(2)
    dist.barrier()
    return a, torch.rand(2)  # drawn after the other rank drew its own


def test_each_rank_draws_from_its_own_generator():
    run = simulate_torch(seeded_random, 2)
    for r, (a, b) in enumerate(run.outputs):
        g = torch.Generator().manual_seed(r)
        np.testing.assert_array_equal(a, torch.rand(2, generator=g).numpy())
        np.testing.assert_array_equal(b, torch.rand(2, generator=g).numpy())


def matmul_and_reduce(n):
    y = torch.ones(n, n) @ torch.ones(n, n)
    dist.all_reduce(y)
    return y


def test_ops_are_priced_by_the_cost_model_and_runs_repeat():
    one = simulate_torch(matmul_and_reduce, 2, 16)
    two = simulate_torch(matmul_and_reduce, 2, 16)
    priced = [op for op in one.trace.ops if op.label == "torch"]
    assert [op.name for op in priced if op.rank == 0] == ["mm"]
    world = World(2)
    assert priced[0].flops == 2 * 16**3
    assert priced[0].t_end - priced[0].t_start == pytest.approx(world.cost.op_time(2 * 16**3, 0))
    first_message = min(m.t_send for m in one.trace.messages)
    assert first_message >= priced[0].t_end  # the all-reduce starts after the product it reduces
    assert [e.signature() for _, e in one.trace.events] == [e.signature() for _, e in two.trace.events]


def test_two_simulations_side_by_side():
    results = {}

    def run(n):
        results[n] = simulate_torch(all_reduces, n).outputs[0]["sum"]

    threads = [threading.Thread(target=run, args=(n,)) for n in (2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_allclose(results[2], [3.0, 6.0])
    np.testing.assert_allclose(results[3], [6.0, 12.0])


def test_the_root_package_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, simulator; simulator.Reference; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_algorithm_names_are_checked():
    with pytest.raises(ValueError, match="choose from"):
        simulate_torch(ranks_and_sizes, 2, algorithm="fastest")
    with pytest.raises(ValueError, match="world_size=3"):
        simulate_torch(ranks_and_sizes, 3, world=World(2))
    assert "ring" in ALGORITHMS["all_reduce"]


def dtensor_calls():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (2, 2))
    whole = torch.arange(16.0).reshape(4, 4)
    d = distribute_tensor(whole, mesh, [Shard(0), Shard(1)])
    local = d.to_local().clone()
    r = d.redistribute(mesh, [Replicate(), Shard(0)])
    return local, r.to_local(), d.full_tensor()


def test_distribute_redistribute_and_full_tensor_on_a_2d_mesh():
    run = simulate_torch(dtensor_calls, 4)
    whole = np.arange(16.0).reshape(4, 4)
    for rank, (local, moved, full) in enumerate(run.outputs):
        i, j = divmod(rank, 2)
        np.testing.assert_array_equal(local, whole[2 * i : 2 * i + 2, 2 * j : 2 * j + 2])
        np.testing.assert_array_equal(moved, whole[2 * j : 2 * j + 2])
        np.testing.assert_array_equal(full, whole)
    assert run.trace.messages  # the shards crossed as messages


def test_a_dtensor_op_is_priced_as_each_rank_runs_it():
    from simulator.torchsim import programs as tp

    run = simulate_torch(tp.dtensor_mlp, 2, tp.mlp(0).state_dict(), tp.batch(1))  # x (4, 8), fc1 8 -> 16
    fc1 = [op for op in run.trace.ops if op.name == "fc1: addmm"]
    assert len(fc1) == 2 and all(op.flops == 2 * 4 * 8 * (16 // 2) for op in fc1)  # each rank its 8 columns


def test_the_views_work_on_a_torch_run(tmp_path):
    import json

    from simulator import Stepper, text_timeline, write_chrome_trace
    from simulator.torchsim import programs as tp

    run = simulate_torch(tp.seed_split, 2, torch.tensor([3.0]))
    grid = text_timeline(run)
    assert "a: mul" in grid and "b: pow" in grid
    stepper = Stepper(run)
    last = stepper.goto(stepper.total)
    assert "49" in last.render()
    write_chrome_trace(run, tmp_path / "trace.json")
    names = {e.get("name") for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"]}
    assert "b: pow" in names
