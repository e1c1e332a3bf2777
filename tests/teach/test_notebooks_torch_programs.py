"""The torch-programs notebook runs top to bottom, on simulated ranks and on real gloo processes, and shows what
it claims."""

import pytest

pytest.importorskip("torch.distributed")

from tests.notebooks import execute_notebook, outputs_text, outputs_words  # noqa: E402


@pytest.mark.slow
@pytest.mark.gloo
def test_torch_programs_notebook_executes():
    nb = execute_notebook("12_torch_programs.ipynb")
    text, said = outputs_text(nb), outputs_words(nb)
    assert "rank 1 returned [49.]" in text
    assert "device 0: fc1: addmm, 512 FLOPs" in text and "fc1's shard: 2 m n k = 512" in text
    assert "carried [3.], but device 1 should have received b:in0" in said
    for n in (2, 4, 8):
        assert f"{n} ranks: check passed" in text
    assert "The all-reduce that adds them (after a row-parallel layer) is missing?" in said
    assert "It is the block [:, 4:8] of fc1, not the block [:, 0:4] this device should hold" in said
    assert "8 ranks, mesh (2, 4): check passed" in text
    assert "That is device 0's partial sum of fc2" in said
    assert "It is the block [8:16, :] of fc1.weight" in said
    # the overlapped all-reduce: waited on, it passes; read before its wait, the check says so; never waited, named
    assert "Device 0 did call all_reduce: was this value taken before the sum came?" in said
    assert "never waited on 1 collective(s) it called with async_op=True" in said
    assert text.count("same outputs: True") == 5
    for name, verdict in [("seed split", "passed"), ("seed split, raw input", "FAILED"),
                          ("tensor-parallel MLP by hand", "passed"), ("parallelize_module MLP", "passed"),
                          ("missing all-reduce", "FAILED")]:  # fmt: skip
        assert f"{name:<28} same outputs: True   verdict on gloo: {verdict:<7} simulated: {verdict}" in text
    # a real model: the Llama with FSDP2 and tensor parallelism, step by step, and replicas on the same rows
    assert "losses on one device:   [3.5740948 3.2706084 3.0022492]" in text
    assert "check passed: 914 values and the result match the single-device run" in text
    assert "every replica saw the same rows of the batch" in said
    # and with pipeline parallelism on 8 ranks (pp x dp x tp); then the stages cut in the wrong order
    assert "losses on 8 ranks:      [3.5740948 3.2706087 3.0022492]" in text
    assert "between the stages: 24 activations, 24 gradients" in text
    assert "check passed: 1424 values and the result match the single-device run" in text
    assert "check FAILED at the first divergence: op layers.1.attention_norm on device 0 computed" in said
