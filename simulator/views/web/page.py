"""A run as one self-contained HTML file: the view module, its styles and the document, all inline.

``present=True`` writes the projector mode (one screen: cards on the mesh's grid, larger type, the timeline
in view); either page opens at the step its address names (``page.html#step=40``) and keeps the address
at the step shown, so a link or a reload returns to it.

The page needs nothing but a browser: no Python, no network, no CDN. It opens from disk (a teacher
can email it), and its Content-Security-Policy forbids every fetch, so a page that tried to load
anything would fail loudly in the browser console instead of quietly depending on a network.
The page is written whole or not at all (``simulator.core.files``): a failed write never leaves half a
page behind, a replaced page keeps its permissions, and a device or pipe is written through.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from ...core.files import atomic_write, check_writable, short_path
from .assets import VIEW, asset, module
from .document import MAX_EVENTS, build_document

CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"

__all__ = ["CSP", "asset", "html_page", "tool_page", "write_html", "write_page", "write_text"]


def tool_page(key: str, title: str, command: str, scripts: tuple[str, ...], data: Any, call: str, noscript: str) -> str:
    """One self-contained page (a run's step-through view, the explorer, the memory calculator): its ES module,
    styles and data inline, nothing to fetch.

    Args:
        key: names the page's root element, its data element (``KEY-data``) and its styles (``KEY.css``).
        title: the page's title.
        command: the command line that writes the page (in its generator tag).
        scripts: the ES module's files (``assets.EXPLORER``, ``assets.MEMORY``).
        data: what the module reads (JSON-able).
        call: the statement that draws the page, with ``ROOT`` and ``DATA`` for the root element and the data,
            e.g. ``"window.explorer = explore(ROOT, DATA)"``.
        noscript: what the page says where JavaScript is off.
    """
    text = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    root, parsed = f'document.getElementById("{key}")', f'JSON.parse(document.getElementById("{key}-data").textContent)'
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="parallelism-simulator ({html.escape(command)})">
<link rel="icon" href="data:,">
<title>{html.escape(title)}</title>
<style>
body {{ margin: 0; background: #fff; }}
{asset(f"{key}.css")}
</style>
</head>
<body>
<div id="{key}"></div>
<noscript>{noscript}</noscript>
<script type="application/json" id="{key}-data">{text}</script>
<script type="module">
{module(scripts)}
{call.replace("ROOT", root).replace("DATA", parsed)};
</script>
</body>
</html>
"""


def html_page(doc: dict[str, Any], *, step: int = 0, present: bool = False) -> str:
    """The page for a view document (``build_document``), opened at ``step`` (or the step its address names);
    ``present``: the projector mode."""
    options = json.dumps({"documentKeys": True, "step": step, "present": present, "hash": True})
    return tool_page(
        "view", doc["title"], "python -m simulator html", VIEW, doc, f"mount(ROOT, DATA, {options})",
        "This page steps through a simulated run; it needs JavaScript.",
    )  # fmt: skip


def write_html(
    run: Any,
    path: str | Path,
    check: Any = None,
    *,
    step: int = 0,
    title: str | None = None,
    story: str | None = None,
    max_events: int = MAX_EVENTS,
    first_event: int | None = None,
    present: bool = False,
    **options: Any,
) -> Path:
    """Write the step-through page of ``run`` (a run, its trace, a scenario or a scenario's run).

    check: a ``CheckReport`` whose first divergence the page highlights. Runs longer than
    ``max_events`` are thinned to a window of events, and the page says so. present: the projector mode.
    Other options (``mesh=``, ``tag=``) as for ``build_document``. Returns the path written.
    """
    _check_target(Path(path))
    doc = build_document(
        run, check, title=title, story=story, max_events=max_events, first_event=first_event, **options
    )
    return write_page(doc, path, step=step, present=present)


def write_page(doc: dict[str, Any], path: str | Path, *, step: int = 0, present: bool = False) -> Path:
    """Write the page of a view document to ``path`` (through a temporary file, then a rename)."""
    path = Path(path)
    _check_target(path)
    steps = len(doc["events"]) - doc["base"]
    if not 0 <= step <= steps:
        raise ValueError(f"step={step}: this run has steps 0 to {steps}")
    return write_text(html_page(doc, step=step, present=present), path)


def write_text(text: str, path: str | Path) -> Path:
    """Write a page's text to ``path`` whole or not at all (``simulator.core.files``: a regular file through a
    temporary file and a rename, keeping its permissions; ``-`` or a device written through)."""
    path = Path(path)
    _check_target(path)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate (from a file name decoded with surrogateescape, say)
        near = text[max(exc.start - 30, 0) : exc.end + 30]
        raise ValueError(
            f"cannot write the page to {path}: the text {near!r} holds {text[exc.start : exc.end]!r}, a lone "
            "surrogate that UTF-8 cannot encode; rename the value that holds it (a name or a title)"
        ) from None
    with atomic_write(path, "wb") as f:
        f.write(data)
    return path


def _check_target(path: Path) -> None:
    """Fail before any work, with the reason in words, when ``path`` cannot become the page."""
    try:
        check_writable(path)
    except OSError as exc:
        reason = exc.strerror if exc.errno is not None and exc.strerror else str(exc)
        raise type(exc)(f"cannot write the page to {short_path(path)}: {reason}") from None
