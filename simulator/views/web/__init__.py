"""Step through a run in a browser: a notebook widget and a self-contained web page; and the schedule explorer.

Both render one JSON-able document of the run (``document.py``) with one ES module (``assets.py`` makes it
of ``dom.js``, ``timeline.js``, ``cards.js`` and ``view.js``)::

    from simulator import view
    view.show("wrong-input")                        # in Jupyter: a widget (needs the notebooks extra)
    view.show(run, check=report)                    # any run, with the check it highlights
    view.show("3d-step", present=True)              # the projector mode: one 1280 x 720 screen, no scrolling
    view.write_html(run, "run.html", check=report)  # a page that opens from disk, with no network

or ``python -m simulator html SCENARIO -o FILE [--present]`` on the command line. ``explorer.py`` writes
the schedule explorer (``python -m simulator explore``): pick a pipeline schedule, p, m, v and the costs,
see its timeline and bubble; ``memory_page.py`` the memory calculator (``python -m simulator memory``).

=============  ==================================================================================
document.py    a run as one JSON-able document; replay.py reads it back in Python; texts.py its values' texts
assets.py      the .js and .css files shipped here, joined into one module per front end
browser.py     headless Chromium for screenshots and the browser tests
page.py        the self-contained page; widget.py the notebook widget (anywidget)
explorer.py    the schedule explorer page (orders made in the page by schedules.js, timed by explorer_model.js,
               painted pixel by pixel past a few thousand blocks by explorer_paint.js)
memory_page.py the memory calculator page: the what-if's memory per device, by kind, as the layout changes
=============  ==================================================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .document import MAX_EVENTS, build_document
from .page import html_page, write_html, write_page
from .replay import ViewState, state_at

if TYPE_CHECKING:
    from .widget import RunView

__all__ = ["MAX_EVENTS", "ViewState", "build_document", "html_page", "show", "state_at", "write_html", "write_page"]


def show(run: Any, check: Any = None, **options: Any) -> RunView:
    """A notebook widget stepping through ``run`` (see ``simulator.views.web.widget.show``)."""
    try:
        from .widget import show as show_widget
    except ImportError as exc:  # anywidget is in the notebooks extra, not a core dependency
        raise ImportError(
            f"the notebook view needs anywidget: pip install 'parallelism-simulator[notebooks]' ({exc})"
        ) from exc
    return show_widget(run, check, **options)
