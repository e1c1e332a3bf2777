"""Figures that show themselves in Jupyter, whether or not the cell ends with them.

The plotting functions build figures without pyplot (so scripts keep nothing in matplotlib's global
figure list), and Jupyter shows only what a cell returns or displays: ``fig = plot_timeline(run)``
would show nothing. So a figure made inside an IPython kernel is remembered for the cell, and when the
cell has run, every such figure that was not already shown (as the cell's value, or by ``display``)
is displayed once, as the inline backend does for pyplot figures. Outside a kernel nothing happens.

What is remembered lives on the kernel's shell object (one per kernel, made by IPython), not in this
module: two shells in one process each keep their own.
"""

from __future__ import annotations

import io
from typing import Any

_ATTR = "_parallelism_simulator_figures"


class _Pending:
    """The figures made during the current cell, and whether each has been shown."""

    def __init__(self, shell: Any, figure_type: type) -> None:
        self.shell = shell
        self.figures: list[Any] = []
        shell.events.register("post_execute", self.flush)
        png = shell.display_formatter.formatters["image/png"]
        png.for_type(figure_type, _png)  # before the inline backend's Figure formatter, which would not mark it shown

    def flush(self) -> None:
        from IPython.display import display

        figures, self.figures = self.figures, []
        for fig in figures:
            if not getattr(fig, "_shown", False):
                display(fig)


def _png(fig: Any) -> bytes:
    """The figure as PNG bytes, marked as shown."""
    fig._shown = True
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.display_dpi, facecolor="white", bbox_inches=None)
    return buf.getvalue()


def _kernel_shell() -> Any:
    """The running IPython kernel's shell, or None (a script, a test, plain IPython without a kernel)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return None
    return shell


def remember(fig: Any) -> Any:
    """Have ``fig`` displayed at the end of the current Jupyter cell unless it is shown before; returns it."""
    shell = _kernel_shell()
    if shell is None:
        return fig
    pending = getattr(shell, _ATTR, None)
    if pending is None:
        pending = _Pending(shell, type(fig))
        setattr(shell, _ATTR, pending)
    pending.figures.append(fig)
    return fig
