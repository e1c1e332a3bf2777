"""Timeline, memory, trace and animation figures of small runs: the cost model made visible.

Every run here uses a named cost model (see ``simulator.cost.presets``) and real computations (see
``programs``), so each figure's times follow from the stated assumptions.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from ...core.engine import RunResult
from ...core.files import write_text
from ...core.world import World
from ...cost.model import Ring, TwoLevel
from ...cost.presets import classroom, dgx_h100
from ...views.plot.style import FigureStyle
from ...views.textgrid import text_timeline
from ..examples import get
from . import figure
from .programs import fan_out, pipeline_forward, pipeline_two_stage, ring_pass, stream_chunks

US = 1e-6


def gpipe_run() -> RunResult:
    """Two stages, four microbatches of 250 float64 (2 kB: 1 us + 2 us per message); F 4 us, B 8 us."""
    xs = [np.arange(250, dtype=np.float64) + i for i in range(4)]
    return World(2, cost=classroom()).run(pipeline_two_stage, xs, 4 * US, 8 * US)


@figure("timeline_gpipe_two_stages.png", "timeline_gpipe_two_stages.svg")
def gpipe_two_stages(out: Path, style: FigureStyle) -> None:
    """Two-stage pipeline, 4 microbatches, all forwards then all backwards: the bubble in the middle."""
    from ...views.plot.timeline import save_timeline

    save_timeline(
        gpipe_run(),
        out / "timeline_gpipe_two_stages",
        title="Two-stage pipeline (GPipe schedule), 4 microbatches: F = forward, B = backward",
        style=style,
        height=style.max_height(),  # two rows alone would make a strip; a slide is 16:9
    )


@figure("timeline_gpipe_two_stages.txt")
def gpipe_two_stages_text(out: Path, style: FigureStyle) -> None:
    """The same pipeline as a plain-text grid (one slot = 1 us)."""
    write_text(out / "timeline_gpipe_two_stages.txt", text_timeline(gpipe_run(), dt=1 * US) + "\n")


@figure("memory_gpipe_two_stages.png", "memory_gpipe_two_stages.svg")
def gpipe_two_stages_memory(out: Path, style: FigureStyle) -> None:
    """Memory held by each stage: activations pile up during the forwards, drain during the backwards."""
    from ...views.plot.memory import save_memory

    save_memory(
        gpipe_run(),
        out / "memory_gpipe_two_stages",
        title="Memory held per device, two-stage GPipe: each stage keeps what its backward needs",
        style=style,
    )


@figure("timeline_overlap.png", "timeline_overlap.svg")
def overlap(out: Path, style: FigureStyle) -> None:
    """Blocking send vs isend: the same stream of chunks, with and without overlapping transfer and compute."""
    from ...views.plot.style import save_figure
    from ...views.plot.timeline import plot_timelines

    chunks = [np.full(1000, float(i)) for i in range(5)]  # 8 kB each: 1 us + 8 us on the wire
    world = World(2, cost=classroom(), send_mode="rendezvous")
    runs = [world.run(stream_chunks, chunks, 6 * US, overlap) for overlap in (False, True)]
    fig = plot_timelines(
        runs,
        [
            f"blocking send and recv: each transfer waits for both sides, and both wait for it ({runs[0].time / US:.0f} µs)",
            f"isend and irecv posted early: transfers run under compute ({runs[1].time / US:.0f} µs)",
        ],
        suptitle="Overlapping communication with computation (rendezvous sends)",
        style=style,
    )
    save_figure(fig, out / "timeline_overlap")


@figure("timeline_ring_pass.png", "timeline_ring_pass.svg")
def ring_pass_4(out: Path, style: FigureStyle) -> None:
    """Four devices pass blocks around a ring; each transfer hides behind the next block's work."""
    from ...views.plot.timeline import save_timeline

    run = World(4, cost=classroom()).run(ring_pass, np.ones(500), 4, 6 * US)
    save_timeline(
        run,
        out / "timeline_ring_pass",
        title="Ring pass on 4 devices: isend/irecv posted before the work, so 5 µs transfers hide behind 6 µs ops",
        style=style,
    )


@figure("timeline_ring_routing.png", "timeline_ring_routing.svg")
def ring_routing(out: Path, style: FigureStyle) -> None:
    """Ring topology: one device sends to all others; far ones wait for hops and for the shared first link."""
    from ...views.plot.timeline import save_timeline

    cost = replace(classroom(), topology=Ring(), name="classroom ring")
    targets = {0: [1, 2, 3, 4, 7, 6, 5]}
    run = World(8, cost=cost).run(fan_out, np.ones(250), targets, 2 * US)
    save_timeline(
        run,
        out / "timeline_ring_routing",
        title="Ring of 8: device 0 sends 2 kB to everyone. Messages to 1-4 share the link 0->1, to 5-7 the link 0->7",
        style=style,
    )


@figure("timeline_two_level.png", "timeline_two_level.svg")
def two_level(out: Path, style: FigureStyle) -> None:
    """Two nodes of four GPUs: NVLink inside a node, one InfiniBand port per GPU between nodes."""
    from ...views.plot.timeline import save_timeline

    h100 = dgx_h100()
    topo = h100.topology
    cost = replace(h100, topology=TwoLevel(4, topo.inter_latency, topo.inter_bandwidth), name="DGX H100 links")
    # GPU 0 sends to GPU 1 (same node) and to GPUs 4, 5, 6 (other node, all through its one port);
    # GPU 3 sends to GPU 7 through its own port at the same time; GPUs 1, 2 pass on inside the node
    targets = {0: [1, 4, 5, 6], 1: [2], 2: [3], 3: [7]}
    shard = np.zeros(2_000_000)  # 16 MB of float64
    run = World(8, cost=cost, keep_payloads=False).run(fan_out, shard, targets, 40 * US)
    save_timeline(
        run,
        out / "timeline_two_level",
        title=f"2 nodes x 4 GPUs, 16 MB messages: {cost.message_time(shard.nbytes, 0, 1) / US:.0f} µs over NVLink, "
        f"{cost.message_time(shard.nbytes, 0, 4) / US:.0f} µs over InfiniBand;\n"
        "GPU 0's three messages to the other node queue on its port, GPU 3's goes through its own port",
        style=style,
    )


@figure("timeline_pipeline_64.png", "timeline_pipeline_64.svg")
def pipeline_64(out: Path, style: FigureStyle) -> None:
    """A forward pass through 64 pipeline stages with 8 microbatches: the fill and drain bubbles at scale."""
    from ...views.plot.style import save_figure
    from ...views.plot.timeline import plot_timeline

    xs = [np.arange(100, dtype=np.float64) + i for i in range(8)]
    run = World(64, cost=classroom()).run(pipeline_forward, xs, 4 * US)
    busy = 8 * 4 * US / run.time
    fig = plot_timeline(
        run,
        title=f"64 pipeline stages, 8 microbatches (forward only): each device works 8 x 4 µs of the {run.time / US:.0f} "
        f"µs run, {busy:.0%}; the hatched triangles are the bubble",
        arrows=False,
        style=style,
    )
    ax = fig.axes[0]
    words = {"fontsize": 10, "fontweight": "bold", "color": "#444444", "ha": "center", "va": "center"}
    ax.text(
        0.27 * run.time, 46, "the pipeline fills:\ndevice r waits for r stages\nbefore its first microbatch", **words
    )
    ax.text(0.73 * run.time, 16, "it drains: device r idles\nonce microbatch 7 has passed", **words)
    save_figure(fig, out / "timeline_pipeline_64")


@figure("timeline_seed_split_vs_bug.png", "timeline_seed_split_vs_bug.svg")
def seed_split_vs_bug(out: Path, style: FigureStyle) -> None:
    """The seed example: A computes 2x + 1 and sends it to B; the bug sends the raw input instead."""
    from ...views.plot.style import save_figure
    from ...views.plot.timeline import plot_timelines

    runs = [get(name).run().result for name in ("split", "wrong-input")]
    fig = plot_timelines(
        runs,
        [
            f"split: A's output crosses, B returns {runs[0].outputs[1][0]:g}",
            f"wrong input: the raw x crosses (same timing!), B returns {runs[1].outputs[1][0]:g}",
        ],
        suptitle="Two stages on two devices, input 3: the timeline is identical, the value that crosses is not",
        style=style,
    )
    save_figure(fig, out / "timeline_seed_split_vs_bug")


@figure("animation_ring_pass.gif")
def ring_pass_animation(out: Path, style: FigureStyle) -> None:
    """Animated messages of the 4-device ring pass, for slides."""
    from ...views.plot.animation import animate_messages

    def own_block(dev):  # device r starts with a block of (r + 1)s: each value says whose block it is
        return ring_pass(dev, np.full(500, dev.rank + 1.0), 3, 6 * US)

    run = World(4, cost=classroom()).run(own_block)
    animate_messages(
        run,
        out / "animation_ring_pass.gif",
        title="Ring pass: each step, every device sends its block right",
        style=style,
    )


@figure("animation_gpipe_two_stages.gif")
def gpipe_animation(out: Path, style: FigureStyle) -> None:
    """Animated messages of the two-stage pipeline: activations go right, gradients come back."""
    from ...views.plot.animation import animate_messages

    animate_messages(
        gpipe_run(), out / "animation_gpipe_two_stages.gif", title="Two-stage pipeline (GPipe)", style=style
    )
