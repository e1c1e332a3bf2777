"""The step-through view, for runs and for the named scenarios: ``from simulator import view``.

The view itself (``simulator.views.web``) renders a run, its trace, or a scenario; this module adds
what a class uses most, scenarios by name::

    view.show("wrong-input")                        # in Jupyter: a widget (needs the notebooks extra)
    view.show(run, check=report)                    # any run, with the check it highlights
    view.write_html("tp-row", "tp-row.html")        # a page that opens from disk, with no network
    view.show("3d-step", present=True)              # the projector mode: every card, the timeline, no scrolling

A scenario also tells the view what the run alone does not: the mesh its devices form (the projector
mode lays the cards out on it) and how its pipeline schedule labels passes (``B3``, or ``I3`` and ``W3``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..tensors.mesh import DeviceMesh
from ..views import web
from ..views.web import MAX_EVENTS, ViewState, html_page, state_at, write_page
from .examples import get
from .scenario import Scenario, ScenarioRun

__all__ = ["MAX_EVENTS", "ViewState", "build_document", "html_page", "show", "state_at", "write_html", "write_page"]


def _viewable(run: Any) -> Any:
    """A scenario's name looked up; anything else as given."""
    return get(run) if isinstance(run, str) else run


def _scenario_options(run: Any, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with the mesh and the op labels of the scenario behind ``run``, unless given."""
    scenario = run.scenario if isinstance(run, ScenarioRun) else run if isinstance(run, Scenario) else None
    if scenario is None:
        return options
    meshes = (getattr(x, "mesh", None) for x in (scenario.program, *scenario.args))
    found = {"tag": scenario.op_tag(), "mesh": next((m for m in meshes if isinstance(m, DeviceMesh)), None)}
    return {**found, **options}


def show(run: Any, check: Any = None, **options: Any) -> Any:
    """A notebook widget stepping through ``run``: a run, its trace, a scenario, its run, or its name.

    Options as for ``simulator.views.web.widget.show`` (``step=``, ``present=``, ``title=``, ``story=``,
    ``max_events=``).
    """
    run = _viewable(run)
    return web.show(run, check, **_scenario_options(run, options))


def write_html(run: Any, path: str | Path, check: Any = None, **options: Any) -> Path:
    """Write the step-through page of ``run`` (a run, trace, scenario, scenario run, or scenario name) to ``path``.

    Options as for ``simulator.views.web.write_html`` (``present=True``: the projector mode). Returns the path
    written.
    """
    run = _viewable(run)
    return web.write_html(run, path, check, **_scenario_options(run, options))


def build_document(run: Any, check: Any = None, **options: Any) -> dict[str, Any]:
    """The view document of ``run`` (see ``simulator.views.web.document``); a scenario's name is looked up."""
    run = _viewable(run)
    return web.build_document(run, check, **_scenario_options(run, options))
