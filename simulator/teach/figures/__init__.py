"""Every figure in ``figures/``, each built by one registered function.

Adding a figure is one function in any module of this package::

    @figure("timeline_my_schedule.png", "timeline_my_schedule.svg")
    def my_schedule(out: Path, style: FigureStyle) -> None:
        \"\"\"One line saying what the figure shows (printed by ``figures --list``).\"\"\"
        save_timeline(World(4).run(program), out / "timeline_my_schedule", title="...", style=style)

The decorator registers the function under its name (dashes for underscores) with the files it
promises to write, and optionally ``needs``: a function that returns why the figure cannot be built
here (e.g. no browser for the page screenshots), or None when it can; ``build_figures`` (and ``python -m simulator figures``) imports every module here,
runs the builders in name order, each in the chosen style (``"slide"``, the default: 1920 px wide,
text sized for a projector; or ``"paper"``: 1650 px, smaller text), shows progress, skips (saying why) the figures whose needs are not
met, and fails if a builder did not write what it promised. File names are stable, so regenerating updates the committed figures in place.

The registry is filled when the modules are imported and never changes afterwards: it is a table of
functions, not simulation state.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Builder = Callable[[Path, Any], object]  # (output folder, FigureStyle)


@dataclass(frozen=True)
class FigureSpec:
    """A registered figure: its name, the files it writes (relative to the output folder), its builder."""

    name: str
    outputs: tuple[str, ...]
    build: Builder
    doc: str
    needs: Callable[[], str | None] | None = None

    def unavailable(self) -> str | None:
        """Why this figure cannot be built on this machine, or None when it can."""
        return self.needs() if self.needs is not None else None


_REGISTRY: dict[str, FigureSpec] = {}
_NOT_FIGURES = {"programs"}  # modules here that hold helpers, not figures


def figure(
    *outputs: str, name: str | None = None, needs: Callable[[], str | None] | None = None
) -> Callable[[Builder], Builder]:
    """Register ``fn(out_dir)`` as the builder of the files ``outputs`` (see the module docstring)."""
    if not outputs:
        raise ValueError("@figure(...) needs the file names the builder writes, e.g. @figure('x.png', 'x.svg')")

    def register(fn: Builder) -> Builder:
        key = name or fn.__name__.replace("_", "-")
        if key in _REGISTRY and _REGISTRY[key].build is not fn:
            raise ValueError(f"two figures are named {key!r} ({_REGISTRY[key].build.__module__} and {fn.__module__})")
        taken = {o: s.name for s in _REGISTRY.values() if s.name != key for o in s.outputs}
        clash = [o for o in outputs if o in taken]
        if clash:
            raise ValueError(f"figure {key!r} would overwrite {clash[0]!r}, which figure {taken[clash[0]]!r} writes")
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        _REGISTRY[key] = FigureSpec(key, tuple(outputs), fn, doc, needs)
        return fn

    return register


def registry() -> dict[str, FigureSpec]:
    """Every registered figure by name (imports all figure modules of this package first)."""
    for info in pkgutil.iter_modules(__path__):
        if info.name not in _NOT_FIGURES:
            importlib.import_module(f"{__name__}.{info.name}")
    return dict(sorted(_REGISTRY.items()))


def build_figures(
    out_dir: str | Path = "figures",
    only: Iterable[str] | None = None,
    progress: Callable[[str], object] | None = print,
    style: str = "slide",
) -> list[Path]:
    """Build the figures (all, or those named in ``only``) into ``out_dir`` in ``style`` ("slide" or
    "paper"); returns the files written."""
    from ...views.plot.style import figure_style

    st = figure_style(style)
    figures = registry()
    names = list(figures) if only is None else list(only)
    unknown = [n for n in names if n not in figures]
    if unknown:
        raise KeyError(f"no figure named {unknown[0]!r}; choose from: {', '.join(figures)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for i, name in enumerate(names, 1):
        spec = figures[name]
        t0 = time.perf_counter()
        begun = time.time()
        if progress:
            progress(f"[{i}/{len(names)}] {name}: {spec.doc}")
        missing = spec.unavailable()
        if missing:
            if progress:
                progress(f"        skipped: {missing}")
            continue
        spec.build(out, st)
        files = [out / o for o in spec.outputs]
        for f in files:
            if not f.is_file() or f.stat().st_size == 0 or f.stat().st_mtime < begun - 1:
                raise RuntimeError(f"figure {name!r} promised {f.name} but did not write it into {out}")
        written += files
        if progress:
            progress(f"        wrote {', '.join(spec.outputs)} in {time.perf_counter() - t0:.1f} s")
    return written
