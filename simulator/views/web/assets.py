"""The scripts and styles the pages and the widget ship, read from this package's files.

Each front end gets one ES module made of several plain script files, in order (a notebook widget loads a
single module, where relative imports have nowhere to resolve from, and a page inlines it): ``dom.js``
(element helpers, shared), then the view's parts, or the schedule explorer's. Only the last file of a
module exports anything.
"""

from __future__ import annotations

from importlib.resources import files

VIEW = ("dom.js", "timeline.js", "cards.js", "view.js")  # the step-through view: page and widget
EXPLORER = (
    "dom.js",
    "schedules.js",
    "explorer_model.js",
    "explorer_paint.js",
    "explorer_summary.js",
    "explorer.js",
)  # the schedule explorer page (styles: explorer.css)
MEMORY = ("dom.js", "memory.js")  # the memory calculator page (styles: memory.css)


def asset(name: str) -> str:
    """The text of a file shipped with this package (``view.js``, ``view.css``, ...)."""
    return files(__package__).joinpath(name).read_text(encoding="utf-8")


def module(names: tuple[str, ...] = VIEW) -> str:
    """The ES module made of ``names``, in order; fails if a page could not inline it."""
    text = "\n".join(f"// ---- {name} ----\n{asset(name)}" for name in names)
    if "</script" in text.lower():  # it would end the inline script early
        raise ValueError(f"{', '.join(names)} must not contain '</script': the page inlines them")
    return text
