"""The step-through view, for runs and for the named scenarios: ``from simulator import view``.

The view itself (``simulator.views.web``) renders a run, its trace, or a scenario; this module adds
what a class uses most, scenarios by name::

    view.show("wrong-input")                        # in Jupyter: a widget (needs the notebooks extra)
    view.show(run, check=report)                    # any run, with the check it highlights
    view.write_html("tp-row", "tp-row.html")        # a page that opens from disk, with no network
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..views import web
from ..views.web import MAX_EVENTS, ViewState, html_page, state_at, write_page
from .examples import get

__all__ = ["MAX_EVENTS", "ViewState", "build_document", "html_page", "show", "state_at", "write_html", "write_page"]


def _viewable(run: Any) -> Any:
    """A scenario's name looked up; anything else as given."""
    return get(run) if isinstance(run, str) else run


def show(run: Any, check: Any = None, **options: Any) -> Any:
    """A notebook widget stepping through ``run``: a run, its trace, a scenario, its run, or its name.

    Options as for ``simulator.views.web.widget.show`` (``step=``, ``title=``, ``story=``, ``max_events=``).
    """
    return web.show(_viewable(run), check, **options)


def write_html(run: Any, path: str | Path, check: Any = None, **options: Any) -> Path:
    """Write the step-through page of ``run`` (a run, trace, scenario, scenario run, or scenario name) to ``path``.

    Options as for ``simulator.views.web.write_html``. Returns the path written.
    """
    return web.write_html(_viewable(run), path, check, **options)


def build_document(run: Any, check: Any = None, **options: Any) -> dict[str, Any]:
    """The view document of ``run`` (see ``simulator.views.web.document``); a scenario's name is looked up."""
    return web.build_document(_viewable(run), check, **options)
