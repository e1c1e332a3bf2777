"""Figures for slides and papers: pixel widths, legends that list only what appears, shared scales,
microbatch labels in blocks, and figures that show themselves in Jupyter."""

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from matplotlib.image import imread

from simulator import World
from simulator.cost.presets import classroom
from simulator.teach.examples import get
from simulator.views.plot import jupyter
from simulator.views.plot.memory import plot_memory, shared_scales
from simulator.views.plot.style import PAPER, SLIDE, SimFigure, figure_style, save_figure
from simulator.views.plot.timeline import plot_timeline, plot_timelines


def compute_only(dev):
    return dev.compute("A", lambda: np.ones(3), seconds=1e-6)


def legend_labels(fig):
    return [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]


@pytest.mark.parametrize("style", ["paper", "slide"])
def test_every_style_saves_at_least_1600_px(tmp_path, style):
    fig = plot_timeline(get("split").run().result, style=style)
    (png,) = save_figure(fig, tmp_path / "t", ("png",))
    assert imread(png).shape[1] == figure_style(style).pixels >= 1600


def test_slide_text_is_larger_relative_to_the_figure():
    assert SLIDE.width < PAPER.width and SLIDE.pixels >= PAPER.pixels  # same points, fewer inches: larger text
    with pytest.raises(ValueError, match="choose one of paper, slide"):
        figure_style("poster")


def test_legend_lists_only_what_appears():
    alone = plot_timeline(World(2, cost=classroom()).run(compute_only))
    assert legend_labels(alone) == ["A"]  # no idle, no messages: no entries for them
    split = legend_labels(plot_timeline(get("split").run().result))
    assert {"idle", "sending", "receiving", "message"} <= set(split)
    no_arrows = legend_labels(plot_timeline(get("split").run().result, arrows=False))
    assert "message" not in no_arrows
    from simulator.parallel.measure import op_kind

    pipeline = legend_labels(plot_timeline(get("pipeline-1f1b").run().result, color_key=op_kind))
    assert "forward" in pipeline and "gradient sync and optimizer" not in pipeline  # those ops take no time here


def test_stacked_panels_share_one_legend_of_what_any_shows():
    runs = [World(2, cost=classroom()).run(compute_only), get("split").run().result]
    fig = plot_timelines(runs, ["alone", "split"])
    assert sum(1 for ax in fig.axes if ax.get_legend()) == 1
    assert {"A", "B", "message"} <= set(legend_labels(fig))


def test_pipeline_blocks_are_labelled_with_pass_and_microbatch():
    scenario = get("pipeline-1f1b")
    fig = plot_timeline(scenario.run().result, label=scenario.op_tag())
    texts = {t.get_text() for t in fig.axes[0].texts}
    assert {f"F{i}" for i in range(4)} | {f"B{i}" for i in range(4)} <= texts
    assert not any(".mb" in t for t in texts)


def test_compared_memory_plots_share_their_scales():
    from simulator.teach.examples.training import PARAMS, T, X, pipeline

    runs = [pipeline(name, microbatches=8).run(PARAMS, X, T) for name in ("gpipe", "1f1b")]
    scales = shared_scales(runs)
    figs = [plot_memory(r, **scales) for r in runs]
    assert figs[0].axes[0].get_ylim() == figs[1].axes[0].get_ylim()
    assert figs[0].axes[0].get_xlim() == figs[1].axes[0].get_xlim()
    top = figs[0].axes[0].get_ylim()[1]
    highest = max(max(line.get_ydata()) for f in figs for line in f.axes[0].lines)
    assert highest <= top < 1.3 * highest  # the shared axis holds the higher plot, with a little room
    alone = [plot_memory(r) for r in runs]
    assert alone[0].axes[0].get_ylim() != alone[1].axes[0].get_ylim()  # what sharing fixes


class FakeShell:
    """Just enough of an IPython kernel's shell for ``simulator.views.plot.jupyter``."""

    kernel = object()

    def __init__(self):
        self.hooks = []
        self.types = {}
        shell = self

        class Events:
            def register(self, name, fn):
                shell.hooks.append((name, fn))

        class Formatter:
            def for_type(self, cls, fn):
                shell.types[cls] = fn

        self.events = Events()
        self.display_formatter = type("DF", (), {"formatters": {"image/png": Formatter()}})()


def test_figures_made_in_a_notebook_cell_are_displayed_once(monkeypatch):
    shell = FakeShell()
    shown = []
    monkeypatch.setattr("IPython.get_ipython", lambda: shell)
    monkeypatch.setattr("IPython.display.display", lambda fig: shown.append(fig))
    first = plot_timeline(get("split").run().result)  # `fig = plot_timeline(...)`: not the cell's value
    second = plot_timeline(get("split").run().result)
    assert isinstance(first, SimFigure) and shell.types[SimFigure] is jupyter._png
    assert shell.types[SimFigure](second)[:8] == b"\x89PNG\r\n\x1a\n"  # the cell's value, shown by IPython
    ((event, flush),) = shell.hooks
    assert event == "post_execute"
    flush()
    assert shown == [first]  # the other was already shown
    flush()
    assert shown == [first]  # once only


def test_outside_a_kernel_nothing_is_remembered(monkeypatch):
    monkeypatch.setattr("IPython.get_ipython", lambda: None)
    fig = plot_timeline(get("split").run().result)
    assert jupyter.remember(fig) is fig and not fig._shown


@pytest.mark.parametrize("stacked", [False, True])
def test_a_long_legend_stays_over_its_axes_on_a_slide(stacked):
    # seven entries in one row are wider than a slide's axes: the legend ran into the "busy" column
    from simulator.parallel.experts.parallel import op_region

    run = get("ep-dispatch-combine").run().result
    kwargs = {"color_key": op_region, "arrows": False, "style": "slide"}
    fig = plot_timelines([run, run], ["a", "b"], **kwargs) if stacked else plot_timeline(run, title="a", **kwargs)
    fig.canvas.draw()
    (ax,) = [a for a in fig.axes if a.get_legend()]
    legend, axes = ax.get_legend().get_window_extent(), ax.get_window_extent()
    assert len(legend_labels(fig)) == 7
    assert legend.x1 <= axes.x1 + 1
    title = ax.title.get_window_extent()
    assert title.y0 >= legend.y1 - 1  # the rows the legend takes are left free under the title
