"""The step-through view as a Jupyter widget (anywidget: JupyterLab, Notebook 7, VS Code, Colab).

The widget sends the view document once (``doc``) and keeps the step in sync both ways (``step``):
the buttons, slider and arrow keys in the notebook move ``step`` here, and setting ``step`` (or
calling ``forward``/``back``/``goto``) moves the view there. ``present`` switches to the projector mode
(one screen high: cards on the mesh's grid, larger type, the timeline in view). Its text form is the state at
the current step, so a stored notebook reads well where no browser runs the widget.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anywidget
import traitlets

from .assets import module
from .document import MAX_EVENTS, build_document
from .replay import ViewState, state_at, steps

ASSETS = Path(__file__).parent


class RunView(anywidget.AnyWidget):
    """One run, stepped through in a notebook: ``RunView(build_document(run))``, or ``show(run)``."""

    _esm = module()  # the page's module, made of the package's .js files
    _css = ASSETS / "view.css"
    doc = traitlets.Dict().tag(sync=True)
    step = traitlets.Int(0).tag(sync=True)
    present = traitlets.Bool(False).tag(sync=True)

    def __init__(self, doc: dict[str, Any], step: int = 0, present: bool = False, **kwargs: Any) -> None:
        super().__init__(doc=doc, step=step, present=present, **kwargs)

    @traitlets.validate("step")
    def _valid_step(self, proposal: dict[str, Any]) -> int:
        value, n = proposal["value"], steps(self.doc)
        if not 0 <= value <= n:
            raise traitlets.TraitError(f"step {value}: this run has steps 0 to {n}")
        return value

    @property
    def steps(self) -> int:
        """The last step (the state after every event shown)."""
        return steps(self.doc)

    def state(self) -> ViewState:
        """What the view shows at the current step: each device's values, the messages in flight."""
        return state_at(self.doc, self.step)

    def forward(self, n: int = 1) -> RunView:
        self.step = min(self.steps, self.step + n)
        return self

    def back(self, n: int = 1) -> RunView:
        self.step = max(0, self.step - n)
        return self

    def goto(self, step: int) -> RunView:
        self.step = step
        return self

    def __repr__(self) -> str:
        return f"{self.doc['title']}\n{self.state().render()}"


def show(
    run: Any,
    check: Any = None,
    *,
    step: int = 0,
    title: str | None = None,
    story: str | None = None,
    max_events: int = MAX_EVENTS,
    first_event: int | None = None,
    present: bool = False,
    **options: Any,
) -> RunView:
    """A widget stepping through ``run``: a run, its trace, a scenario, or a scenario's run.

    check: a ``CheckReport`` whose first divergence the view highlights (a scenario brings its own).
    present: the projector mode. Other options (``mesh=``, ``tag=``) as for ``build_document``.
    """
    doc = build_document(
        run, check, title=title, story=story, max_events=max_events, first_event=first_event, **options
    )
    return RunView(doc, step=step, present=present)
