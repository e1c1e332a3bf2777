"""Published layouts asked as published: uneven layer splits, a network given by its ports, the out-of-sample
set reported apart from the rows the what-if was built against."""

from dataclasses import replace

import pytest

from simulator.cost.systems import dgx_a100_system, dgx_h100_system, with_memory, with_network
from simulator.parallel.whatif import SetupError, TrainingSetup, Transformer, named_model, whatif
from simulator.parallel.whatif.memory import chunk_activations, rank_params
from simulator.parallel.whatif.outside import BLOOM, LLAMA3, MEGASCALE, MOSAIC, MT_NLG, OPT, mpt, outside_rows
from simulator.parallel.whatif.price import action_costs, total
from simulator.parallel.whatif.step import schedule_for
from simulator.parallel.whatif.validate import Summary, outside_table, speed_ratio, validate

SMALL = Transformer(layers=10, hidden=512, heads=8, seq=256, vocab=1024, name="small")


def test_megatron_first_and_last_stage_layers_split_the_rest_evenly():
    assert TrainingSetup(pp=4, first_stage_layers=1, last_stage_layers=3).chunk_layers(SMALL) == (1, 3, 3, 3)
    assert TrainingSetup(pp=4, first_stage_layers=4).chunk_layers(SMALL) == (4, 2, 2, 2)
    assert TrainingSetup(pp=3, last_stage_layers=2).chunk_layers(SMALL) == (4, 4, 2)
    looped = TrainingSetup(pp=2, schedule="interleaved-1f1b", virtual_stages=2, global_batch=4)
    assert replace(looped, first_stage_layers=1, last_stage_layers=3).chunk_layers(SMALL) == (1, 3, 3, 3)
    assert TrainingSetup(pp=2, stage_layers=(7, 3)).chunk_layers(SMALL) == (7, 3)
    assert TrainingSetup(pp=2).chunk_layers(SMALL) == (5, 5)


@pytest.mark.parametrize(
    ("layout", "words"),
    [
        (TrainingSetup(pp=4), "do not split evenly"),
        (
            TrainingSetup(pp=4, first_stage_layers=2),
            "leave 8 of the model's 10 layers for the other 3 of 4 model chunks",
        ),
        (TrainingSetup(pp=2, stage_layers=(5, 4)), "summing to the model's layers"),
        (TrainingSetup(pp=2, stage_layers=(5, 3, 2)), "one count per chunk"),
        (TrainingSetup(first_stage_layers=10), "need pp > 1"),
        (
            TrainingSetup(pp=2, first_stage_layers=6, last_stage_layers=6),
            "the ends are every chunk: give counts that add up to 10",
        ),
        (
            TrainingSetup(pp=2, first_stage_layers=12),
            "--first-stage-layers 12 put 12 layers in one end of the pipeline, and the model has 10: give at most 10",
        ),
    ],
)
def test_layer_counts_that_do_not_add_up_are_refused_with_the_fix(layout, words):
    with pytest.raises(SetupError, match=words):
        layout.check(SMALL)


def test_bad_layer_counts_are_refused_at_once():
    with pytest.raises(SetupError, match="first_stage_layers"):
        TrainingSetup(first_stage_layers=-1)
    with pytest.raises(SetupError, match="not both"):
        TrainingSetup(pp=2, stage_layers=(5, 5), first_stage_layers=5)


def test_a_chunk_with_more_layers_costs_holds_and_keeps_more():
    layout = TrainingSetup(pp=2, tp=2, stage_layers=(7, 3), global_batch=4)
    costs = action_costs(SMALL, layout, dgx_h100_system().achieved)
    even = action_costs(SMALL, replace(layout, stage_layers=(5, 5)), dgx_h100_system().achieved)
    assert total(costs[0]["F"]) > total(even[0]["F"]) and total(costs[1]["F"]) < total(even[1]["F"])
    acts = chunk_activations(SMALL, layout)
    assert acts[0][0] == pytest.approx(7 / 3 * acts[1][0])
    placement = schedule_for(layout).placement
    first, last = rank_params(SMALL, layout, 0, placement)[0], rank_params(SMALL, layout, 1, placement)[0]
    assert first > last  # seven layers and the embedding against three, the norm and the output layer


def test_the_heavier_first_stage_sets_the_pace():
    even = whatif(SMALL, TrainingSetup(pp=2, global_batch=8), "dgx-h100")
    heavy = whatif(SMALL, TrainingSetup(pp=2, global_batch=8, stage_layers=(8, 2)), "dgx-h100")
    assert heavy.step_seconds > even.step_seconds * 1.2  # 8 layers a microbatch on the first rank, not 5
    assert heavy.stages[1]["bubble"] + heavy.stages[1]["idle"] > even.stages[1]["bubble"] + even.stages[1]["idle"]


def test_a_network_given_by_its_ports_shares_them_between_the_gpus():
    base = dgx_a100_system()
    four = with_network(base, nics_per_node=4, nic_gbps=100)
    assert four.achieved.gpu_nic_bandwidth == pytest.approx(100 / 8 * 1e9 * 0.96 / 2)
    assert "4 ports a node of 100 Gb/s" in four.name
    assert "(1 port a node of 100 Gb/s)" in with_network(base, nics_per_node=1, nic_gbps=100).name
    assert with_network(base) is base
    between = four.achieved.collective_time("all_reduce", 1e9, 16, 8)
    assert between > base.achieved.collective_time("all_reduce", 1e9, 16, 8) * 3  # a quarter of the bandwidth
    for bad in (0, -100, float("nan"), float("inf")):  # an infinite port made every step's network free
        with pytest.raises(ValueError, match="nic-gbps"):
            with_network(base, nic_gbps=bad)
        with pytest.raises(ValueError, match="gpu-memory"):
            with_memory(base, bad)


def test_every_out_of_sample_row_runs_as_its_source_publishes_it():
    rows = outside_rows()
    assert {r.table for r in rows} == {MT_NLG, BLOOM, OPT, MEGASCALE, LLAMA3, MOSAIC}
    mt = [r for r in rows if r.table == MT_NLG]
    assert [(r.layout.tp, r.layout.pp, r.layout.dp, r.layout.global_batch) for r in mt] == [
        (8, 35, 8, 1920), (8, 35, 10, 1920), (8, 35, 12, 1920)]  # fmt: skip
    (bloom,) = [r for r in rows if r.table == BLOOM]
    assert bloom.layout.chunk_layers(bloom.model) == (5,) + (6,) * 10 + (5,)
    assert bloom.layout.devices == 384 and bloom.model.params == pytest.approx(176.2e9, rel=0.01)
    assert (bloom.layout.grad_fusion, bloom.layout.grad_accumulation) == (False, "cast-add")  # DeepSpeed's BF16
    llama = [r for r in rows if r.table == LLAMA3]
    assert [r.layout.devices for r in llama] == [8192, 16384, 16384]
    for r in llama:
        assert r.model.layers == 126 and sum(r.layout.chunk_layers(r.model)) == 126
        assert r.layout.global_batch * r.model.seq == 16 * 2**20  # 16M tokens a step
        # section 3.3.2: one layer a chunk, the first only the embedding and the last only the loss; FSDP's sharded
        # gradients without resharding the weights; no activation checkpointing at 8K
        assert r.layout.chunk_layers(r.model) == (0,) + (1,) * 126 + (0,) and r.layout.stages_per_rank == 8
        assert (r.layout.zero, r.layout.recompute) == (2, "none")
    (opt,) = [r for r in rows if r.table == OPT]
    assert opt.layout.devices == 992 and opt.layout.microbatches == 1  # 8 sequences a rank, --update-freq 1
    assert opt.layout.global_batch * opt.model.seq == pytest.approx(2e6, rel=0.03)  # the 2M-token batch
    assert opt.model.params == pytest.approx(175e9, rel=0.01) and opt.metric == "tflops_per_gpu"
    mega = [r for r in rows if r.table == MEGASCALE]
    assert [r.layout.devices for r in mega] == [256, 512, 768, 1024, 3072, 6144, 8192, 12288]
    assert {r.layout.global_batch for r in mega[:4]} == {768} and {r.layout.global_batch for r in mega[4:]} == {6144}
    for r in mega:  # six model chunks a rank: two of the 96 layers each
        assert r.layout.chunk_layers(r.model) == (2,) * 48 and r.model.vocab == 64000 and r.model.heads == 128


def test_the_out_of_sample_summary_counts_and_leans():
    s = Summary.of([0.9, 1.1, 1.2, 1.3])
    assert (s.rows, s.within_15, s.within_25, s.optimistic) == (4, 2, 3, 3)
    assert s.median == pytest.approx(1.15) and "lean optimistic" in s.text()


def test_the_out_of_sample_table_names_every_row_with_its_speed_ratio():
    llama = [r for r in outside_rows() if r.table == LLAMA3][:1]
    checked = validate(llama)
    text = outside_table(checked)
    assert llama[0].label in text and " of 1 within 15%" in text
    assert speed_ratio(checked[0]) == pytest.approx(checked[0].predicted / 430)


def test_a_step_seconds_row_counts_faster_as_optimistic():
    (row,) = [r for r in outside_rows() if r.table == MT_NLG][:1]
    (c,) = validate([row])
    assert speed_ratio(c) == pytest.approx(row.published / c.predicted)


def test_megatron_s_end_stage_counts_split_the_llama3_layers_as_published():
    model = named_model("llama3-405b")
    layout = TrainingSetup(tp=8, pp=16, dp=64, global_batch=2048, sequence_parallel=True, zero=1,
                    first_stage_layers=7, last_stage_layers=7)  # fmt: skip
    assert layout.chunk_layers(model) == (7,) + (8,) * 14 + (7,)
    report = whatif(model, layout, "dgx-h100")
    assert 0 < report.mfu < 1


def test_a_collective_beside_a_kernel_slows_it_by_the_measured_share():
    achieved = dgx_h100_system().achieved
    assert achieved.overlap_slowdown == pytest.approx(0.189)
    assert achieved.overlapped(10.0, 2.0) == pytest.approx((10.0 + 0.189 * 2.0, 0.0))  # hidden, at a price
    compute, exposed = achieved.overlapped(1.0, 5.0)  # the kernel finishes under the collective
    assert compute == pytest.approx(1 / 0.811) and exposed == pytest.approx(5.0 - 1 / 0.811)
    free = replace(achieved, overlap_slowdown=0.0)
    assert free.overlapped(10.0, 2.0) == (10.0, 0.0)


def test_hidden_communication_is_not_free():
    layout = TrainingSetup(tp=8, sequence_parallel=True, global_batch=2)
    model = named_model("llama2-13b")
    slowed = whatif(model, layout, "dgx-h100")
    machine = dgx_h100_system()
    free = whatif(model, layout, replace(machine, achieved=replace(machine.achieved, overlap_slowdown=0.0)))
    assert slowed.breakdown["contention"] > 0 and "contention" not in {k for k, v in free.breakdown.items() if v}
    assert slowed.step_seconds > free.step_seconds


def test_fsdp_gathers_hide_one_layer_ahead_and_show_when_layers_are_short():
    """ZeRO-3 on 64 ranks: with prefetch the gathers hide behind long layers (only the first layer's shows), and
    a short step (a microbatch of 1 token-poor sequences) exposes them; without overlap all of it shows."""
    model = named_model("llama2-7b")
    long = TrainingSetup(dp=64, zero=3, microbatch=2, global_batch=128, recompute="full")
    short = replace(long, microbatch=1, global_batch=64)
    tiny = replace(model, seq=256)
    hidden = whatif(model, long, "dgx-h100").breakdown["dp"]
    shown = whatif(tiny, short, "dgx-h100").breakdown["dp"]
    serial = whatif(model, replace(long, dp_overlap=False), "dgx-h100").breakdown["dp"]
    assert hidden < 0.05 * serial and shown > hidden
    zero1 = whatif(model, replace(long, zero=1, dp_overlap=False), "dgx-h100").breakdown["dp"]
    assert serial > 1.4 * zero1  # weights gathered twice for the one microbatch (1.5x ZeRO-1's gather + scatter)


def test_the_fsdp_rows_run_fully_sharded_with_the_tables_batches():
    rows = [r for r in outside_rows() if r.table == MOSAIC]
    assert len(rows) == 14 and all(r.layout.zero == 3 and r.layout.devices == 8 for r in rows)
    assert {r.model.name for r in rows} >= {"mpt-760m", "mpt-7b", "mpt-30b"}
    # the table's NumParams, to the parameter: the layers with their biases, the tied embedding, the final norm and
    # the learned position embedding (2,048 x the width), which the what-if does not count
    for size, published in (("7b", 6658859008), ("30b", 29975214080), ("760m", 760470528), ("125m", 125311488),
                            ("13b", 12853954560), ("1b", 1315950592), ("350m", 355985408), ("3b", 2651837440)):  # fmt: skip
        assert mpt(size).params + 2048 * mpt(size).hidden == published, size
        assert replace(mpt(size), bias=False).params + 2048 * mpt(size).hidden < published  # no_bias would not add up
    (c,) = validate([rows[2]])  # MPT-7b on A100: tokens per second per GPU from the step
    assert c.predicted == pytest.approx(96 * 2048 / c.report.step_seconds / 8)
    # the software the sweep that published them ran: llm-foundry's Triton attention, flash-attn's fused loss,
    # composer's DecoupledAdamW op by op
    assert {(r.layout.attention, r.layout.cross_entropy, r.layout.optimizer) for r in rows} == {
        ("triton", "fused", "unfused")
    }
    others = [r for r in outside_rows() if r.table != MOSAIC]
    assert all(r.layout.cross_entropy == "fp32" and r.layout.optimizer == "fused" for r in others)
    # the models as the benchmark's yamls build them: configuration_mpt.py's defaults, no_bias False and no ALiBi
    assert all(r.model.bias and not r.model.alibi and not r.model.dropout for r in rows)
    # FSDP's own gradient passes, as composer's FSDP (PyTorch 2.1) and OPT's fairscale FSDP make them
    assert {r.layout.grad_accumulation for r in rows + [r for r in others if r.table == OPT]} == {"fsdp"}
    # composer's two training metrics recompute the loss after every microbatch; no other framework here does
    assert {r.layout.train_metrics for r in rows} == {2} and {r.layout.train_metrics for r in others} == {0}


def test_each_software_difference_moves_the_mpt_step_the_way_its_cost_does():
    row = next(r for r in outside_rows() if r.label.startswith("MPT-125m on 8 A100"))
    base = validate([row])[0].report
    for change, slower in ((dict(attention="flash"), False), (dict(cross_entropy="fp32"), True),
                           (dict(optimizer="fused"), False), (dict(train_metrics=0), False)):  # fmt: skip
        other = validate([replace(row, layout=replace(row.layout, **change))])[0].report
        assert (other.step_seconds > base.step_seconds) == slower, change


def test_fp8_runs_the_linear_products_at_the_measured_fp8_rate_where_the_gpu_has_one():
    model = named_model("llama2-7b")
    layout = TrainingSetup(dp=8, zero=1, global_batch=64)
    bf16 = whatif(model, layout, "dgx-h100")
    fp8 = whatif(model, replace(layout, precision="fp8"), "dgx-h100")
    assert fp8.breakdown["matmul"] < 0.7 * bf16.breakdown["matmul"]  # about 1.7x the rate on these shapes
    assert fp8.breakdown["attention"] == pytest.approx(bf16.breakdown["attention"])  # the attention core stays bf16
    assert fp8.peak_flops == 2 * bf16.peak_flops and fp8.mfu < 1
    with pytest.raises(ValueError, match="no FP8 tensor cores"):
        whatif(model, replace(layout, precision="fp8"), "dgx-a100")


def test_kernels_shorter_than_their_launch_leave_the_gpu_waiting():
    tiny = Transformer(layers=2, hidden=256, heads=4, seq=128, vocab=512, name="tiny")
    short = whatif(tiny, TrainingSetup(global_batch=1), "dgx-h100")
    assert short.breakdown["launch"] > 0.3 * short.step_seconds  # microsecond kernels: the CPU sets the pace
    big = whatif(named_model("llama2-7b"), TrainingSetup(tp=8, global_batch=1), "dgx-h100")
    assert big.breakdown["launch"] < 0.01 * big.step_seconds  # millisecond kernels hide their launches
    blocking = whatif(named_model("llama2-7b"), TrainingSetup(tp=8, global_batch=1, launch_blocking=True), "dgx-h100")
    kernels = blocking.breakdown["launch"] / dgx_h100_system().achieved.launch_seconds
    assert 100 < kernels < 2000  # every kernel and collective of 32 layers' forward and backward waits for the CPU


def test_runs_known_to_fit_are_checked_against_the_memory_they_had():
    from simulator.parallel.whatif.validate import memory_lines

    llama = [r for r in outside_rows() if r.table == LLAMA3][:2]  # the 8,192-GPU row and a 16,384-GPU one
    lines = memory_lines(validate(llama))
    # the 16,384-GPU layout fits the 79.6 GiB an H100 80GB gives a program; the 8,192-GPU one is 0.2 GiB over
    assert "1 of 2 fit as predicted" in lines[1] and len(lines) == 3
    assert "405B 8,192 GPUs" in lines[2] and "79.9 GiB of 79.6 (77.7 in tensors)" in lines[2]
    (bloom,) = [r for r in outside_rows() if r.table == BLOOM]
    assert "1 of 1 fit as predicted" in memory_lines(validate([bloom]))[1]


def test_distributed_saved_inputs_keep_a_tp_share_and_are_gathered_before_recomputing():
    from simulator.parallel.whatif.layer import layer_ops
    from simulator.parallel.whatif.memory import layer_activations
    from simulator.parallel.whatif.price import price, recomputed_ops

    full = TrainingSetup(tp=4, recompute="full", microbatch=2)
    split = replace(full, distribute_saved=True)
    assert layer_activations(SMALL, split)[0] == pytest.approx(layer_activations(SMALL, full)[0] / 4)
    fwd = [op for op in layer_ops(SMALL, split) if op.phase == "F"]
    (gather,) = [op for op in recomputed_ops(fwd, split, SMALL) if op.collective == "all_gather"]
    assert gather.ranks == 4 and gather.nbytes == 2 * 2 * 256 * 512  # the whole layer input, bf16
    achieved = dgx_a100_system().achieved
    assert price([], recomputed_ops(fwd, split, SMALL), split, achieved, 2)["sp_cp"] > 0
    assert recomputed_ops(fwd, full, SMALL) == fwd  # kept whole: nothing to gather
    seq_par = replace(split, sequence_parallel=True)  # the input is split already
    assert layer_activations(SMALL, seq_par) == layer_activations(SMALL, replace(seq_par, distribute_saved=False))
    selective = replace(split, recompute="selective")  # keeps more than the input: the flag has nothing to split
    assert layer_activations(SMALL, selective) == layer_activations(SMALL, replace(full, recompute="selective"))


def test_the_opt_run_fits_on_80_gb_only_with_its_checkpoints_distributed():
    (opt,) = [r for r in outside_rows() if r.table == OPT]
    assert whatif(opt.model, opt.layout, "dgx-a100").fits
    assert not whatif(opt.model, replace(opt.layout, distribute_saved=False), "dgx-a100").fits


def test_fsdp_s_sharded_gradients_with_a_pipeline_leave_the_rank_its_share_and_reduce_scatter_every_microbatch():
    model = replace(named_model("llama3-8b"), layers=8)
    one, two = (
        whatif(model, TrainingSetup(tp=2, pp=2, dp=4, global_batch=32, zero=zero), "dgx-h100") for zero in (1, 2)
    )
    assert two.memory[0].grads == pytest.approx(one.memory[0].grads / 4)  # the gradients' data-parallel share
    assert two.memory[0].params == one.memory[0].params  # the weights stay whole between forward and backward
    assert two.step_seconds > one.step_seconds  # 8 microbatches' reduce-scatters where ZeRO-1 has one


def test_the_framework_s_memory_is_the_cuda_context_and_a_nccl_communicator_a_parallel_group():
    from simulator.parallel.whatif.memory import framework_bytes

    alone = framework_bytes(TrainingSetup())
    assert alone == 287_047_680  # the CUDA context with lazy loading (pytorch/pytorch PR 86509)
    assert framework_bytes(TrainingSetup(tp=2)) - alone == 544e6  # a two-rank communicator (NVIDIA/nccl issue 964)
    assert framework_bytes(TrainingSetup(tp=8, pp=4, dp=2)) - alone == 2 * 688e6 + 544e6
    assert framework_bytes(TrainingSetup(dp=8, ep=4)) - alone == 2 * 688e6 + 544e6  # dp, ep, an expert's 2 replicas
    report = whatif(replace(named_model("llama3-8b"), layers=4), TrainingSetup(tp=8, pp=2, global_batch=2), "dgx-h100")
    m = report.memory[0]
    assert m.needed == m.total + framework_bytes(report.layout) and m.over == max(0.0, m.needed - m.capacity)
    tight = replace(m, capacity=m.total + 1.0)  # the tensors fit; the context and buffers do not
    assert tight.over > 0
