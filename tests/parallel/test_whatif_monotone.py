"""The what-if moves the way its own rules say when one setting changes: memory and time, over random layouts.

Each test draws a valid layout (``test_whatif_properties.cases``), changes one setting, and compares the two
answers. Memory is compared in the tensors' bytes (``Memory.total``) at the fullest pipeline rank: the CUDA
context and NCCL's buffers grow with the groups a rank joins, by design, so they are not what these properties
are about.
"""

from __future__ import annotations

import math
from dataclasses import replace

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simulator.cost.systems import system, with_network
from simulator.parallel.whatif import SetupError, TrainingSetup, Transformer, whatif
from simulator.parallel.whatif.band import knobs

from .test_whatif_properties import cases

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
SLACK = 1 + 1e-9


def valid(model: Transformer, layout: TrainingSetup, **changes) -> TrainingSetup:
    """``layout`` with ``changes``, or the example rejected if that layout cannot run ``model``."""
    try:
        changed = replace(layout, **changes)
        changed.check(model)
    except SetupError:
        assume(False)
    return changed


def tensors(model: Transformer, layout: TrainingSetup, on: str) -> float:
    """The tensors' bytes on the fullest device."""
    return max(m.total for m in whatif(model, layout, on).memory)


def activations(model: Transformer, layout: TrainingSetup, on: str) -> float:
    return max(m.activations for m in whatif(model, layout, on).memory)


@SETTINGS
@given(cases())
def test_a_larger_microbatch_never_needs_less_memory(case):
    """Twice the sequences a microbatch (as many microbatches) never needs fewer bytes on any device."""
    model, layout, on = case
    bigger = valid(model, layout, microbatch=2 * layout.microbatch, global_batch=2 * layout.global_batch)
    assert tensors(model, bigger, on) >= tensors(model, layout, on) / SLACK
    assert activations(model, bigger, on) >= activations(model, layout, on) / SLACK


@SETTINGS
@given(cases())
def test_more_layers_never_need_less_memory(case):
    """One more layer in every model chunk never needs fewer bytes on the fullest device."""
    model, layout, on = case
    counts = layout.chunk_layers(model)
    deeper = replace(model, layers=model.layers + len(counts))
    split = {"stage_layers": tuple(n + 1 for n in counts)} if layout.pp > 1 else {}
    longer = valid(deeper, layout, first_stage_layers=None, last_stage_layers=None, **split)
    assert tensors(deeper, longer, on) >= tensors(model, layout, on) / SLACK


@SETTINGS
@given(cases())
def test_recomputing_more_never_keeps_more_activations(case):
    """Full recomputation keeps no more activation bytes than selective, and selective no more than none: each
    keeps a subset of what the next one keeps (the transients of recomputing one layer included)."""
    model, layout, on = case
    kept = {}
    for recompute in ("none", "selective", "full"):
        kept[recompute] = activations(model, valid(model, layout, recompute=recompute, distribute_saved=False), on)
    assert kept["full"] <= kept["selective"] * SLACK
    assert kept["selective"] <= kept["none"] * SLACK


@SETTINGS
@given(cases())
def test_more_tensor_parallelism_never_needs_more_memory(case):
    """Twice the tp (same model, batch and everything else) never needs more tensor bytes a device: every weight
    and every split activation divides, the rest stays."""
    model, layout, on = case
    wider = valid(model, layout, tp=2 * layout.tp)
    assert tensors(model, wider, on) <= tensors(model, layout, on) * SLACK


@SETTINGS
@given(cases())
def test_more_context_or_expert_parallelism_never_needs_more_memory(case):
    """Twice the cp (each rank keeps half of every sequence's activations) or twice the ep (each rank holds half as
    many experts; dp doubled with it, so that ep divides it) never needs more tensor bytes a device."""
    model, layout, on = case
    before = tensors(model, layout, on)
    try:
        wider = replace(layout, cp=2 * layout.cp)
        wider.check(model)
    except SetupError:
        wider = None
    if wider is not None:
        assert tensors(model, wider, on) <= before * SLACK
    if model.experts:
        more = valid(model, layout, ep=2 * layout.ep, dp=2 * layout.dp, global_batch=2 * layout.global_batch)
        half = valid(model, layout, dp=2 * layout.dp, global_batch=2 * layout.global_batch)
        assert tensors(model, more, on) <= tensors(model, half, on) * SLACK


@SETTINGS
@given(cases())
def test_zero_1_never_needs_more_memory(case):
    """The distributed optimizer (ZeRO-1) only shards what ZeRO-0 replicates: never more bytes a device."""
    model, layout, on = case
    replicated = valid(model, layout, zero=0, grad_reduce="reduce-scatter", grad_accumulation="add")
    sharded = valid(model, replicated, zero=1)
    assert tensors(model, sharded, on) <= tensors(model, replicated, on) * SLACK


@SETTINGS
@given(cases())
def test_a_deeper_1f1b_pipeline_never_needs_more_memory(case):
    """Twice the pipeline ranks under 1F1B (layers split evenly, same batch) never needs more tensor bytes a device:
    each rank holds half the layers, and the first rank at most twice the microbatches in flight of them."""
    model, layout, on = case
    plain = valid(model, layout, schedule="1f1b", virtual_stages=1, first_stage_layers=None, stage_layers=None)
    deeper = valid(model, plain, pp=2 * plain.pp)
    assert tensors(model, deeper, on) <= tensors(model, plain, on) * SLACK


@SETTINGS
@given(cases())
def test_a_higher_zero_stage_never_needs_more_memory_where_the_shards_outweigh_a_layer(case):
    """ZeRO-2 shards the gradients and ZeRO-3 the weights, each at the price of one layer's whole gradient (or two
    layers' gathered weights) held while it runs: with dp x cp >= 4 and 4 or more layers a rank, the shard saved
    (at least 3/4 of 4 layers' gradients or weights) outweighs it, so the higher stage never needs more."""
    model, layout, on = case
    assume(layout.dp * layout.cp >= 4 and min(layout.chunk_layers(model)) * layout.stages_per_rank >= 4)
    lower = valid(model, layout, zero=1, grad_accumulation="add", grad_reduce="reduce-scatter")
    for zero in (2, 3):
        higher = valid(model, lower, zero=zero)
        assert tensors(model, higher, on) <= tensors(model, lower, on) * SLACK, zero
        lower = higher


@SETTINGS
@given(cases())
def test_more_microbatches_never_grow_the_bubbles_share(case):
    """Twice the microbatches of the same size (twice the global batch) never grows the pipeline bubble's share of
    the step on the busiest pipeline rank (the one that waits least): its fill and drain stay, the work between
    them doubles (model chunks of equal layers). Not on the others: a stage lighter than its neighbour (the last one carries the output layer)
    waits for it every microbatch, a wait that grows with them and is booked as bubble too."""
    model, layout, on = case
    assume(layout.pp > 1 and layout.stage_layers is None and layout.first_stage_layers is None)  # chunks alike
    more = valid(model, layout, global_batch=2 * layout.global_batch)
    before, after = whatif(model, layout, on), whatif(model, more, on)
    share_before, share_after = (min(st["bubble"] for st in r.stages) / r.step_seconds for r in (before, after))
    assert share_after <= share_before * SLACK + 1e-12, (share_before, share_after)


@SETTINGS
@given(cases())
def test_recompute_full_is_never_faster_than_none(case):
    """Full recomputation re-runs every layer's forward before its backward: the step is never shorter."""
    model, layout, on = case
    none = whatif(model, valid(model, layout, recompute="none", distribute_saved=False), on).step_seconds
    full = whatif(model, valid(model, layout, recompute="full", distribute_saved=False), on).step_seconds
    assert full >= none / SLACK


@SETTINGS
@given(cases(), st.sampled_from((None, 1, 2, 4)))
def test_faster_or_more_network_ports_never_slow_the_step(case, ports):
    """Twice each port's line rate (--nic-gbps), or twice the ports a node (--nics-per-node), never makes the step
    slower."""
    model, layout, on = case
    base = system(on)
    gbps = base.achieved.nic_bandwidth * 8 / 1e9 / 0.96
    slow = whatif(model, layout, with_network(base, ports, gbps)).step_seconds
    assert whatif(model, layout, with_network(base, ports, 2 * gbps)).step_seconds <= slow * SLACK
    more = 2 * (ports or base.achieved.node_size)
    assert whatif(model, layout, with_network(base, more, gbps)).step_seconds <= slow * SLACK


@SETTINGS
@given(cases())
def test_an_h100_computes_no_slower_than_an_a100(case):
    """The same layout on DGX H100 spends no more time than on DGX A100 in any kind of GPU work (products,
    attention, element-wise kernels, recomputation, the optimizer step; bf16 and fp16: A100 has no FP8). The step as
    a whole is not ordered: a tiny model's step is the CPU launching kernels and collectives' latencies, measured
    per system, and H100 systems' were measured slightly longer (4 layers of width 128: 2.69 ms against 2.68)."""
    model, layout, _ = case
    assume(layout.precision != "fp8")
    h100, a100 = whatif(model, layout, "dgx-h100"), whatif(model, layout, "dgx-a100")
    for kind in ("matmul", "attention", "elementwise", "recompute", "optimizer"):
        assert h100.breakdown[kind] <= a100.breakdown[kind] * SLACK, kind


def test_full_recomputation_counts_the_kept_input_once():
    """One layer a stage, one microbatch: full recomputation holds that layer's input and, while recomputing, the
    layer's activations, of which the input is one (the same tensor): never more than no recomputation holds."""
    model = Transformer(layers=4, hidden=2304, heads=24, seq=1024, vocab=51200)
    layout = TrainingSetup(pp=4, global_batch=1, recompute="none")
    none = [m.activations for m in whatif(model, layout, "dgx-a100").memory]
    full = [m.activations for m in whatif(model, replace(layout, recompute="full"), "dgx-a100").memory]
    assert all(f <= n for f, n in zip(full, none, strict=True)), (full, none)


def test_sharded_gradients_hide_the_network_once_behind_a_backward():
    """ZeRO-3 on two GPUs (dp=2), one microbatch: the backward hides the weight gathers and the reduce-scatters
    together, so the longer backward of full recomputation cannot make the step shorter; ZeRO-2, two microbatches,
    likewise."""
    model = Transformer(layers=4, hidden=4096, heads=32, seq=1024, vocab=32000, kv_heads=8, ffn=14336, mlp="swiglu",
                        bias=False, dropout=False, norm="rmsnorm", tied=False, experts=8, top_k=2)  # fmt: skip
    for zero, batch in ((3, 2), (2, 4)):
        layout = TrainingSetup(
            dp=2, global_batch=batch, zero=zero, tp_overlap="none", precision="fp8", recompute="none"
        )
        none = whatif(model, layout).step_seconds
        assert whatif(model, replace(layout, recompute="full")).step_seconds > none


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(cases())
def test_the_knobs_re_ask_without_failing_and_include_the_layout_s_own_answer(case):
    """The unpublished knobs re-ask any valid layout without raising, and each knob that can take the layout's own
    value reports the layout's own TFLOP/s for it."""
    model, layout, on = case
    report = whatif(model, layout, on)
    own = {"microbatch": str(layout.microbatch), "recompute": layout.recompute,
           "interleaving depth": f"v={layout.virtual_stages}",
           "gradient reduction": {1: "once", 2: "every microbatch"}.get(layout.zero)}  # fmt: skip
    for knob in knobs(model, layout, on):
        for label, tflops, fits in knob.values:
            if label == own[knob.name] and (knob.name != "interleaving depth" or layout.record.looped):
                assert math.isclose(tflops, report.tflops_per_gpu, rel_tol=1e-9), (knob.name, label)
                assert fits == report.fits


def test_the_depth_knob_keeps_an_interleaved_zero_bubble_schedule():
    """Interleaved zero bubble at v=2: the depth knob's v=2 is that layout's own answer, not interleaved 1F1B's."""
    model = Transformer(layers=4, hidden=128, heads=4, seq=256, vocab=1000)
    layout = TrainingSetup(pp=2, global_batch=4, schedule="interleaved-zb", virtual_stages=2)
    own = whatif(model, layout).tflops_per_gpu
    (depth,) = [k for k in knobs(model, layout, "dgx-h100") if k.name == "interleaving depth"]
    assert math.isclose(dict((v, t) for v, t, _ in depth.values)["v=2"], own, rel_tol=1e-9)


@SETTINGS
@given(cases())
def test_software_that_hides_or_saves_work_never_slows_the_step(case):
    """Each of these only hides communication behind compute or removes work, so the step is never longer with it:
    tensor-parallel collectives behind products (none -> backward -> full), weight gradients accumulated inside the
    product, kernels launched without waiting for each other (no CUDA_LAUNCH_BLOCKING), selective recomputation
    against full, none against selective. Not gradients reduced during the backward (dp_overlap): they go in
    buckets, each paying a collective's latency, beside kernels they slow; after a short backward one whole
    all-reduce can be quicker (megatron-1.7b cut to 4 layers on pp=4, dp=4, cp=2: 19.21 ms against 19.16)."""
    model, layout, on = case

    def step(**changes) -> float:
        return whatif(model, valid(model, layout, **changes), on).step_seconds

    assert step(tp_overlap="full") <= step(tp_overlap="backward") * SLACK <= step(tp_overlap="none") * SLACK**2
    assert step(grad_fusion=True) <= step(grad_fusion=False) * SLACK
    assert step(launch_blocking=False) <= step(launch_blocking=True) * SLACK
    kept = {"distribute_saved": False}
    none, selective = step(recompute="none", **kept), step(recompute="selective", **kept)
    assert none <= selective * SLACK <= step(recompute="full", **kept) * SLACK**2


@SETTINGS
@given(cases())
def test_more_work_never_takes_less_time(case):
    """Twice the microbatches (twice the global batch), or one more layer in every model chunk, never makes the step
    shorter."""
    model, layout, on = case
    step = whatif(model, layout, on).step_seconds
    more = valid(model, layout, global_batch=2 * layout.global_batch)
    assert whatif(model, more, on).step_seconds >= step / SLACK
    counts = layout.chunk_layers(model)
    deeper = replace(model, layers=model.layers + len(counts))
    split = {"stage_layers": tuple(n + 1 for n in counts)} if layout.pp > 1 else {}
    longer = valid(deeper, layout, first_stage_layers=None, last_stage_layers=None, **split)
    assert whatif(deeper, longer, on).step_seconds >= step / SLACK
