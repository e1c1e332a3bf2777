"""The what-if as a planner: one layer's ops, memory by kind, the simulated step and its report."""

import math
from dataclasses import replace

import pytest

from simulator.cost.systems import system
from simulator.parallel.whatif import SetupError, TrainingSetup, Transformer, named_model, whatif
from simulator.parallel.whatif.layer import fsdp_divide_factors, head_ops, kernel_head_dim, layer_ops
from simulator.parallel.whatif.memory import layer_activations, transient
from simulator.parallel.whatif.report import KINDS, model_flops, recompute_flops
from simulator.parallel.whatif.step import optimizer_bytes

GPT = Transformer(layers=8, hidden=1024, heads=16, seq=1024, vocab=51200, name="tiny-gpt")
GQA = Transformer(layers=8, hidden=1536, heads=24, kv_heads=8, seq=1024, vocab=51200, name="tiny-gqa")
S, H, A = GPT.seq, GPT.hidden, GPT.heads
BALANCED = replace(GPT, vocab=128)  # an output layer too small to make the last stage the slowest


def flops(ops, phases, kind="matmul"):
    return sum(op.flops for op in ops if op.phase in phases and op.kind == kind)


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_a_gpt_layer_has_the_papers_flops(tp):
    ops = layer_ops(GPT, TrainingSetup(tp=tp, attention="unfused"))
    core = [op for op in ops if op.core and op.kind == "matmul"]
    projections = flops(ops, "F") - sum(op.flops for op in core if op.phase == "F")
    assert math.isclose(projections, 24 * S * H * H / tp)  # QKV, projection, FC1, FC2
    assert math.isclose(sum(op.flops for op in core if op.phase == "F"), 4 * S * S * H / tp)
    assert math.isclose(flops(ops, "IW"), 2 * flops(ops, "F"))  # a backward is two forwards


def test_grouped_query_attention_and_swiglu_change_the_products():
    llama = named_model("llama2-70b")  # 64 heads, 8 key/value heads, SwiGLU of width 28672
    ops = {op.name: op for op in layer_ops(llama, TrainingSetup(tp=8))}
    d = llama.head_dim
    assert ops["qkv"].shape[:3] == (4096, (64 + 2 * 8) * d / 8, 8192)
    assert ops["fc1"].shape[:3] == (4096, 2 * 28672 / 8, 8192)  # gate and up in one product
    assert llama.layer_params == 8192 * 80 * 128 + 8192 * 8192 + 3 * 8192 * 28672 + 2 * 8192


def test_the_copies_and_fp32_passes_of_megatrons_code_are_priced():
    layout = TrainingSetup(tp=2, attention="unfused")
    ops = {op.name: op for op in layer_ops(GPT, layout)}
    tokens, v = S, GPT.padded_vocab(2) / 2
    assert ops["context copy"].nbytes == tokens * H / 2 * 4 and ops["context copy"].core  # permute().contiguous()
    assert ops["qkv grad concat"].nbytes == tokens * 3 * H / 2 * 4  # autograd's cat of the split's gradients
    head = {op.name: op for op in head_ops(GPT, layout)}
    assert head["cross-entropy"].nbytes == tokens * v * 38  # cast to fp32, max, subtract, exp, sum, divide
    assert head["cross-entropy back"].nbytes == tokens * v * 14  # multiply, cast back
    alibi = {op.name: op for op in layer_ops(replace(GPT, alibi=True), layout)}
    scores = layout.microbatch * (GPT.heads / 2) * S * S
    assert alibi["alibi bias"].nbytes == scores * 4 and "alibi bias" not in ops  # broadcast, copied, read back
    flash = {op.name for op in layer_ops(replace(GPT, alibi=True), replace(layout, attention="flash"))}
    assert "alibi bias" not in flash  # a fused kernel adds the bias as it goes
    fused = {op.name: op for op in head_ops(GPT, replace(layout, cross_entropy="fused"))}
    assert fused["cross-entropy"].nbytes == tokens * v * 4  # flash-attn's xentropy reads the bf16 logits twice
    assert fused["cross-entropy back"].nbytes == tokens * v * 4  # and reads them once, writing their gradient
    assert "training metrics" not in fused
    metrics = {op.name: op for op in head_ops(GPT, replace(layout, cross_entropy="fused", train_metrics=2))}
    # composer's two train metrics: a 16-bit log-softmax reading the logits three times and writing once,
    # then autocast's fp32 copy for nll_loss, after the backward
    assert metrics["training metrics"].nbytes == tokens * v * 2 * (8 + 6) and metrics["training metrics"].phase == "W"
    for bad in (-1, True, 1.5):
        with pytest.raises(SetupError, match="train_metrics"):
            TrainingSetup(train_metrics=bad)
    # fp16: cast the gradients to fp32, unscale, norm, Adam, copy back, zero; bf16 has no cast and no loss scale
    assert optimizer_bytes(TrainingSetup(precision="fp16")) == 6 + 8 + 4 + 28 + 6 + 2
    assert optimizer_bytes(TrainingSetup(precision="bf16")) == 4 + 28 + 6 + 4
    # PyTorch's Adam op by op (composer's DecoupledAdamW behind FSDP): clip, m, v, sqrt / bias correction / eps, step
    assert optimizer_bytes(TrainingSetup(optimizer="unfused")) == 12 + 20 + 20 + 24 + 16
    with pytest.raises(SetupError, match="optimizer"):
        TrainingSetup(optimizer="adam")


@pytest.mark.parametrize(
    "layout, per_layer",
    [
        (TrainingSetup(tp=1, recompute="none", attention="unfused"), S * H * (34 + 5 * A * S / H)),
        (TrainingSetup(tp=4, recompute="none", attention="unfused"), S * H * (10 + 24 / 4 + 5 * A * S / (H * 4))),
        (
            TrainingSetup(tp=4, recompute="none", attention="unfused", sequence_parallel=True),
            S * H / 4 * (34 + 5 * A * S / H),
        ),
        (TrainingSetup(tp=4, recompute="selective", attention="unfused"), S * H * (10 + 24 / 4)),
        (TrainingSetup(tp=4, recompute="selective", attention="unfused", sequence_parallel=True), 34 * S * H / 4),
        (TrainingSetup(tp=4, recompute="full", attention="unfused"), 2 * S * H),
    ],
)
def test_activations_are_korthikanti_table_2(layout, per_layer):
    assert math.isclose(layer_activations(GPT, layout)[0], per_layer)


def test_bytes_per_parameter_and_zero():
    model = named_model("megatron-7.5b")
    base = dict(tp=4, dp=4, global_batch=8)
    m0 = whatif(model, TrainingSetup(**base), "dgx-a100").memory[0]
    params = m0.params / 2
    assert math.isclose(m0.grads, 4 * params) and math.isclose(m0.optimizer, 12 * params)  # 18 bytes a parameter
    m16 = whatif(model, TrainingSetup(**base, precision="fp16"), "dgx-a100").memory[0]
    assert math.isclose(m16.params + m16.grads + m16.optimizer, 20 * params)
    z1, z2, z3 = (whatif(model, TrainingSetup(**base, zero=z), "dgx-a100").memory[0] for z in (1, 2, 3))
    assert math.isclose(z1.optimizer, 12 * params / 4) and z1.grads == m0.grads
    assert math.isclose(z2.grads, 4 * params / 4) and z2.params == m0.params
    assert z3.params < m0.params / 2  # sharded, plus two layers' gathered weights


def test_the_step_simulates_one_device_per_pipeline_rank_and_accounts_for_all_its_time():
    layout = TrainingSetup(tp=2, pp=4, dp=8, global_batch=64, sequence_parallel=True)
    report = whatif(GPT, layout, "dgx-h100")
    assert report.devices == 64 and report.simulated_devices == 4
    for rank in report.stages:
        assert math.isclose(sum(rank.get(k, 0.0) for k in KINDS), report.step_seconds, rel_tol=1e-9)
    assert whatif(GPT, layout, "dgx-h100").step_seconds == report.step_seconds  # deterministic


def test_schedules_that_shrink_the_bubble_shrink_it():
    base = dict(tp=1, pp=4, dp=1, global_batch=16)
    bubble = {
        name: whatif(BALANCED, TrainingSetup(**base, schedule=name, **extra), "dgx-h100").breakdown["bubble"]
        for name, extra in (("1f1b", {}), ("interleaved-1f1b", {"virtual_stages": 2}), ("zbv", {}), ("zb-h1", {}))
    }
    assert bubble["interleaved-1f1b"] < bubble["1f1b"]
    assert bubble["zbv"] < bubble["1f1b"] and bubble["zb-h1"] < bubble["1f1b"]
    more = whatif(BALANCED, TrainingSetup(tp=1, pp=4, global_batch=64), "dgx-h100")
    fewer = whatif(BALANCED, TrainingSetup(tp=1, pp=4, global_batch=8), "dgx-h100")
    assert more.breakdown["bubble"] / more.step_seconds < fewer.breakdown["bubble"] / fewer.step_seconds


def test_doubling_replicas_at_a_fixed_batch_costs_what_the_longer_bubble_costs():
    """Table 1's 145B layout with twice the replicas and half the microbatches each: the bubble grows from 7/288
    to 7/144 of the pipeline, the gradients' all-reduce spans twice the nodes; a few percent, not a quarter."""
    model = named_model("megatron-145b")
    setting = dict(recompute="full", attention="unfused", tp_overlap="none", dp_overlap=False, grad_fusion=False)
    one, two = (
        whatif(model, TrainingSetup(tp=8, pp=8, dp=dp, global_batch=2304, **setting), "dgx-a100") for dp in (12, 24)
    )
    loss = 1 - two.tflops_per_gpu / one.tflops_per_gpu
    assert 0.02 < loss < 0.10
    assert two.breakdown["bubble"] / two.step_seconds > one.breakdown["bubble"] / one.step_seconds


def test_a_heavier_last_stage_makes_the_others_wait():
    """The output layer's products make the last stage the slowest: the others wait for it every microbatch."""
    heavy = whatif(GPT, TrainingSetup(tp=1, pp=4, global_batch=64), "dgx-h100")
    light = whatif(BALANCED, TrainingSetup(tp=1, pp=4, global_batch=64), "dgx-h100")
    assert heavy.stages[1]["bubble"] > 3 * light.stages[1]["bubble"]


def test_overlap_hides_communication_where_megatron_overlaps_it():
    base = dict(tp=8, dp=1, global_batch=4, sequence_parallel=True)
    exposed = {
        mode: whatif(GPT, TrainingSetup(**base, tp_overlap=mode), "dgx-a100").breakdown["sp_cp"]
        for mode in ("none", "backward", "full")
    }
    assert exposed["none"] > exposed["backward"] > exposed["full"]
    grads = {
        on: whatif(GPT, TrainingSetup(tp=1, dp=16, global_batch=16, dp_overlap=on), "dgx-a100").breakdown["dp"]
        for on in (True, False)
    }
    assert grads[True] < grads[False]
    gathers = {
        on: whatif(GPT, TrainingSetup(dp=16, zero=3, global_batch=64, dp_overlap=on), "dgx-a100").breakdown["dp"]
        for on in (True, False)
    }
    assert gathers[True] < gathers[False]  # ZeRO-3's per-microbatch gathers hide only when prefetched


def test_a_first_generation_fused_kernel_keeps_what_flash_keeps_at_the_share_measured_for_flashattention():
    flash, triton = (TrainingSetup(tp=2, global_batch=4, attention=a) for a in ("flash", "triton"))
    assert layer_activations(GPT, triton) == layer_activations(GPT, flash)
    ops = {op.name: op for op in layer_ops(GPT, triton)}
    # heads of 64 at 1,024 tokens: FlashAttention ran 70 TFLOP/s where FlashAttention-2 ran 119 on A100 (causal)
    assert ops["flash attention"].first_gen_head_dim == ops["flash attention back"].first_gen_head_dim == 64
    assert {op.first_gen_head_dim for op in layer_ops(GPT, flash) if op.kind == "attention"} == {0}
    runs = {a: whatif(GPT, lay, "dgx-a100").breakdown["attention"] for a, lay in (("f", flash), ("t", triton))}
    assert runs["t"] == pytest.approx(runs["f"] * 119 / 70)


def test_recomputation_trades_time_for_memory():
    runs = {
        r: whatif(GPT, TrainingSetup(tp=2, global_batch=4, recompute=r, attention="unfused"), "dgx-a100")
        for r in ("none", "selective", "full")
    }
    time = {r: rep.breakdown["recompute"] for r, rep in runs.items()}
    held = {r: rep.memory[0].activations for r, rep in runs.items()}
    assert time["none"] == 0 < time["selective"] < time["full"]
    assert held["none"] > held["selective"] > held["full"]


def test_throughput_counts_the_papers_flops():
    b, lay, v = 16, GPT.layers, GPT.vocab
    assert math.isclose(model_flops(GPT, b), 72 * b * S * lay * H * H * (1 + S / (6 * H) + v / (12 * lay * H)))
    full = TrainingSetup(recompute="full")
    hardware = model_flops(GPT, b) + recompute_flops(GPT, full, b)
    assert math.isclose(hardware, 96 * b * S * lay * H * H * (1 + S / (6 * H) + v / (16 * lay * H)))


def test_a_layout_that_does_not_fit_says_so_and_by_how_much():
    report = whatif(named_model("gpt3-175b"), TrainingSetup(tp=8, global_batch=1), "dgx-h100")
    assert not report.fits
    over = report.memory[0].over / 2**30
    assert over > 250  # 175 B parameters at 18 bytes on 8 GPUs of 74.5 GiB
    assert f"{over:.1f} GiB more than" in report.text() and "DOES NOT FIT" in report.text()
    assert report.to_json()["fits"] is False


def test_the_json_report_has_the_keys_the_issue_names():
    data = whatif(GPT, TrainingSetup(tp=2, pp=2, dp=2, global_batch=8), "dgx-h100").to_json()
    assert {"step_seconds", "tflops_per_gpu", "mfu", "memory_gib", "breakdown"} <= set(data)
    assert len(data["memory_gib"]) == 2 and {"params", "grads", "optimizer", "activations"} <= set(
        data["memory_gib"][0]
    )
    assert set(data["breakdown"]["step"]) == set(KINDS) and len(data["breakdown"]["pipeline_ranks"]) == 2


def test_experts_and_context_parallelism_communicate_as_their_kinds():
    moe = named_model("mixtral-8x7b")
    report = whatif(moe, TrainingSetup(tp=2, dp=8, ep=8, global_batch=16), "dgx-h100")
    assert "on 16 DGX H100 GPUs (tp 2 x cp 1 x pp 1 x dp 8, experts over ep 8 of the dp ranks;" in report.text()
    assert report.breakdown["ep"] > 0
    dense = whatif(moe, TrainingSetup(tp=2, dp=8, ep=1, global_batch=16), "dgx-h100")
    assert report.memory[0].params < dense.memory[0].params / 3  # the experts' weights split 8 ways
    llama = replace(named_model("llama3-8b"), layers=4)
    one, two = (whatif(llama, TrainingSetup(tp=4, cp=cp, global_batch=2), "dgx-h100") for cp in (1, 2))
    ring = [op for op in layer_ops(llama, TrainingSetup(tp=4, cp=2)) if op.kind == "sp_cp"]
    assert [op.name for op in ring] == ["ring kv", "ring kv back"] and all(op.hide for op in ring)
    assert two.memory[0].activations < 0.6 * one.memory[0].activations


@pytest.mark.parametrize(
    "model, layout, words",
    [
        (GPT, TrainingSetup(tp=3), "tp=3 does not split 16 attention heads"),
        (GPT, TrainingSetup(pp=3), "8 layers do not split evenly into 3"),
        (GPT, TrainingSetup(tp=2, pp=2, zero=3, global_batch=4), "or zero=2 .FSDP"),
        (GPT, TrainingSetup(ep=2, dp=2), "needs a mixture-of-experts model"),
        (GPT, TrainingSetup(sequence_parallel=True), "needs tp > 1"),
        (GPT, TrainingSetup(cp=2, attention="unfused"), "attention='flash'"),
        (GPT, TrainingSetup(cp=2, attention="triton"), "attention='flash'"),
        (GPT, TrainingSetup(pp=2, schedule="interleaved-1f1b"), "needs --virtual-stages 2 or more"),  # else plain 1F1B
        (GPT, TrainingSetup(pp=2, schedule="zbv", virtual_stages=4), "holds 2 stages per rank"),  # else ignored
        (GQA, TrainingSetup(tp=3), "tp=3 does not split 8 key/value heads"),  # 3 divides the 24 query heads
        (GPT, TrainingSetup(schedule="interleaved-1f1b", virtual_stages=2), "needs pp > 1"),
        (
            GPT,
            TrainingSetup(pp=4, schedule="interleaved-1f1b", virtual_stages=2, global_batch=6),
            "6 microbatches do not",
        ),
    ],
)
def test_layouts_that_cannot_run_say_why(model, layout, words):
    with pytest.raises(SetupError, match=words):
        whatif(model, layout, "dgx-h100")


def test_groups_sit_on_nodes_in_megatrons_rank_order():
    """tp innermost, then cp, then dp, pp outermost, on nodes of 8: who shares a node decides the links."""
    lay = TrainingSetup(tp=2, cp=2, dp=8, pp=4)
    assert lay.per_node(1, lay.tp) == 2  # a tp pair shares a node
    assert lay.per_node(lay.tp, lay.dp * lay.cp) == 4  # 16 data/context ranks, 4 on each node
    assert not lay.pp_same_node and TrainingSetup(tp=2, pp=4).pp_same_node
    assert TrainingSetup(tp=8, dp=4).per_node(8, 4) == 1  # one replica per node: every port used
    assert TrainingSetup(tp=12).per_node(1, 12) == 4  # 12 ranks on nodes of 8: one node holds 4, and its 4 ports


def test_bad_sizes_are_refused_at_once():
    with pytest.raises(SetupError, match="whole number"):
        TrainingSetup(tp=0)
    with pytest.raises(SetupError, match="multiple of 8"):
        TrainingSetup(dp=4, microbatch=2, global_batch=12)
    with pytest.raises(SetupError, match="choose one of"):
        TrainingSetup(schedule="2f2b")
    with pytest.raises(ValueError, match="kv_heads"):
        Transformer(heads=96, kv_heads=7)


def test_the_report_header_names_every_technique_the_layout_turns_on():
    """A report read later says what was planned: the looped schedule's stages, sequence parallelism, ZeRO."""
    layout = TrainingSetup(tp=2, pp=2, global_batch=8, schedule="interleaved-1f1b", virtual_stages=2, sequence_parallel=True,
                    zero=1)  # fmt: skip
    header = whatif(BALANCED, layout, "dgx-h100").text().splitlines()[0]
    for words in ("interleaved-1f1b with 2 stages per rank", "sequence parallel", "ZeRO-1"):
        assert words in header, header
    plain = whatif(BALANCED, TrainingSetup(tp=2, pp=2, global_batch=8), "dgx-h100").text().splitlines()[0]
    assert "stages per rank" not in plain and "ZeRO" not in plain and "sequence parallel" not in plain


def test_llama3_s_all_gathered_context_parallel_keys_and_values_sit_in_the_critical_path():
    llama = replace(named_model("llama3-8b"), layers=4, seq=32768)
    ring, gather = (TrainingSetup(tp=2, cp=4, global_batch=1, cp_comm=c) for c in ("ring", "allgather"))
    ops = {phase: [op.name for op in layer_ops(llama, gather) if op.phase == phase] for phase in "FI"}
    assert ops["F"][ops["F"].index("flash attention") - 1] == "cp kv all-gather"
    assert ops["I"][ops["I"].index("flash attention back") - 1] == "cp kv all-gather again"  # not kept: re-gathered
    assert ops["I"][ops["I"].index("flash attention back") + 1] == "cp kv grad reduce-scatter"
    (kv,) = [op for op in layer_ops(llama, gather) if op.name == "cp kv all-gather"]
    assert kv.nbytes == 2 * 32768 * (8 // 2) * 128 * 2 and not kv.hide  # every rank's K and V, nothing hides it
    slow, fast = (whatif(llama, layout, "dgx-h100") for layout in (gather, ring))
    assert slow.breakdown["sp_cp"] > fast.breakdown["sp_cp"] and slow.step_seconds > fast.step_seconds
    assert slow.memory[0].activations == fast.memory[0].activations  # each rank keeps only its own keys and values
    with pytest.raises(SetupError, match="cp_comm='tree'.*ring, allgather"):
        TrainingSetup(cp=2, cp_comm="tree")


def test_deepspeed_s_bf16_optimizer_casts_each_gradient_to_a_new_fp32_tensor_before_adding_it():
    model = replace(named_model("llama2-7b"), layers=2)
    add, cast = (TrainingSetup(tp=2, grad_fusion=False, grad_accumulation=g) for g in ("add", "cast-add"))
    params = {op.name: op.nbytes for op in layer_ops(model, cast) if op.phase == "W" and op.kind == "memory"}
    (megatron,) = [op.nbytes for op in layer_ops(model, add) if op.name == "accumulate grads"]
    assert megatron == pytest.approx(params["accumulate grads"] * 10 / 12)  # 2 + 4 + 4 bytes against 4 + 4 + 4
    assert params["cast grads"] == pytest.approx(params["accumulate grads"] * 6 / 12)  # 2 read, 4 written
    fused = TrainingSetup(tp=2, grad_accumulation="cast-add")  # gradient-accumulation fusion: no separate pass
    assert not [op for op in layer_ops(model, fused) if "grads" in op.name and op.kind == "memory"]
    slow, fast = (whatif(model, replace(layout, global_batch=4), "dgx-a100") for layout in (cast, add))
    assert slow.step_seconds > fast.step_seconds


def test_deepspeed_s_bf16_optimizer_all_reduces_the_gradients_it_then_shards():
    model = replace(named_model("llama2-7b"), layers=4)
    layout = TrainingSetup(tp=2, pp=2, dp=4, global_batch=8, zero=1, dp_overlap=False)
    scatter, whole = (
        whatif(model, replace(layout, grad_reduce=g), "dgx-a100") for g in ("reduce-scatter", "all-reduce")
    )
    assert whole.breakdown["dp"] > scatter.breakdown["dp"]  # every rank receives the whole sum
    assert whole.memory[0].total == scatter.memory[0].total  # the optimizer state is sharded all the same
    with pytest.raises(SetupError, match="ZeRO-2 keeps only its shard.*grad_reduce='reduce-scatter'"):
        TrainingSetup(zero=2, grad_reduce="all-reduce")


def test_fsdp_copies_divides_casts_and_accumulates_each_microbatch_s_gradients():
    model = replace(named_model("llama2-7b"), layers=2)
    layout = TrainingSetup(dp=8, zero=3, microbatch=1, global_batch=32, grad_accumulation="fsdp")
    passes = {op.name: op.nbytes for op in layer_ops(model, layout) if op.name.startswith("fsdp")}
    params = model.layer_params
    assert fsdp_divide_factors(8) == (4, 2.0) and fsdp_divide_factors(2) == (2, 1.0)  # PyTorch's and fairscale's
    assert fsdp_divide_factors(124) == (8, 15.5)  # OPT-175B's 124 ranks
    assert passes["fsdp flat grad"] == passes["fsdp grad pre-divide"] == pytest.approx(params * 4)  # bf16 2 + 2
    assert passes["fsdp shard post-divide"] == pytest.approx(params / 8 * 4)
    assert passes["fsdp shard cast"] == pytest.approx(params / 8 * 6)  # bf16 read, fp32 written
    assert passes["fsdp shard accumulate"] == pytest.approx(params / 8 * 12 * 3 / 4)  # from the second microbatch
    once = replace(layout, global_batch=8)  # one microbatch: nothing to add to
    assert [op.nbytes for op in layer_ops(model, once) if op.name == "fsdp shard accumulate"] == [0.0]
    fsdp, megatron = (whatif(model, replace(layout, grad_accumulation=g), "dgx-h100") for g in ("fsdp", "add"))
    assert (
        fsdp.breakdown["elementwise"] > megatron.breakdown["elementwise"] and fsdp.step_seconds > megatron.step_seconds
    )
    # FSDP reduce-scatters in the weights' 16 bits (reduce_dtype takes param_dtype), not fp32: less overlapped traffic
    assert fsdp.breakdown["contention"] < megatron.breakdown["contention"]
    with pytest.raises(SetupError, match="grad_accumulation='fsdp', zero=1.*use zero=2 or 3"):
        TrainingSetup(dp=8, zero=1, grad_accumulation="fsdp")


def test_the_first_generation_triton_kernel_refuses_heads_it_was_not_built_for():
    wide = Transformer(2, 8 * 256, 8, 2048, 50368, name="wide-heads")
    with pytest.raises(SetupError, match="heads of up to 128.*attention='flash'"):
        whatif(wide, TrainingSetup(attention="triton", global_batch=1), "dgx-h100")
    assert whatif(wide, TrainingSetup(attention="flash", global_batch=1), "dgx-h100").step_seconds > 0


def test_a_fused_attention_kernel_computes_its_padded_head():
    # flash-attn's Triton kernel rounds the head to a power of two, FlashAttention-2 to its built head sizes
    assert [kernel_head_dim(d, "triton") for d in (64, 96, 112, 128)] == [64, 128, 128, 128]
    assert [kernel_head_dim(d, "flash") for d in (64, 96, 112, 128, 200)] == [64, 96, 128, 128, 256]
    odd, even = (Transformer(2, heads * 112, heads, 2048, 50368, name="h") for heads in (8, 8))
    padded = replace(odd, hidden=8 * 112)  # heads of 112
    whole = replace(even, hidden=8 * 128)  # heads of 128: the same kernel time per head
    layout = TrainingSetup(attention="triton", microbatch=2)
    (p,) = [op for op in layer_ops(padded, layout) if op.kind == "attention" and op.phase == "F"]
    (w,) = [op for op in layer_ops(whole, layout) if op.kind == "attention" and op.phase == "F"]
    assert p.rate_share == pytest.approx(112 / 128) and w.rate_share == pytest.approx(1.0)
    assert p.first_gen_head_dim == w.first_gen_head_dim == 128  # both priced as the kernel for heads of 128
    achieved = system("dgx-a100").achieved
    seconds = [
        achieved.attention_time(op.flops, op.causal_seq, op.causal_part, op.rate_share, op.first_gen_head_dim)
        for op in (p, w)
    ]
    assert seconds[0] == pytest.approx(seconds[1])


def test_selective_recomputation_holds_only_what_it_recomputes_while_it_runs():
    # a fused kernel keeps no score matrix: selective recomputes nothing, and holds what no recomputation holds
    model = Transformer(layers=24, hidden=1536, heads=12, seq=2048, vocab=50368, name="mpt-760m-like")
    layout = TrainingSetup(dp=8, zero=3, microbatch=8, global_batch=64, attention="triton")
    none, selective = (whatif(model, replace(layout, recompute=r), "dgx-h100") for r in ("none", "selective"))
    assert selective.memory[0].activations == pytest.approx(none.memory[0].activations)
    assert selective.step_seconds == pytest.approx(none.step_seconds)
    # unfused: while a layer's backward runs it holds its recomputed softmax output, dropout mask and output
    unfused = replace(layout, attention="unfused")
    scores = unfused.microbatch * model.heads * model.seq**2
    assert transient(model, replace(unfused, recompute="selective"), False) == pytest.approx(5 * scores)
    assert transient(model, replace(unfused, recompute="none"), False) == 0.0


def test_the_tied_embedding_s_all_reduce_stays_on_nvlink_when_first_and_last_stages_share_a_node():
    """tp 2 x pp 4 fills one node of 8: the first and last stages' embedding all-reduce moves over NVLink. Before, it
    was priced over the ports between nodes whatever the layout."""
    from simulator.cost.systems import system

    layout = TrainingSetup(tp=2, pp=4, microbatch=1, global_batch=8)
    sys_ = system("dgx-a100")
    a = sys_.achieved
    emb = GPT.padded_vocab(2) * GPT.hidden / 2 * layout.bytes_per_param[1]  # its gradients' bytes on one tp rank
    inside = whatif(GPT, layout, sys_)
    across = whatif(GPT, replace(layout, node_size=4), sys_)  # the same pipeline over two nodes of four
    assert layout.ends_share_a_node and not replace(layout, node_size=4).ends_share_a_node
    assert not TrainingSetup(tp=2, pp=8).ends_share_a_node and TrainingSetup(pp=8).ends_share_a_node
    assert not TrainingSetup(tp=3, pp=2, node_size=4).ends_share_a_node  # ranks 1 and 4 sit on two nodes
    gap = a.collective_time("all_reduce", emb, 2, 1) - a.collective_time("all_reduce", emb, 2, 2)
    assert gap > 0
    # the last stage's data-parallel time is its embedding all-reduce and nothing else here (dp = 1)
    assert math.isclose(across.stages[-1]["dp"] - inside.stages[-1]["dp"], gap, rel_tol=1e-9)
