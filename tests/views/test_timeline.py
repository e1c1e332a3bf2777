"""Timelines: activity spans, the text grid, memory over time, and the matplotlib pictures."""

import subprocess
import sys

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.image import AxesImage, imread
from matplotlib.patches import FancyArrowPatch

from simulator import CostModel, World
from simulator.cost.presets import classroom
from simulator.teach.figures.programs import fan_out, pipeline_forward, pipeline_two_stage, ring_pass
from simulator.views.activity import activity
from simulator.views.memory import memory_timeline, over_capacity
from simulator.views.plot.animation import animate_messages, frame_times
from simulator.views.plot.memory import plot_memory
from simulator.views.plot.style import save_figure
from simulator.views.plot.timeline import plot_timeline, plot_timelines, save_timeline
from simulator.views.textgrid import text_timeline

US = 1e-6


def two_step(dev):
    """A (3 us) on device 0, its 2 kB output crosses (1 us + 2 us), B (2 us) on device 1."""
    if dev.rank == 0:
        y = dev.compute("A", lambda: np.ones(250), seconds=3 * US)
        dev.send(y, 1)
    else:
        h = dev.recv(0, name="h")
        dev.compute("B", lambda h: h * 2, h, seconds=2 * US)


@pytest.fixture(scope="module")
def gpipe():
    xs = [np.arange(250, dtype=np.float64) + i for i in range(4)]
    return World(2, cost=classroom()).run(pipeline_two_stage, xs, 4 * US, 8 * US)


# ---- activity ---------------------------------------------------------------------------------


def test_gpipe_program_computes_the_right_values(gpipe):
    xs = [np.arange(250, dtype=np.float64) + i for i in range(4)]
    for i, x in enumerate(xs):
        np.testing.assert_array_equal(gpipe.outputs[1][i], (2 * x + 1) ** 2)
        np.testing.assert_array_equal(gpipe.outputs[0][i], 4 * (2 * x + 1))  # dx = 2 * dh = 2 * 2h


def test_spans_are_the_booked_link_occupation(gpipe):
    act = activity(gpipe)
    wire = 2000 / 1e9
    for span in act.spans:
        m = span.record
        if span.track == "send":
            assert (span.t0, span.t1) == pytest.approx((m.t_start, m.t_start + wire), rel=1e-12)
        elif span.track == "recv":
            assert (span.t0, span.t1) == pytest.approx((m.t_arrive - wire, m.t_arrive), rel=1e-12)
        else:
            assert (span.t0, span.t1) == (m.t_start, m.t_end)
    assert len(act.of(0, "compute")) == 8 and len(act.of(1, "send")) == 4
    assert len(act.messages) == 8


def test_bare_trace_spans_cover_the_whole_flight(gpipe):
    act = activity(gpipe.trace)  # no cost model
    m = gpipe.trace.messages[0]
    send = next(s for s in act.spans if s.track == "send" and s.record is m)
    assert (send.t0, send.t1) == (m.t_start, m.t_arrive)


def test_gpipe_bubble_is_where_the_closed_form_says(gpipe):
    """Device 0 idles from its last forward (4 x 4 us) until dh0 arrives: 7 + 4 x 4 + 8 + 3 = 34 us."""
    act = activity(gpipe)
    gaps = act.idle_gaps(0)
    assert gaps == [pytest.approx((16 * US, 34 * US), rel=1e-9)]
    assert act.idle_gaps(1)[0] == pytest.approx((0.0, 7 * US), rel=1e-9)
    assert act.busy(0) == pytest.approx(4 * 4 * US + 4 * 8 * US, rel=1e-9)
    assert gpipe.time == pytest.approx(66 * US, rel=1e-9)


def test_lanes_never_overlap():
    cost = CostModel(latency=US, bandwidth=1e9)
    run = World(5, cost=cost).run(fan_out, np.ones(100), {0: [1, 2, 3, 4], 1: [0], 2: [0], 3: [0]}, US)
    act = activity(run)
    assert act.lanes[(0, "send")] == 4 and act.lanes[(0, "recv")] == 3
    by_lane = {}
    for s in act.spans:
        by_lane.setdefault((s.rank, s.track, s.lane), []).append(s)
    for spans in by_lane.values():
        spans.sort(key=lambda s: s.t0)
        assert all(a.t1 <= b.t0 for a, b in zip(spans, spans[1:]))


def test_activity_rejects_other_things():
    with pytest.raises(TypeError, match="expected a RunResult"):
        activity([1, 2, 3])


def test_a_scenario_run_passed_to_a_plot_is_told_where_its_run_is():
    from simulator import scenario

    with pytest.raises(TypeError, match=r"pass its \.result"):
        activity(scenario("split").run())
    with pytest.raises(TypeError, match=r"stopped with DeadlockError; pass \.error\.partial"):
        activity(scenario("send-send-deadlock").run())


# ---- text grid --------------------------------------------------------------------------------


def test_text_grid_exact():
    run = World(2, cost=classroom()).run(two_step)
    assert text_timeline(run, dt=US, legend=False) == "\n".join(
        [
            "time (us) 0",
            "device 0  A==>>...",
            "device 1  ...-<<B=",  # "-": the message is on its way (its latency)
        ]
    )
    half = text_timeline(run, width=30).splitlines()
    assert half[:3] == ["time (us) 0         5", "device 0  A=====>>>>......", "device 1  ......--<<<<B==="]
    assert half[3].startswith("one slot = 0.5 us")


def test_text_grid_of_a_pipeline_shows_the_bubble(gpipe):
    lines = text_timeline(gpipe, dt=US).splitlines()
    assert lines[1] == "device 0  F0==F1==F2==F3==>>.............-<<B0======B1======B2======B3======"
    assert lines[2] == "device 1  ....-<<F0==F1==F2==F3==B0======B1======B2======B3======>>........."


def test_text_grid_rejects_bad_sizes(gpipe):
    with pytest.raises(ValueError, match="at least one column"):
        text_timeline(gpipe, width=0)
    with pytest.raises(ValueError, match="must be > 0 seconds"):
        text_timeline(gpipe, dt=0)


def test_text_modules_do_not_import_matplotlib():
    code = (
        "import sys, numpy as np\n"
        "import simulator, simulator.views.textgrid, simulator.views.memory, simulator.cost.presets, simulator.views.plot.chrome_trace\n"
        "from simulator import World\n"
        "def p(dev):\n"
        "    dev.send(np.ones(2), 1) if dev.rank == 0 else dev.recv(0)\n"
        "r = World(2).run(p)\n"
        "simulator.views.textgrid.text_timeline(r); simulator.views.plot.chrome_trace.chrome_trace(r)\n"
        "assert 'matplotlib' not in sys.modules, 'matplotlib was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=_root())


# ---- memory over time -------------------------------------------------------------------------


def test_memory_of_the_pipeline(gpipe):
    mem = memory_timeline(gpipe)
    kb = 2000
    # device 0 at t=0: x0 and F0's output; F0 is freed after its send, then x1 and F1 arrive at 4 us
    assert mem.at(0, 0.0) == 2 * kb
    assert mem.at(0, 4 * US) == 3 * kb
    # device 1 holds h0..h3 and F0..F3 once the forwards are done: 8 values
    assert mem.peak(1) == 9 * kb  # plus B0's output
    assert mem.at(0, gpipe.time) == 0 and mem.at(1, gpipe.time) == 0
    assert set(mem.biggest[1]) == {f"h{i}" for i in range(4)} | {f"F{i}" for i in range(4)} | {"B0"}


def test_memory_without_payloads_is_the_same(gpipe):
    xs = [np.arange(250, dtype=np.float64) + i for i in range(4)]
    lean = World(2, cost=classroom(), keep_payloads=False).run(pipeline_two_stage, xs, 4 * US, 8 * US)
    a, b = memory_timeline(gpipe), memory_timeline(lean)
    assert (a.times, a.held) == (b.times, b.held)


def test_memory_rules_keep_replace_unnamed():
    def prog(dev):
        if dev.rank == 0:
            dev.hold("w", np.zeros(10))  # 80 B
            dev.compute("tmp", lambda: np.zeros(100), seconds=US, keep=False)  # not stored
            dev.hold("w", np.zeros(20))  # replaces: 160 B
            dev.send(np.zeros(5), 1)
            dev.send(np.zeros(7), 1)
        else:
            dev.recv(0, name="got")  # 40 B stored
            dev.recv(0)  # unnamed: not in memory
        return dict(dev.memory)

    run = World(2, cost=classroom()).run(prog)
    mem = memory_timeline(run)
    assert mem.held[0] == [80, 160] and mem.peak(0) == 160
    assert mem.held[1][-1] == 40
    assert sum(v.nbytes for v in run.outputs[1].values()) == 40  # what dev.memory really held


def test_over_capacity_names_device_and_values(gpipe):
    assert over_capacity(gpipe) == []  # classroom: unlimited
    small = CostModel(latency=US, bandwidth=1e9, flops=1e9, memory=15_000)
    lines = over_capacity(gpipe.trace, small)
    assert len(lines) == 1 and lines[0].startswith("device 1 holds 18 kB")
    assert "over its capacity of 15 kB" in lines[0] and "h0 (2 kB)" in lines[0]


# ---- matplotlib timeline ----------------------------------------------------------------------


def test_timeline_has_a_row_per_device_a_box_per_op_an_arrow_per_message(gpipe):
    fig = plot_timeline(gpipe, title="gpipe")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["device 0", "device 1"]
    boxes = [c for c in ax.collections if isinstance(c, PolyCollection)]
    idle, ops, comm = boxes
    assert len(idle.get_paths()) == 2 and len(ops.get_paths()) == 16 and len(comm.get_paths()) == 16
    assert sum(isinstance(p, FancyArrowPatch) for p in ax.patches) == 8
    labels = {t.get_text() for t in ax.texts}
    assert {"F0", "F3", "B0", "B3"} <= labels  # microbatch labels fit at this size
    assert ax.get_xlabel() == "time (µs)"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["F", "B", "idle", "sending", "receiving", "message"]


def test_ops_of_no_time_do_not_use_up_the_colours():
    """Zero-time ops are not drawn; were they given palette colours first, drawn families would share one."""

    def many_families(dev):  # h and dh take time; between them, eleven families of none (running sums, say)
        dev.compute("h", lambda: np.zeros(1), seconds=1 * US)
        for i in range(11):
            dev.compute("+".join(["s"] * (i + 1)), lambda: np.zeros(1), seconds=0.0)
        dev.compute("dh", lambda: np.zeros(1), seconds=1 * US)

    fig = plot_timeline(World(1).run(many_families))
    ax = fig.axes[0]
    ops = [c for c in ax.collections if isinstance(c, PolyCollection)][1]
    drawn = [tuple(f) for f, p in zip(ops.get_facecolors(), ops.get_paths()) if np.ptp(p.vertices[:, 0]) > 0]
    assert len(drawn) == 2 and drawn[0] != drawn[1]
    handles = ax.get_legend().legend_handles
    assert [h.get_label() for h in handles[:2]] == ["h", "dh"]
    assert handles[0].get_facecolor() != handles[1].get_facecolor()


def test_timeline_time_unit_follows_the_run():
    cost = CostModel(latency=1e-3, bandwidth=1e6, flops=1e9)
    run = World(2, cost=cost).run(two_step)
    assert plot_timeline(run).axes[0].get_xlabel() == "time (ms)"


def test_timeline_at_64_devices_stays_readable():
    xs = [np.arange(10, dtype=np.float64) + i for i in range(8)]
    run = World(64, cost=classroom()).run(pipeline_forward, xs, 4 * US)
    np.testing.assert_array_equal(run.outputs[63][0], xs[0] + 64 * 65 / 2)
    fig = plot_timeline(run)
    ax = fig.axes[0]
    assert fig.get_figheight() <= 16
    assert len(ax.get_yticklabels()) == 16  # every 4th device named
    lines = [c for c in ax.collections if isinstance(c, LineCollection)]
    assert len(lines) == 1 and len(lines[0].get_segments()) == len(run.trace.messages) == 63 * 8


def test_message_values_label_small_teaching_runs():
    def prog(dev):
        if dev.rank == 0:
            dev.send(dev.compute("A", lambda: np.array([7.0]), seconds=US), 1)
        else:
            dev.recv(0)

    fig = plot_timeline(World(2, cost=classroom()).run(prog))
    assert "7" in {t.get_text() for t in fig.axes[0].texts}


def test_stacked_timelines_share_the_time_axis(gpipe):
    short = World(2, cost=classroom()).run(two_step)
    fig = plot_timelines([gpipe, short], ["long", "short"], suptitle="both")
    assert [ax.get_title(loc="left") for ax in fig.axes] == ["long", "short"]
    assert fig.axes[0].get_xlim() == fig.axes[1].get_xlim()
    with pytest.raises(ValueError, match="one title per run"):
        plot_timelines([gpipe], ["a", "b"])


def test_png_and_svg_have_content_and_are_stable(gpipe, tmp_path):
    paths = save_timeline(gpipe, tmp_path / "t", title="gpipe")
    assert [p.suffix for p in paths] == [".png", ".svg"]
    img = imread(paths[0])
    assert img.shape[0] > 300 and img.shape[1] > 1000 and img[..., :3].std() > 0.05
    svg = paths[1].read_text()
    assert "device 1" in svg and "F3" in svg and "time (µs)" in svg
    again = save_timeline(gpipe, tmp_path / "u", title="gpipe")
    assert again[1].read_bytes() == paths[1].read_bytes()
    assert again[0].read_bytes() == paths[0].read_bytes()


# ---- memory plot, animation -------------------------------------------------------------------


def test_memory_plot_lines_and_heatmap(gpipe, tmp_path):
    ax = plot_memory(gpipe, cost=CostModel(memory=30_000)).axes[0]
    assert len(ax.get_lines()) >= 2 * 2  # a step line and a peak mark per device
    assert "capacity" in [t.get_text() for t in ax.get_legend().get_texts()]
    run = World(12, cost=classroom()).run(ring_pass, np.ones(10), 2, US)
    fig = plot_memory(run)
    assert any(isinstance(a, AxesImage) for a in fig.axes[0].get_images())
    (png,) = save_figure(fig, tmp_path / "m", formats=("png",))
    assert imread(png)[..., :3].std() > 0.05


def test_animation_shows_every_message(gpipe, tmp_path):
    from PIL import Image

    times = frame_times(gpipe, frames=4)
    for m in gpipe.trace.messages:
        assert any(m.t_start <= t <= m.t_arrive for t in times)
    path = animate_messages(gpipe, tmp_path / "a.gif", frames=4, title="gpipe")
    with Image.open(path) as im:
        assert im.n_frames > 4 and im.size[0] > 300


def _root():
    from pathlib import Path

    return Path(__file__).resolve().parents[2]


def test_timeline_command(capsys):
    from simulator.cli.main import main

    assert main(["timeline", "split", "--width", "40"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("device 0  A") and out[2].startswith("device 1  .") and "B" in out[2]
    assert main(["timeline", "no-such-scenario"]) == 2
    assert "no scenario named" in capsys.readouterr().err


def test_the_ring_animation_s_labels_never_overlap(tmp_path, monkeypatch):
    """Four messages cross the ring's middle at once: their labels go outside the ring, and one that would still
    overlap another is left off (its dot stays). Every frame's shown labels, as drawn, are apart."""
    from simulator.views.plot import animation

    frames = []

    def recorded(fig, labels):
        shown = layout(fig, labels)
        frames.append(shown)
        return shown

    layout = animation.label_layout
    monkeypatch.setattr(animation, "label_layout", recorded)
    run = World(4, cost=classroom()).run(lambda dev: ring_pass(dev, np.full(500, dev.rank + 1.0), 3, 6e-6))
    animate_messages(run, tmp_path / "ring.gif", frames=8)  # the middle of every message is a frame too
    assert frames and max(len(shown) for shown in frames) == 4  # all four crossing at once keep their labels
    for shown in frames:
        assert not any(a.overlaps(b) for i, a in enumerate(shown) for b in shown[i + 1 :])


def test_label_layout_leaves_off_a_label_that_would_cover_another():
    import matplotlib.pyplot as plt

    from simulator.views.plot.animation import label_layout

    fig = plt.figure(figsize=(4, 3))
    fig.canvas.draw()
    labels = [fig.text(0.5, 0.5, "[1, 1, 1, ...]"), fig.text(0.52, 0.5, "[2, 2, 2, ...]"), fig.text(0.1, 0.1, "far")]
    shown = label_layout(fig, labels)
    assert [lab.get_text() for lab in labels] == ["[1, 1, 1, ...]", "", "far"] and len(shown) == 2
    plt.close(fig)
