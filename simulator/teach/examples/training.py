"""Training-step scenarios: pipeline schedules, data parallelism, ZeRO, the 3-D step, and four bugs.

Every scenario runs one training step of a small MLP (``simulator.parallel.mlp``) with real
arithmetic and checks it against the same step on one device. The bugs:

- labels-off-by-one:     the last stage pairs microbatch i's activations with microbatch i-1's labels
- wrong-upstream-stage:  a wiring table sends stage 0's output to stage 2, which should get stage 1's
- dp-sum-not-average:    the replicas sum their gradients but forget to divide by their number
- 1f1b-blocking-deadlock: a hand-written 1F1B schedule where both stages send first, with
                          rendezvous sends: the simulator names the cycle of waiting devices

The first three run to the end and only the check shows them, at the first value that differs,
saying which value it holds instead; the last stops with a DeadlockError.
"""

from __future__ import annotations

import numpy as np

from ...checker import ALL, Reference, Split
from ...core.device import Device
from ...core.world import World
from ...parallel import mlp as M
from ...parallel.compose import Parallel3D
from ...parallel.data import BucketedAllReduce, DataParallel
from ...parallel.mlp import MLP, mb, split_rows
from ...parallel.pipeline import FREE_LINKS, ActionCosts, Pipeline
from ...parallel.pipeline_split import pipeline_split, stage_split
from ...parallel.schedules import Schedule, make_schedule
from ...parallel.zero import ZeRO
from ...tensors.mesh import DeviceMesh
from ..scenario import Scenario

MODEL = MLP((3, 4, 4, 4, 2))  # four layers: one per stage on four devices
PARAMS = MODEL.init(seed=0)
X, T = MODEL.data(8, seed=1)
MICROBATCHES = 4
COSTS = ActionCosts.equal(1e-6, 2e-6)  # a forward 1 us, a backward 2 us: the timeline reads in units


def pipeline(name: str, ranks: int = 4, microbatches: int = MICROBATCHES, **options) -> Pipeline:
    costs = ActionCosts(1e-6, 1e-6, 1e-6) if name == "zb-h1" else COSTS
    return Pipeline(MODEL, make_schedule(name, ranks, microbatches, **options), costs=costs)


def _pipeline_ref(pipe: Pipeline) -> Reference:
    return pipe.reference(PARAMS, X, T)


# ---- bug 1: labels of the wrong microbatch -----------------------------------------------------
def labels_off_by_one(dev: Device, pipe: Pipeline, params, x, t):
    """The last stage's data loader is one microbatch behind the first stage's: it reads the labels
    in a different order, so microbatch i's activations meet microbatch i-1's labels."""
    rows = split_rows(x.shape[0], pipe.schedule.microbatches)[0].stop
    shifted = np.roll(t, rows, axis=0)  # BUG: the labels of microbatch i are now those of i - 1
    return pipe(dev, params, x, shifted)


# ---- bug 2: a stage receives from the wrong stage ---------------------------------------------
UPSTREAM_OK = {1: 0, 2: 1}  # stage -> the stage whose output it takes
UPSTREAM_BUG = {1: 0, 2: 0}  # BUG: stage 2 is wired to stage 0


def forward_by_table(dev: Device, mlp: MLP, params, x, t, microbatches: int, upstream: dict[int, int]):
    """A three-stage forward pass (layer k + 1 on device k) wired by a table of upstream stages.

    Each stage sends its output to every stage that names it as upstream, and receives from its own
    upstream: both ends read the same table, so a wrong entry gives no error, only a wrong input.
    """
    k = dev.rank + 1
    W, b = dev.hold(f"W{k}", params[f"W{k}"]), dev.hold(f"b{k}", params[f"b{k}"])
    downstream = [s for s, up in upstream.items() if up == dev.rank]
    outputs = []
    for i, rows in enumerate(split_rows(x.shape[0], microbatches)):
        if dev.rank == 0:
            h = dev.hold(mb("x", i), x[rows])
        else:
            shape = (rows.stop - rows.start, mlp.widths[k - 1])
            h = dev.recv(upstream[dev.rank], tag=i, shape=shape, dtype=np.float64, name=mb(M.act_name(k - 1), i))
        h = dev.compute(mb(f"h{k}", i), mlp.forward_op(k), h, W, b)
        for s in downstream:
            dev.send(h, s, tag=i)
        outputs.append(h)
    return outputs if dev.rank == len(mlp.widths) - 2 else None  # the last stage returns the prediction


def forward_reference(dev: Device, mlp: MLP, params, x, microbatches: int) -> list:
    """The same forward pass on one device, with the same names; returns each microbatch's prediction."""
    weights = [
        (dev.hold(f"W{k}", params[f"W{k}"]), dev.hold(f"b{k}", params[f"b{k}"])) for k in range(1, mlp.layers + 1)
    ]
    outputs = []
    for i, rows in enumerate(split_rows(x.shape[0], microbatches)):
        h = dev.hold(mb("x", i), x[rows], doc=f"the inputs of microbatch {i}")
        for k, (W, b) in enumerate(weights, start=1):
            h = dev.compute(mb(f"h{k}", i), mlp.forward_op(k), h, W, b, doc=f"layer {k}'s output for microbatch {i}")
        outputs.append(h)
    return outputs


THREE = MLP((3, 4, 4, 2))
X3, T3 = THREE.data(4, seed=2)
PARAMS3 = THREE.init(seed=3)


# ---- bug 3: gradients summed, not averaged ------------------------------------------------------
class SumWithoutAverage(BucketedAllReduce):
    """DDP without the division: each replica's mean gradient is summed over the replicas."""

    def reduce(self, name, summed, index):
        return self.dev.compute(
            name, lambda s: s, summed, seconds=self.extra_seconds, index=index
        )  # BUG: no "/ replicas"


DP = DataParallel(MODEL, 2, microbatches=2)
DP_SUM = DataParallel(MODEL, 2, microbatches=2, sync_class=SumWithoutAverage)


# ---- bug 4: a hand-written schedule that deadlocks with rendezvous sends ----------------------
HAND_WRITTEN_1F1B = Schedule.from_text(
    [
        "0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1",
        "1RECV_F0 1F0 1B0 1SEND_B0 1RECV_F1 1F1 1B1 1SEND_B1",
    ],
    microbatches=2,
    name="hand-written 1F1B",
)
TWO = MLP((3, 4, 2))
X2, T2 = TWO.data(4, seed=4)
PARAMS2 = TWO.init(seed=5)
MESH = DeviceMesh.grid((2, 2, 2), ("dp", "pp", "tp"))
STEP_3D = Parallel3D(MLP((3, 8, 4, 8, 2)), MESH, "1f1b", microbatches=2)
PARAMS_3D = STEP_3D.mlp.init(seed=6)
X_3D, T_3D = STEP_3D.mlp.data(8, seed=7)
ZERO3 = ZeRO(MLP((4, 4, 4, 4)), 4, stage=3)  # 20 parameters per layer: 5 per replica
PARAMS_Z = ZERO3.mlp.init(seed=8)
X_Z, T_Z = ZERO3.mlp.data(8, seed=9)

# replicas of the whole model: gradients cross only inside their bucketed all-reduce
# The classroom model, whose ops take nanoseconds beside 1 us messages: as on real CPU processes, no gradient
# chunk arrives during the backward, so the overlapped all-reduce adds its chunks in the same order here and
# there (the torch tests compare the two op for op).
REPLICAS_WORLD = World(2, cost="classroom")
REPLICAS_SPLIT = Split(collectives=("bucket all_reduce", "all_reduce"), crosses={})  # native on real ranks


def _schedule_step(name: str, title: str, story: str, schedule: str, **options) -> Scenario:
    """One training step of the four-layer MLP under a pipeline schedule (``pipeline``), on links that cost
    nothing: the stages split as the schedule places them, the gradients checked against one device."""
    pipe = pipeline(schedule, **options)
    ranks = pipe.schedule.ranks
    return Scenario(
        name=name,
        title=title,
        story=story,
        world=World(ranks, cost=FREE_LINKS),
        program=pipe,
        args=(PARAMS, X, T),
        reference=lambda: _pipeline_ref(pipe),
        tags=("pipeline", "training"),
        split=pipeline_split(pipe),
    )


SCENARIOS = [
    _schedule_step(
        "pipeline-1f1b",
        "1F1B pipeline: four stages, four microbatches, real forward and backward",
        "Each device holds one layer. Microbatches flow forward through the stages and their gradients flow "
        "back; after a short warm-up every device alternates one forward and one backward, so device r never "
        "keeps more than 4 - r microbatches' activations. The summed gradients equal one device's.",
        "1f1b",
    ),
    _schedule_step(
        "pipeline-gpipe",
        "GPipe pipeline: all forwards, then all backwards",
        "The same step with GPipe's order: the same bubble as 1F1B, but every device keeps all four "
        "microbatches' activations until the backwards begin.",
        "gpipe",
    ),
    _schedule_step(
        "pipeline-zb-h1",
        "ZB-H1 pipeline: the backward split into input and weight gradients",
        "The input-gradient pass (I) goes back at once; the weight-gradient pass (W) waits and fills the "
        "idle slots at the end, so the bubble shrinks to a third of 1F1B's when F, I and W take equal time.",
        "zb-h1",
    ),
    _schedule_step(
        "pipeline-interleaved",
        "Interleaved 1F1B: two devices, two stages each",
        "Device 0 holds layers 1 and 3, device 1 layers 2 and 4: each microbatch crosses between the "
        "devices three times, and the bubble is half of plain 1F1B's on two devices.",
        "interleaved-1f1b",
        ranks=2,
        virtual=2,
    ),
    Scenario(
        name="data-parallel",
        split=REPLICAS_SPLIT,
        title="Data parallelism: two replicas, gradients all-reduced and averaged",
        story="Both devices hold the whole model and take half of the batch each. Each computes the mean "
        "gradient over its half; a ring all-reduce sums them and each divides by two: the whole batch's "
        "gradient, as on one device.",
        world=REPLICAS_WORLD,
        program=DP,
        args=(PARAMS, X, T),
        reference=lambda: DP.reference(PARAMS, X, T),
        tags=("data", "training"),
    ),
    Scenario(
        name="zero-3",
        split=Split(collectives=("all_gather", "reduce_scatter"), crosses={}),
        title="ZeRO stage 3: parameters, gradients and optimizer state sharded over four replicas",
        story="Each device keeps a quarter of every layer's parameters and Adam state. Before using a layer it "
        "gathers the layer from all four, and frees it right after; gradients are reduce-scattered so each "
        "device updates its quarter. The new parameters equal one device's Adam step.",
        world=World(4),
        program=ZERO3,
        args=(PARAMS_Z, X_Z, T_Z),
        reference=lambda: ZERO3.reference(PARAMS_Z, X_Z, T_Z),
        tags=("data", "zero", "training"),
    ),
    Scenario(
        name="3d-step",
        split=Split(collectives=("all_reduce", "bucket all_reduce"), crosses={"h*": ALL, "dh*": ALL}),
        title="Data, pipeline and tensor parallelism on 2 x 2 x 2 devices",
        story="Two replicas, each a two-stage pipeline, each stage a pair of layers split over two devices. "
        "Three kinds of messages (tensor all-reduces, pipeline sends, gradient all-reduces), one step, and "
        "every gradient equal to one device's.",
        # the classroom model, as for data-parallel: no gradient chunk arrives during the backward, as on
        # real CPU processes, so the overlapped all-reduces add their chunks in the same order on both
        world=World(8, cost="classroom"),
        program=STEP_3D,
        args=(PARAMS_3D, X_3D, T_3D),
        reference=lambda: STEP_3D.reference(PARAMS_3D, X_3D, T_3D),
        tags=("data", "pipeline", "tensor", "training"),
    ),
    Scenario(
        name="labels-off-by-one",
        split=pipeline_split(pipeline("1f1b")),
        title="Bug: microbatch i's activations meet microbatch i-1's labels",
        story="The first stage reads the inputs in order; the last stage reads the labels one microbatch "
        "behind. Every op runs and a loss comes out, but it is the loss of mismatched pairs. The check stops "
        "at the first labels the last device holds, for microbatch 0: they are microbatch 3's (the loader "
        "wrapped round), and every later microbatch is paired with its predecessor's labels.",
        world=World(4, cost=FREE_LINKS),
        program=labels_off_by_one,
        args=(pipeline("1f1b"), PARAMS, X, T),
        reference=lambda: _pipeline_ref(pipeline("1f1b")),
        expect="diverge",
        tags=("pipeline", "bug", "training"),
    ),
    Scenario(
        name="wrong-upstream-stage",
        split=stage_split([(1, 1), (2, 2), (3, 3)], [0, 1, 2], 3),
        title="Bug: stage 2 receives stage 0's output instead of stage 1's",
        story="A wiring table says which stage feeds which. One wrong entry makes device 0 send its output to "
        "device 2 as well, and device 2 takes it as its input. Nothing fails; the check points at the message "
        "and says what it carries: layer 1's output, where layer 2's was due.",
        world=World(3),
        program=forward_by_table,
        args=(THREE, PARAMS3, X3, T3, 2, UPSTREAM_BUG),
        reference=lambda: Reference.of(forward_reference, THREE, PARAMS3, X3, 2),
        expect="diverge",
        tags=("pipeline", "bug"),
    ),
    Scenario(
        name="dp-sum-not-average",
        split=REPLICAS_SPLIT,
        title="Bug: data-parallel gradients summed but not averaged",
        story="Each replica computes the mean gradient over its half of the batch; the all-reduce sums the two "
        "means, and the division by two is missing. The step's gradient comes out twice too large, which "
        "training would feel as a doubled learning rate. The check recognises the sum.",
        world=REPLICAS_WORLD,
        program=DP_SUM,
        args=(PARAMS, X, T),
        reference=lambda: DP_SUM.reference(PARAMS, X, T),
        expect="diverge",
        tags=("data", "bug", "training"),
    ),
    Scenario(
        name="1f1b-blocking-deadlock",
        split=pipeline_split(Pipeline(TWO, HAND_WRITTEN_1F1B, costs=COSTS)),
        title="Bug: both stages send first, with rendezvous sends",
        story="A hand-written 1F1B schedule on two devices runs its sends as blocking sends. In the steady state "
        "device 0 sends microbatch 1's activation while device 1 sends microbatch 0's gradient; with "
        "rendezvous sends each waits for the other to receive, forever. The simulator names the cycle "
        "(and Schedule.validate(blocking_sends=True) finds it before running).",
        world=World(2, send_mode="rendezvous", cost=FREE_LINKS),
        program=Pipeline(TWO, HAND_WRITTEN_1F1B, costs=COSTS, blocking_sends=True),
        args=(PARAMS2, X2, T2),
        expect="error",
        tags=("pipeline", "bug", "deadlock"),
    ),
]
