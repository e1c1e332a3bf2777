"""One verdict, simulated or real: the bug catalogue gives the same verdict and the same first divergence (or the
same broken rule of the split) on gloo processes as simulated. Unnamed native collectives are placed as
simulated ones are, and a real run's first divergence follows what each event depended on, not when it was
measured. One TorchWorld for the module (gloo starts in seconds)."""

import numpy as np
import pytest

from simulator import World
from simulator.checker import Reference, check
from simulator.parallel import tensor as tp
from simulator.teach.examples import seeds
from simulator.teach.examples import tensor as tex
from tests import split_programs as P
from tests.checker.test_split_catalogue import writes_into_its_argument

pytest.importorskip("torch.distributed")


pytestmark = [pytest.mark.slow, pytest.mark.gloo]

X3 = np.array([3.0])
_rng = np.random.default_rng(0)
XM, AM, BM = _rng.standard_normal((2, 3)), _rng.standard_normal((3, 6)), _rng.standard_normal((6, 3))

CATALOGUE = [  # (program, args, reference, split)
    (seeds.wrong_input, (X3,), lambda: Reference.of(seeds.model, X3), seeds.SEED_SPLIT),
    (P.recompute_on_receiver, (X3,), lambda: Reference.of(seeds.model, X3), seeds.SEED_SPLIT),
    (P.x_crosses_and_b_does_both, (X3,), lambda: Reference.of(seeds.model, X3), seeds.SEED_SPLIT),
    (seeds.split, (X3,), lambda: Reference.of(seeds.model, X3), seeds.SEED_SPLIT),
    (P.readme_row_parallel, (), lambda: Reference.of(P.readme_linear), None),
    (P.mlp_wrong_w2_on_device_1, (XM, AM, BM), lambda: Reference.of(P.mlp_reference, XM, AM, BM), None),
    (tex.bug_forgot_all_reduce, (XM, AM, BM), lambda: Reference.of(tp.mlp_reference, XM, AM, BM, 2, True), None),
    (tex.bug_gelu_on_partials, (XM, AM), lambda: Reference.of(tex.linear_gelu_reference, XM, AM, 2), None),
    (tex.bug_full_x_to_row_shards, (XM, AM, BM), lambda: Reference.of(tp.mlp_reference, XM, AM, BM, 2, True), None),
]


@pytest.fixture(scope="module")
def world(gloo_worlds):
    return gloo_worlds(2, timeout=20)


def verdict(report):
    """The verdict, where its first divergence is (kind, device, name), and its first broken rule (kind, device)."""
    f, b = report.first, (report.broken[0] if report.broken else None)
    return report.verdict, f and (f.where, f.rank, f.name), b and (b.kind, b.rank)


@pytest.mark.parametrize("program, args, reference, split", CATALOGUE, ids=lambda v: getattr(v, "__name__", None))
def test_the_same_verdict_and_first_divergence_on_gloo_as_simulated(world, program, args, reference, split):
    simulated = check(World(2).run(program, *args), reference(), split=split)
    for _ in range(2):  # measured times differ from run to run: the verdict must not
        real = check(world.run(program, *args).trace, reference(), split=split)
        assert verdict(real) == verdict(simulated), (real.text(), simulated.text())


def test_an_unnamed_native_all_reduce_is_a_collective_s_step_not_an_unknown_name(world):
    real = world.run(P.readme_row_parallel)
    (op,) = [op for op in real.trace.ops if op.rank == 0 and op.name == "all_reduce (native)"]
    assert op.label == "all_reduce#0 native on 0,1"
    assert check(real.trace, Reference.of(P.readme_linear)).ok


def test_a_wrong_shard_on_device_1_is_blamed_on_device_1_whatever_device_0_measured(world):
    report = check(world.run(P.mlp_wrong_w2_on_device_1, XM, AM, BM).trace, Reference.of(P.mlp_reference, XM, AM, BM))
    assert (report.first.where, report.first.rank, report.first.name) == ("held value", 1, "W2")
    assert "all-reduce is missing" not in report.text()


def test_a_divergence_inside_a_native_collective_is_found_at_its_result(world):
    """The simulation sees the second all-reduce's chunks; a native all-reduce shows only its result: both FAIL,
    at the second all-reduce, with the same diagnosis."""
    ref = Reference.of(tp.mlp_reference, XM, AM, BM, 2, True)
    simulated = check(World(2).run(tex.bug_all_reduce_twice, XM, AM, BM), ref)
    real = check(world.run(tex.bug_all_reduce_twice, XM, AM, BM).trace, ref)
    assert simulated.verdict == real.verdict == "FAILED"
    assert simulated.first.record.label.startswith("all_reduce#1 ")
    assert (real.first.where, real.first.name) == ("output", "Z") and "an all-reduce applied twice" in real.text()


def test_a_write_into_an_argument_is_private_to_its_device_on_both(world):
    x = np.array([3.0])
    assert World(2).run(writes_into_its_argument, x).outputs == world.run(writes_into_its_argument, x).outputs
    assert world.run(writes_into_its_argument, x).outputs == [None, 3.0] and x.tolist() == [3.0]


def waits_the_torch_way(dev):
    if dev.rank == 0:
        dev.isend(np.ones(2), dst=1).wait()
    else:
        dev.recv(src=0)


def test_waiting_the_torch_way_gets_the_same_fix_on_both(world):
    from simulator import RankError
    from simulator.real.errors import RemoteRankError

    fix = r"write dev\.wait\(req\), not req\.wait\(\)"
    with pytest.raises(RankError, match=fix):
        World(2).run(waits_the_torch_way)
    with pytest.raises(RemoteRankError, match=fix):
        world.run(waits_the_torch_way)
