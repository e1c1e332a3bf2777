"""Torch programs on simulated ranks checked against the single-device model, module by module: the
tensor-parallel MLP by hand and through parallelize_module, and the two-stage pipeline, right on 2, 4 and 8
ranks, and each classic bug caught at its first wrong value with the reason in words."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from simulator import Reference, check, simulate_torch  # noqa: E402
from simulator.checker import Split  # noqa: E402
from simulator.torchsim import programs as tp  # noqa: E402
from tests.report_words import words  # noqa: E402

MODEL = tp.mlp(0)
STATE = MODEL.state_dict()
X = tp.batch(1)
XP = torch.arange(1.0, 17.0).reshape(16, 1)  # the pipeline's batch: 16 rows, no value equal to another's image


@pytest.fixture(scope="module")
def mlp_ref():
    return Reference.of_torch(MODEL, X)


@pytest.fixture(scope="module")
def step_ref():
    return Reference.of_torch(tp.mlp_step, MODEL, X)


def expected_output():
    with torch.no_grad():
        return MODEL(X).numpy()


@pytest.mark.parametrize("n", [2, 4, 8])
def test_hand_written_tensor_parallel_mlp(n, mlp_ref):
    run = simulate_torch(tp.tp_mlp, n, STATE, X)
    for out in run.outputs:
        np.testing.assert_allclose(out, expected_output(), rtol=1e-5, atol=1e-6)
    report = check(run, mlp_ref)
    assert report.ok, str(report)
    # fc1 is checked as each rank's block of columns, fc2 as partial sums that add up
    fc1 = [op for op in run.trace.ops if op.name == "fc1"]
    assert len(fc1) == n and all(op.index.resolve((4, 16)) is not None for op in fc1)
    # ... and the all-reduce's result is fc2 itself, on every rank (named by the collective)
    fc2 = [op.partial for op in run.trace.ops if op.name == "fc2"]
    assert fc2.count(tuple(range(n))) == n and fc2.count(None) == n


@pytest.mark.parametrize("n, mesh", [(2, None), (4, None), (8, None), (4, (2, 2)), (8, (2, 4))])
def test_parallelize_module_mlp_forward_and_backward(n, mesh, step_ref):
    run = simulate_torch(tp.dtensor_mlp, n, STATE, X, mesh)
    for out in run.outputs:
        np.testing.assert_allclose(out, expected_output(), rtol=1e-5, atol=1e-6)
    report = check(run, step_ref)
    assert report.ok, str(report)
    held = {rec.name for kind, rec in run.trace.events if kind == "hold"}
    assert {"fc1.weight", "fc1.weight.grad", "fc2.bias.grad"} <= held  # parameters and the backward pass too


@pytest.mark.parametrize("n", [2, 4, 8])
def test_two_stage_pipeline(n):
    run = simulate_torch(tp.pipeline, n, XP, 2)
    returned = np.concatenate([o for o in run.outputs if o is not None])
    np.testing.assert_array_equal(returned, ((2 * XP + 1) ** 2).numpy())
    report = check(run, tp.pipeline_references(XP, n, 2))
    assert report.ok, str(report)


def test_a_partial_sum_is_recognised_after_other_calls(mlp_ref):
    run = simulate_torch(tp.tp_mlp, 2, STATE, X, "barrier first")
    assert check(run, mlp_ref).ok


def failure(run, ref):
    report = check(run, ref)
    assert report.verdict == "FAILED", str(report)
    return report, words(str(report))


def test_missing_all_reduce_by_hand(mlp_ref):
    report, text = failure(simulate_torch(tp.tp_mlp, 2, STATE, X, "missing all-reduce"), mlp_ref)
    assert report.first.name == "fc2" and report.first.where == "output"
    assert "the values of fc2 on devices 0, 1 add up to fc2" in text
    assert "The all-reduce that adds them (after a row-parallel layer) is missing?" in text


def test_wrong_shard_by_hand(mlp_ref):
    report, text = failure(simulate_torch(tp.tp_mlp, 4, STATE, X, "wrong shard"), mlp_ref)
    assert report.first.name == "fc1" and report.first.rank == 0
    assert "It is the block [:, 4:8] of fc1, not the block [:, 0:4] this device should hold" in text


def test_bias_added_on_every_rank(mlp_ref):
    report, text = failure(simulate_torch(tp.tp_mlp, 2, STATE, X, "bias on every rank"), mlp_ref)
    assert report.first.where == "partial sums" and report.first.name == "fc2"


def test_missing_all_reduce_through_parallelize_module(step_ref):
    report, text = failure(simulate_torch(tp.dtensor_mlp, 2, STATE, X, None, "missing all-reduce"), step_ref)
    assert report.first.where == "result"
    assert "That is device 0's partial sum of fc2 (one term of a sum over devices 0, 1)" in text
    assert "the all-reduce that adds the partial sums is missing?" in text


def test_wrong_shard_through_parallelize_module(step_ref):
    report, text = failure(simulate_torch(tp.dtensor_mlp, 2, STATE, X, None, "wrong shard"), step_ref)
    assert report.first.name == "fc1.weight" and report.first.where == "held value"
    assert "It is the block [8:16, :] of fc1.weight, not the block [0:8, :] this device should hold" in text


def test_raw_input_across_the_stage_boundary():
    report, text = failure(simulate_torch(tp.seed_split, 2, torch.tensor([3.0]), "raw input"), seed_ref())
    assert report.first.where == "message"
    assert "message #0 from device 0 to device 1 (tag 0) carried [3.], but device 1 should have received b:in0" in text
    assert "[3.] is x (the model's input)" in text


def seed_ref():
    return Reference.of_torch(tp.TwoStage(), torch.tensor([3.0]))


def test_seed_split_passes():
    run = simulate_torch(tp.seed_split, 2, torch.tensor([3.0]))
    assert run.outputs[1].tolist() == [49.0]
    assert check(run, seed_ref()).ok


@pytest.mark.parametrize("bug", ["raw input", "wrong order"])
def test_pipeline_bugs_caught_at_the_first_message(bug):
    report, text = failure(simulate_torch(tp.pipeline, 4, XP, 2, bug), tp.pipeline_references(XP, 4, 2))
    assert report.first.where == "message" and report.first.record.id == 0
    assert "device 1 should have received b:in0 (the input of module b, which the model computes as a)" in text
    if bug == "raw input":
        assert "is a:in0 (input 0 of module a for microbatch 0 of 2)" in text
    else:
        assert "is a (call 2) (the output of module a for microbatch 1 of 2, a StageA)" in text


def test_module_named_by_its_path_inside_the_model():
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = tp.MLP()

        def forward(self, x):
            return self.mlp(x)

    ref = Reference.of_torch(Outer(), X)
    assert {"mlp.fc1", "mlp.fc2", "mlp", "mlp.fc1.weight", "mlp.fc2:in0"} <= set(ref.values)
    assert ref.aliases["mlp.fc1:in0"] == "x" and ref.aliases["output"] == "mlp"


def test_reference_leaves_the_model_alone():
    model = tp.mlp(0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ref = Reference.of_torch(tp.mlp_step, model, X)
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert "fc2.weight.grad" in ref.values


@pytest.mark.parametrize("n", [2, 4])
def test_sequence_parallel_block_forward_and_backward(n):
    torch.manual_seed(0)
    block, x = tp.Block(), torch.randn(2, 4, 8)
    ref = Reference.of_torch(tp.mlp_step, block, x)
    run = simulate_torch(tp.sequence_parallel_block, n, block.state_dict(), x)
    with torch.no_grad():
        whole = block(x).numpy()
    np.testing.assert_allclose(np.concatenate(run.outputs, axis=1), whole, rtol=1e-5, atol=1e-6)
    report = check(run, ref)
    assert report.ok, str(report)
    held = {rec.name for kind, rec in run.trace.events if kind == "hold"}
    assert {"norm.weight.grad", "mlp.fc1.weight.grad"} <= held


def shifted_tokens(state, x):
    """Every rank takes the next rank's tokens: the sequence shards are off by one."""
    p = torch.distributed.get_world_size()
    return tp.sequence_parallel_block(state, torch.roll(x, shifts=x.shape[1] // p, dims=1))


def test_sequence_shards_off_by_one():
    torch.manual_seed(0)
    block, x = tp.Block(), torch.randn(2, 4, 8)
    report, text = failure(
        simulate_torch(shifted_tokens, 2, block.state_dict(), x), Reference.of_torch(tp.mlp_step, block, x)
    )
    assert report.first.name == "norm"
    assert "It is the block [:, 2:4, :] of norm, not the block [:, 0:2, :] this device should hold" in text


def test_two_models_whose_modules_share_paths_are_refused():
    def two_models(x):
        return tp.mlp(0)(x) + tp.mlp(1)(x)

    with pytest.raises(ValueError, match="two values are named 'fc1.weight'"):
        Reference.of_torch(two_models, X)


def whole_model_on_rank_1(x):
    """Rank 1 runs both stages itself; nothing crosses (the numbers are right, the split is not)."""
    model = tp.TwoStage()
    return None if dist.get_rank() == 0 else model.b(model.a(x))


def raw_input_recomputed(x):
    """The raw-input bug 'fixed' on the wrong side: x crosses and rank 1 recomputes stage a."""
    model = tp.TwoStage()
    if dist.get_rank() == 0:
        model.a(x)
        dist.send(x, dst=1)
        return None
    h = torch.empty_like(x)
    dist.recv(h, src=0)
    return model.b(model.a(h))


SEED_SPLIT = Split(compute={"a": 0, "b": 1}, crosses={"a": (0, 1)})


def test_a_torch_program_is_held_to_its_declared_split():
    x = torch.tensor([3.0])
    ref = Reference.of_torch(tp.TwoStage(), x)
    # what crossed is named by the module it fed (b:in0), which stands for a: the seed keeps the split
    assert check(simulate_torch(tp.seed_split, 2, x), ref, split=SEED_SPLIT).ok
    for program, first in [(whole_model_on_rank_1, "device 1 computed a, which belongs to device 0"),
                           (raw_input_recomputed, "a's output should have crossed, but a:in0 and x did")]:  # fmt: skip
        run = simulate_torch(program, 2, x)
        assert check(run, ref).ok  # the values alone cannot tell
        report = check(run, ref, split=SEED_SPLIT)
        assert report.verdict == "FAILED" and first in words(str(report)), str(report)


def test_a_split_on_a_tensor_parallel_torch_program_reads_past_its_priced_ops(mlp_ref):
    """torch's own ops (fc1: addmm) are recorded by their shapes only: the split checks the named values."""
    run = simulate_torch(tp.tp_mlp, 2, STATE, X)
    assert check(run, mlp_ref, split=Split(collectives=("all_reduce",))).ok
    report = check(run, mlp_ref, split=Split(collectives=()))
    assert report.verdict == "FAILED"
    assert "device 0 called all_reduce, but this split allows no collective" in words(report), str(report)


@pytest.mark.parametrize("strided", [True, False])
def test_tensor_parallel_groups_of_any_ranks_are_checked_by_each_rank_s_place_in_its_group(strided, mlp_ref):
    """A plain tensor's block is the rank's place in its own group of that size: groups (0, 2), (1, 3) as well."""
    run = simulate_torch(tp.tp_mlp_in_groups, 4, STATE, X, strided)
    for out in run.outputs:
        np.testing.assert_allclose(out, expected_output(), rtol=1e-5, atol=1e-6)
    assert check(run, mlp_ref).ok
    report, text = failure(simulate_torch(tp.tp_mlp_in_groups, 4, STATE, X, strided, "wrong shard"), mlp_ref)
    assert report.first.name == "fc1" and report.first.rank == 0
    assert "It is the block [:, 8:16] of fc1, not the block [:, 0:8] this device should hold" in text


def tp_mlp_by_arithmetic(state, x, forget_the_all_reduce=False):
    """Right, but written with tensor arithmetic where the model calls fc1 and fc2: nothing is named by module."""
    rank, p = dist.get_rank(), dist.get_world_size()
    w1, b1 = state["fc1.weight"].chunk(p, dim=0)[rank], state["fc1.bias"].chunk(p, dim=0)[rank]
    y = torch.relu(x @ w1.T + b1) @ state["fc2.weight"].chunk(p, dim=1)[rank].T
    if not forget_the_all_reduce:
        dist.all_reduce(y)
    if forget_the_all_reduce:  # each rank returns its term of the sum (its share of the bias too)
        return y + state["fc2.bias"] / p
    return y + state["fc2.bias"]


def test_values_not_named_by_module_are_said_with_the_fix(mlp_ref):
    report = check(simulate_torch(tp_mlp_by_arithmetic, 2, STATE, X), mlp_ref)
    assert report.verdict == "not verified"
    (never,) = [u.text for u in report.unchecked if u.kind == "never computed"]
    assert never.startswith("no device computed fc1, fc2 under that name") and "call the module itself" in never
    assert "dev.compute" not in never  # a torch program has no dev.compute to call


def test_a_missing_all_reduce_in_torch_code_is_said_in_torch_words(mlp_ref):
    report = check(simulate_torch(tp_mlp_by_arithmetic, 2, STATE, X, True), mlp_ref)
    assert report.verdict == "FAILED"
    text = words(report)
    assert "partial sum used as if it were the complete value" in text and "all-reduce that adds them" in text
    assert "partial=True" not in text  # dev.compute's keyword: a torch program has none to write


def test_gradients_against_a_forward_only_reference_ask_for_its_backward(mlp_ref, step_ref):
    # the program runs a backward pass and the reference only the forward: "give the module its path" was no fix
    run = simulate_torch(tp.dtensor_mlp, 2, STATE, X)
    report = check(run, mlp_ref)
    grads = [u.text for u in report.unchecked if u.kind == "unknown name" and ".grad" in u.text]
    assert report.verdict == "not verified" and grads
    assert all("ran no backward pass" in text and "path it has" not in text for text in grads)
    assert check(run, step_ref).ok  # and the reference that runs the backward passes it
