"""How a training step is laid out and run: the parallel sizes, the batch, the schedule, and the techniques on.

``TrainingSetup`` is what the what-if's command-line flags set. It checks itself against a model (``check``) and
says where each group's ranks sit (``per_node``): ranks are numbered in Megatron-LM's default order, tensor
parallel innermost, then context, then data (with expert parallelism inside it), then pipeline outermost
(``--rank-order tp-cp-ep-dp-pp``, megatron/core/parallel_state.py), so on nodes of 8 GPUs a tensor-parallel
group of 8 is one node and pipeline neighbours sit on different nodes.

Settings that model software as it was (for the papers' tables) rather than as it is:

- ``tp_overlap``: "none" (Megatron-LM before September 2021, commit 16c90445e7), "backward" (the input-gradient
  all-reduce, or under sequence parallelism its reduce-scatter and the re-done all-gather, run while the
  weight-gradient or input-gradient product computes: ``ColumnParallelLinearWithAsyncAllreduce`` and
  ``...WithSequenceParallelism`` in megatron/mpu/layers.py, March 2022), "full" (Transformer Engine's
  userbuffers also hide the forward's all-gathers and reduce-scatters behind the products next to them);
- ``dp_overlap``: gradients reduced bucket by bucket while the last microbatch's backward runs
  (``--overlap-grad-reduce``, August 2023); off, they are reduced after the backward, as before;
- ``grad_fusion``: weight gradients accumulate into the fp32 main gradients inside the product
  (``--gradient-accumulation-fusion``, February 2022); off, a separate add per parameter and microbatch;
- ``grad_accumulation``: that separate add: "add" (Megatron-LM's ``main_grad.add_(grad)``: the 16-bit
  gradient and the fp32 one read, the fp32 one written) or "cast-add" (DeepSpeed's BF16 optimizer, which BLOOM
  ran: ``hp_grad.add_(lp.grad.to(fp32))`` in ``update_hp_grads`` after every microbatch's backward,
  deepspeed/runtime/bf16_optimizer.py, branch olruwase/bf16-updates, 2022: the cast first writes a new fp32
  tensor that the add then reads); or "fsdp" (PyTorch's FSDP and fairscale's, which keep no main gradient:
  every microbatch each layer's gradients are copied from the views the layer used into one flat tensor,
  divided before the reduce-scatter (in the weights' 16 bits, FSDP's ``reduce_dtype`` defaulting to its
  ``param_dtype``) and the shard after it, cast to fp32 and added to the saved shard;
  ``layer.fsdp_grad_ops``; needs ``zero`` 2 or 3);
- ``grad_reduce``: how ZeRO-1 reduces the gradients over the data-parallel ranks: "reduce-scatter" (each rank
  receives the sum of its shard: Megatron-LM's distributed optimizer) or "all-reduce" (every rank receives
  the whole sum and updates its shard: DeepSpeed's BF16 optimizer beside its pipeline engine, which BLOOM ran,
  ``_bf16_reduce_grads`` in deepspeed/runtime/pipe/engine.py);
- ``precision``: "bf16" (bf16 weights, fp32 main gradients: 18 bytes a parameter) or "fp16" (fp16 weights and
  gradients: 20), Megatron-LM's distributed-optimizer guide, docs/user-guide/features/dist_optimizer.md; or
  "fp8" (Transformer Engine's FP8 products, ``--fp8-format hybrid``: the linear layers' products at the
  measured FP8 rate, the rest as bf16; memory as bf16, the FP8 copies and scales not counted);
- ``distribute_saved``: under full recomputation each tensor-parallel rank keeps 1 / tp of a layer's input
  and the group all-gathers it before recomputing (Megatron-LM's ``--distribute-saved-activations``,
  metaseq's ``--distribute-checkpointed-activations``); sequence parallelism splits it already;
- ``attention``: "unfused" (Megatron-LM's softmax and dropout kernels around two batched products, as in
  2021-2022), "flash" (one fused kernel, FlashAttention-2) or "triton" (one fused kernel of FlashAttention's
  first generation, as flash-attn's and llm-foundry's Triton kernel: the share of FlashAttention-2's speed that
  FlashAttention's kernels were measured at on the GPU, ``Achieved.first_gen_attention_share``);
- ``optimizer``: "fused" (Megatron-LM's mixed-precision optimizer around apex's FusedAdam) or "unfused"
  (PyTorch's Adam op by op over fp32 weights, as composer's DecoupledAdamW behind FSDP runs it);
- ``cross_entropy``: "fp32" (Megatron-LM's vocabulary-parallel cross-entropy on fp32 logits, pass by pass) or
  "fused" (one kernel on the 16-bit logits: flash-attn's xentropy, llm-foundry's ``fused_crossentropy``);
- ``train_metrics``: how many training metrics recompute the loss from the logits after each microbatch's
  backward, outside autograd (composer's train metrics: llm-foundry's models report ``LanguageCrossEntropy`` and
  ``LanguagePerplexity``, each PyTorch's unfused cross-entropy on the 16-bit logits; ``layer.TRAIN_METRIC``);
- ``recompute``: "none", "selective" (Megatron-LM's: the attention core, nothing under a fused kernel), "full"
  (each layer's input kept, its forward re-run), or "op" (torchtitan's op-level selective checkpointing,
  ``selective_ac_option = 'op'``: every second product and the element-wise ops re-run, ``price.op_recomputed``);
- ``cp_comm``: how context parallelism brings each rank the other ranks' keys and values: "ring" (Transformer
  Engine's ring attention, each step's exchange behind the previous step's kernel) or "allgather" (Llama 3's:
  all-gather them before the kernel and reduce-scatter their gradients after it, in the critical path).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedules import SCHEDULES, ScheduleRecord, make_schedule
from .model import Transformer

RECOMPUTE = ("none", "selective", "full", "op")
TP_OVERLAP = ("none", "backward", "full")
# bytes a parameter: weights, gradients, optimizer state; FP8 (Transformer Engine) keeps bf16 weights and fp32
# main gradients, casting to FP8 inside each product
PRECISION = {"bf16": (2, 4, 12), "fp16": (2, 2, 16), "fp8": (2, 4, 12)}
ATTENTION = ("flash", "unfused", "triton")
FUSED_ATTENTION = ("flash", "triton")  # one kernel each, keeping no score matrix
OPTIMIZER = ("fused", "unfused")
CROSS_ENTROPY = ("fp32", "fused")
CP_COMM = ("ring", "allgather")
GRAD_ACCUMULATION = ("add", "cast-add", "fsdp")
GRAD_REDUCE = ("reduce-scatter", "all-reduce")
MOST_STAGES = 4096  # pipeline ranks: 4,096 with one microbatch take 10 s to simulate, 65,536 over 100 s
MOST_PASSES = 1 << 22  # pp x microbatches x chunks a rank: some minutes to simulate (256 x 1,024: 8 s)


class SetupError(ValueError):
    """A layout that cannot run this model: the message names what does not fit and how to fix it."""


@dataclass(frozen=True)
class TrainingSetup:
    """One training step's layout (see the module docstring for the settings that model software versions)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    microbatch: int = 1
    global_batch: int | None = None  # sequences per step; None: one microbatch per pipeline stage and replica
    schedule: str = "1f1b"
    virtual_stages: int = 1
    recompute: str = "selective"
    sequence_parallel: bool = False
    zero: int = 0  # 0: replicated optimizer; 1: distributed optimizer (ZeRO-1); 2: and gradients; 3: and weights
    tp_overlap: str = "backward"
    dp_overlap: bool = True
    grad_fusion: bool = True
    precision: str = "bf16"
    attention: str = "flash"
    node_size: int = 8
    first_stage_layers: int | None = None  # Megatron-LM's --decoder-first-pipeline-num-layers
    last_stage_layers: int | None = None  # --decoder-last-pipeline-num-layers
    stage_layers: tuple[int, ...] | None = None  # layers of every model chunk, in pipeline order
    launch_blocking: bool = False  # CUDA_LAUNCH_BLOCKING=1: the CPU waits for every kernel (price.launch_gap)
    distribute_saved: bool = False  # full recomputation's kept layer inputs split over tp (no effect otherwise)
    optimizer: str = "fused"  # step.optimizer_bytes: apex's FusedAdam, or PyTorch's Adam op by op
    cross_entropy: str = "fp32"  # layer.head_ops: Megatron-LM's passes on fp32 logits, or one fused kernel
    cp_comm: str = "ring"  # layer.attention_ops: ring attention's hidden exchanges, or exposed all-gathers
    grad_accumulation: str = "add"  # without grad_fusion: Megatron-LM's add, DeepSpeed BF16's cast then add; or FSDP's
    grad_reduce: str = "reduce-scatter"  # ZeRO-1's gradient collective: a reduce-scatter, or DeepSpeed's all-reduce
    train_metrics: int = 0  # layer.head_ops: unfused cross-entropies a trainer's metrics run after each backward

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "ep", "microbatch", "virtual_stages", "node_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SetupError(f"TrainingSetup({name}={value!r}): give a whole number >= 1")
        choices = {
            "schedule": tuple(name for name, record in SCHEDULES.items() if record.whatif),
            "recompute": RECOMPUTE,
            "tp_overlap": TP_OVERLAP,
            "precision": tuple(PRECISION),
            "attention": ATTENTION,
            "optimizer": OPTIMIZER,
            "cross_entropy": CROSS_ENTROPY,
            "cp_comm": CP_COMM,
            "grad_accumulation": GRAD_ACCUMULATION,
            "grad_reduce": GRAD_REDUCE,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise SetupError(f"TrainingSetup({name}={getattr(self, name)!r}): choose one of {', '.join(allowed)}")
        for name in ("first_stage_layers", "last_stage_layers"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise SetupError(f"TrainingSetup({name}={value!r}): give a whole number of layers >= 0")
        if self.stage_layers is not None:
            counts = tuple(self.stage_layers)
            if not counts or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in counts):
                raise SetupError(
                    f"TrainingSetup(stage_layers={self.stage_layers!r}): give whole numbers of layers >= 0"
                )
            if self.first_stage_layers is not None or self.last_stage_layers is not None:
                raise SetupError("give either stage_layers (every chunk's layers) or first/last_stage_layers, not both")
            object.__setattr__(self, "stage_layers", counts)
        if isinstance(self.train_metrics, bool) or not isinstance(self.train_metrics, int) or self.train_metrics < 0:
            raise SetupError(
                f"TrainingSetup(train_metrics={self.train_metrics!r}): give a whole number of metrics >= 0"
            )
        if isinstance(self.zero, bool) or not isinstance(self.zero, int) or self.zero not in (0, 1, 2, 3):
            raise SetupError(f"TrainingSetup(zero={self.zero!r}): choose 0, 1, 2 or 3")
        if self.zero >= 2 and self.grad_reduce == "all-reduce":
            raise SetupError(
                f"TrainingSetup(zero={self.zero}, grad_reduce='all-reduce'): ZeRO-{self.zero} keeps only its shard of "
                "the gradients, which a reduce-scatter delivers; use grad_reduce='reduce-scatter' or zero=1"
            )
        if self.grad_accumulation == "fsdp" and self.zero < 2:
            raise SetupError(
                f"TrainingSetup(grad_accumulation='fsdp', zero={self.zero}): FSDP's gradient passes end in a sharded "
                "gradient; use zero=2 or 3 (FSDP's SHARD_GRAD_OP or FULL_SHARD), or grad_accumulation='add'"
            )
        if self.global_batch is None:
            object.__setattr__(self, "global_batch", self.dp * self.microbatch * self.pp)
        batch = self.global_batch
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise SetupError(f"TrainingSetup(global_batch={batch!r}): give a whole number of sequences >= 1")
        if self.global_batch % (self.dp * self.microbatch):
            raise SetupError(
                f"global batch {self.global_batch} does not split into dp={self.dp} replicas of microbatches of "
                f"{self.microbatch}: use a multiple of {self.dp * self.microbatch}"
            )

    # ---- sizes --------------------------------------------------------------------------------
    @property
    def devices(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def microbatches(self) -> int:
        """Microbatches each pipeline runs per step."""
        return self.global_batch // (self.dp * self.microbatch)

    @property
    def record(self) -> ScheduleRecord:
        """The pipeline schedule's record (``simulator.parallel.schedules.SCHEDULES``)."""
        return SCHEDULES[self.schedule]

    @property
    def schedule_options(self) -> dict[str, int]:
        """``make_schedule``'s options for this layout: the model chunks per rank of a looped schedule."""
        return {"virtual": self.virtual_stages} if self.record.looped else {}

    @property
    def stages_per_rank(self) -> int:
        """Model chunks a pipeline rank holds: 2 for the V schedules, ``virtual_stages`` for the looped ones."""
        return self.record.stages_on_each_rank(self.virtual_stages)

    @property
    def bytes_per_param(self) -> tuple[int, int, int]:
        """(weights, gradients, optimizer state) bytes per parameter before any sharding."""
        return PRECISION[self.precision]

    def chunk_layers(self, model: Transformer) -> tuple[int, ...]:
        """Transformer layers in each model chunk (pipeline order: chunk c runs on rank c % pp), split as
        Megatron-LM splits them: evenly; or ``first_stage_layers`` / ``last_stage_layers`` in the first and
        last chunk and the rest evenly over the others (``--decoder-first-pipeline-num-layers`` and
        ``--decoder-last-pipeline-num-layers``, megatron/core/transformer/transformer_block.py); or every
        chunk's count as given (``stage_layers``). The embedding runs in the first chunk, the output layer and
        the loss in the last, beside their layers (``price.py``)."""
        chunks = self.pp * self.stages_per_rank
        where = f"{chunks} model chunks (pp={self.pp} x {self.stages_per_rank} per rank)"
        if self.stage_layers is not None:
            if len(self.stage_layers) != chunks or sum(self.stage_layers) != model.layers:
                raise SetupError(
                    f"stage_layers {','.join(map(str, self.stage_layers))} gives {len(self.stage_layers)} chunks "
                    f"and {sum(self.stage_layers)} layers; the layout has {where} and the model {model.layers} "
                    "layers: give one count per chunk, summing to the model's layers"
                )
            return self.stage_layers
        first, last = self.first_stage_layers, self.last_stage_layers
        if first is None and last is None:
            if model.layers % chunks:
                raise SetupError(
                    f"{model.layers} layers do not split evenly into {where}: give --first-stage-layers and/or "
                    "--last-stage-layers (as Megatron-LM's --decoder-first/last-pipeline-num-layers) or "
                    f"--stage-layers, or choose pp and --virtual-stages whose product divides {model.layers}"
                )
            return (model.layers // chunks,) * chunks
        if chunks < 2:
            raise SetupError("first/last stage layers set a pipeline's ends: they need pp > 1")
        ends = [n for n in (first, last) if n is not None]
        inner = chunks - len(ends)
        rest = model.layers - sum(ends)
        given = " and ".join(
            f"--{end}-stage-layers {n}" for end, n in (("first", first), ("last", last)) if n is not None
        )
        if rest < 0 or (inner == 0 and rest):
            raise SetupError(
                f"{given} put {sum(ends)} layers in {'its ends' if len(ends) == 2 else 'one end'} of the pipeline, "
                f"and the model has {model.layers}: "
                + (f"give at most {model.layers} in all" if inner else f"with {where}, the ends are every chunk: "
                   f"give counts that add up to {model.layers}")
            )  # fmt: skip
        if inner and rest % inner:
            raise SetupError(
                f"{given} leave {rest} of the model's {model.layers} layers for the other {inner} of {where}, "
                f"which do not split evenly: choose counts that leave a multiple of {inner}"
            )
        middle = rest // inner if inner else 0
        counts = [middle] * chunks
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
        return tuple(counts)

    # ---- where groups sit (ranks in order tp, cp, ep/dp, pp) ------------------------------------
    def per_node(self, stride: int, size: int) -> int:
        """Members of a group of ``size`` ranks ``stride`` apart that share one node: the fewest on any of its
        nodes (a group of 12 on nodes of 8 has 4 on one: that node's ports carry its traffic between nodes)."""
        if stride >= self.node_size:
            return 1
        full = max(1, min(size, self.node_size // stride))
        return size % full or full

    @property
    def ends_share_a_node(self) -> bool:
        """Whether each rank of the first pipeline stage shares a node with its peer of the last (who all-reduce a
        tied embedding's gradient): in Megatron-LM's rank order a stage's ranks are ``tp * cp * dp`` apart."""
        stride = self.tp * self.cp * self.dp
        span = (self.pp - 1) * stride
        n = self.node_size
        return span < n and all(o // n == (o + span) // n for o in range(stride))

    @property
    def pp_same_node(self) -> bool:
        """Whether neighbouring pipeline ranks share a node."""
        return self.tp * self.cp * self.dp < self.node_size

    def check(self, model: Transformer) -> None:
        """Raise ``SetupError`` if this layout cannot run ``model``, saying what to change."""
        t = self.tp
        if model.heads % t:
            raise SetupError(
                f"tp={t} does not split {model.heads} attention heads: choose a tp that divides {model.heads}"
            )
        if model.kv % t and t % model.kv:
            raise SetupError(
                f"tp={t} does not split {model.kv} key/value heads (nor is it a multiple of {model.kv}, which would "
                f"copy each to tp / {model.kv} ranks): choose a tp that divides {model.kv} or is a multiple of it"
            )
        if model.inner % t:
            raise SetupError(f"tp={t} does not split the MLP width {model.inner}: choose a tp that divides it")
        # a looped schedule of one chunk per rank is plain 1F1B, and a V always holds two: refuse rather than
        # report a schedule that did not run
        record, looped = self.record, ", ".join(name for name, r in SCHEDULES.items() if r.looped and r.whatif)
        if record.looped and self.pp < 2:
            raise SetupError(f"schedule {self.schedule} interleaves model chunks over pipeline ranks: it needs pp > 1")
        if self.schedule == "interleaved-1f1b" and self.microbatches % self.pp:
            raise SetupError(
                f"schedule {self.schedule} runs microbatches in groups of pp: {self.microbatches} microbatches do not "
                f"divide by pp={self.pp} (Megatron-LM refuses them too); choose --global-batch, --microbatch and --dp "
                "so that they do"
            )
        if record.looped and self.virtual_stages < 2:
            raise SetupError(f"schedule {self.schedule} needs --virtual-stages 2 or more (virtual_stages, model "
                              "chunks per rank); with 1 it is plain 1f1b")  # fmt: skip
        fixed = record.stages_per_rank
        if fixed not in (None, 1) and self.virtual_stages not in (1, fixed):
            raise SetupError(f"schedule {self.schedule} holds {fixed} stages per rank: drop "
                              f"virtual_stages={self.virtual_stages} or use one of {looped}")  # fmt: skip
        self.chunk_layers(model)  # raises if the layers do not split as asked
        if self.sequence_parallel and t == 1:
            raise SetupError("sequence parallelism splits the tensor-parallel group's work: it needs tp > 1")
        if self.attention == "triton" and model.head_dim > 128:  # flash_attn_triton.py: "all head dimensions up to 128"
            raise SetupError(
                f"attention='triton' (flash-attn's first-generation Triton kernel) runs heads of up to 128, and this "
                f"model's are {model.head_dim}: use attention='flash'"
            )
        if self.cp > 1 and self.attention != "flash":  # Transformer Engine's ring attention runs FlashAttention-2
            raise SetupError("context parallelism runs ring attention on a fused kernel: use attention='flash'")
        if self.cp > 1 and model.seq % (2 * self.cp):
            raise SetupError(
                f"sequence length {model.seq} does not split into 2 x cp = {2 * self.cp} chunks (context parallelism "
                "gives each rank two chunks, one from each end, to balance the causal mask)"
            )
        if self.sequence_parallel and (self.microbatch * model.seq // self.cp) % t:
            raise SetupError(
                f"the {self.microbatch * model.seq // self.cp} tokens of a microbatch do not split over tp={t}"
            )
        if self.recompute == "op" and (model.experts or self.attention not in FUSED_ATTENTION):
            raise SetupError(
                "recompute='op' is torchtitan's op-level policy on its dense Llama with a fused attention kernel "
                "(price.op_recomputed): use a dense model and attention='flash', or recompute='full'"
            )
        if self.recompute == "op" and self.cp > 1:  # its ring attention runs the kernel once a step of the ring
            raise SetupError(
                f"recompute='op' with cp={self.cp}: what torchtitan's op-level policy keeps of context parallelism's "
                "ring attention is not modelled; use recompute='full' or 'none', or cp=1"
            )
        if self.ep > 1 and not model.experts:
            raise SetupError(f"ep={self.ep} needs a mixture-of-experts model; {model.name or 'this model'} is dense")
        if model.experts and (model.experts % self.ep or self.dp % self.ep):
            raise SetupError(f"ep={self.ep} must divide the {model.experts} experts and dp={self.dp}")
        if self.zero >= 3 and self.pp > 1:  # ZeRO-2 with pp is PyTorch's FSDP without resharding (Llama 3)
            raise SetupError(
                "ZeRO-3 gathers a layer's weights for every microbatch that pipeline parallelism keeps in flight; "
                "Megatron-LM and DeepSpeed do not combine them: use zero=1 (the distributed optimizer) or zero=2 "
                "(FSDP's sharded gradients, reduce-scattered every microbatch) with pp > 1"
            )
        if fixed == 1 and self.virtual_stages != 1:
            raise SetupError(f"schedule {self.schedule} holds one stage per rank: drop "
                              f"virtual_stages={self.virtual_stages} or use one of {looped}")  # fmt: skip
        if self.pp > MOST_STAGES:  # one simulated device a pipeline rank: beyond, minutes per step
            raise SetupError(
                f"pp={self.pp}: the what-if simulates one device a pipeline rank and takes up to {MOST_STAGES:,} "
                "(published runs use under 128): choose a smaller --pp"
            )
        passes = self.pp * self.microbatches * self.stages_per_rank
        if passes > MOST_PASSES:  # the step is simulated pass by pass: ~30 us each, and the schedule held whole
            raise SetupError(
                f"pp={self.pp} x {self.microbatches} microbatches x {self.stages_per_rank} chunks a rank is "
                f"{passes:,} forward passes to simulate, more than the {MOST_PASSES:,} the what-if takes (published "
                "runs need under 10,000): choose a smaller --pp or --global-batch, or a larger --microbatch or --dp"
            )
        try:  # a schedule's own rules on pp and the microbatches (DualPipeV's m >= 2p, the looped rounds)
            make_schedule(self.schedule, self.pp, self.microbatches, **self.schedule_options)
        except ValueError as exc:
            raise SetupError(
                f"schedule {self.schedule} with pp={self.pp} and {self.microbatches} microbatches (--global-batch "
                f"{self.global_batch} / (dp={self.dp} x --microbatch {self.microbatch})): {exc}; change --global-batch"
                " or --schedule"
            ) from None
