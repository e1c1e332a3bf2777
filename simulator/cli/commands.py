"""What each command does: ``demo``, ``list``, ``run``, ``figures``, ``export``, ``html``, ``explore``, ``memory``, ``grade``,
``timeline``, ``calibrate`` (``whatif`` and ``validate`` are in ``whatif.py``), and how they report what they wrote.

Each ``cmd_*`` takes the parsed arguments (``options.py`` declares them) and returns the exit status.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from typing import TextIO

from ..core.files import STDOUT, short_path
from ..core.values import ValueStyle
from ..teach.examples import all_scenarios, get
from .show import (
    EventFilter,
    FilterError,
    check_devices,
    show_scenario,
    terminal_width,
)

DEMO = ("split", "wrong-input", "replicated", "wrong-shape", "send-send-deadlock")


def cmd_demo(args: argparse.Namespace) -> int:
    """Walk through the seed scenarios message by message, with the check results."""
    width = args.width or terminal_width()
    intro = "What crosses between devices? A two-stage model: stage A computes 2x + 1, stage B squares it."
    print(textwrap.fill(intro, width) + "\n")
    ok = True
    for name in DEMO:
        ok &= show_scenario(get(name), step=not args.brief, width=args.width, timeline=False)
    print("\n".join(textwrap.fill(line, width, subsequent_indent=" " * 14) for line in _contrast().splitlines()))
    print("\nEvery scenario behaved as expected." if ok else "\nSOME SCENARIOS DID NOT BEHAVE AS EXPECTED.")
    return 0 if ok else 1


def cmd_list(args: argparse.Namespace) -> int:
    """List the named scenarios."""
    scenarios = all_scenarios()
    width = max(map(len, scenarios))
    indent = " " * (width + 13)  # a long title goes on under itself, within 110 columns
    for name, s in scenarios.items():
        line = f"{name:<{width}}  [{s.expect:^7}]  {s.title}"
        print(textwrap.fill(line, 110, subsequent_indent=indent, break_on_hyphens=False))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """Run one named scenario, event by event, and check it."""
    try:
        scenario = get(args.scenario)
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    only = EventFilter(args.devices, args.steps or (None, None), args.kinds)
    style = ValueStyle(max_elements=args.max_elements)
    try:
        shown = show_scenario(
            scenario,
            step=args.step,
            width=args.width,
            only=only,
            values=args.values,
            style=style,
            timeline=not args.step,
        )
    except FilterError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0 if shown else 1


def cmd_figures(args: argparse.Namespace) -> int:
    """Regenerate the figures (all of them, or those named) into a folder, with progress."""
    from ..teach.figures import build_figures, registry

    if args.list:
        for name, spec in registry().items():
            print(f"{name:<28} {', '.join(spec.outputs)}\n{'':<28} {spec.doc}")
        return 0
    try:
        written = build_figures(args.out, only=args.only or None, style=args.style)
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    except OSError as exc:
        return _cannot_write(exc, args.out)
    print(f"{len(written)} file{'s' * (len(written) != 1)} in {args.out}/")
    # a figure asked for by name that this machine cannot build is a failure, not a quiet skip
    figures = registry()
    missing = [(name, why) for name in args.only or () if (why := figures[name].unavailable())]
    for name, why in missing:
        print(f"figure {name!r} was not built: {why}", file=sys.stderr)
    return 1 if missing else 0


def cmd_export(args: argparse.Namespace) -> int:
    """Export a scenario's run as Chrome Trace Event JSON (open it in ui.perfetto.dev or chrome://tracing)."""
    from ..views.plot.chrome_trace import write_chrome_trace

    result, report = _result(args.scenario)
    if result is None:
        return 2
    try:
        info = write_chrome_trace(
            result, args.out or f"{args.scenario}.trace.json", max_events=args.max_events, report=report
        )
    except OSError as exc:
        return _cannot_write(exc, args.out or f"{args.scenario}.trace.json")
    said = _said(args.out)
    print(f"wrote {_where(info.path)}: {info.events:,} events", file=said)
    if info.collapsed:
        print(info.note, file=said)
    return 0


def cmd_html(args: argparse.Namespace) -> int:
    """Write a scenario's run as one self-contained web page that steps through it (opens from disk, no network)."""
    from ..teach.view import build_document
    from ..views.web import write_page

    try:
        run = get(args.scenario).run()
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return 2
    if run.result is None and getattr(run.error, "partial", None) is None:
        print(
            f"scenario {args.scenario!r} stops with {type(run.error).__name__}, so there is no run to show",
            file=sys.stderr,
        )
        return 2
    if run.result is None:  # a deadlock: the page steps through the run up to it
        print(f"scenario {args.scenario!r} stops with {type(run.error).__name__}; the page shows the run up to there",
              file=sys.stderr)  # fmt: skip
    try:
        doc = build_document(run, max_events=args.max_events, first_event=args.first_event)
        path = write_page(doc, args.out or f"{args.scenario}.html", step=args.step, present=args.present)
    except OSError as exc:
        return _cannot_write(exc, args.out or f"{args.scenario}.html")
    except ValueError as exc:  # said with the flag given (--step 99), not the keyword (step=99)
        said = re.sub(r"\b(first_event|step|max_events)=", lambda m: "--" + m[1].replace("_", "-") + " ", str(exc))
        print(f"cannot write the page: {said}", file=sys.stderr)
        return 2
    steps = len(doc["events"]) - doc["base"]
    said = _said(args.out)
    size = f"{path.stat().st_size / 1e3:,.0f} kB, " if path.is_file() else ""
    print(f"wrote {_where(path)} ({size}{steps:,} steps): open it in any browser", file=said)
    if doc["notice"]:
        print(doc["notice"], file=said)
    return 0


def cmd_explore(args: argparse.Namespace) -> int:
    """Write the schedule explorer: one self-contained page where you pick a pipeline schedule, p, m, v and the
    costs of F, B and W, and see its timeline, its bubble and the activations each device keeps."""
    from ..views.web.explorer import write_explorer

    try:
        path = write_explorer(args.out)
    except OSError as exc:
        return _cannot_write(exc, args.out)
    size = f" ({path.stat().st_size / 1e3:,.0f} kB)" if path.is_file() else ""
    print(f"wrote {_where(path)}{size}: open it in any browser, no network needed", file=_said(args.out))
    return 0


def cmd_memory(args: argparse.Namespace) -> int:
    """Write the memory calculator: one self-contained page where you pick a model, the ZeRO stage, recomputation,
    TP, PP, DP, CP and the microbatch, and see parameters, gradients, optimizer state and activations per device."""
    from ..views.web.memory_page import write_memory_page

    try:
        path = write_memory_page(args.out)
    except OSError as exc:
        return _cannot_write(exc, args.out)
    size = f" ({path.stat().st_size / 1e3:,.0f} kB)" if path.is_file() else ""
    print(f"wrote {_where(path)}{size}: open it in any browser, no network needed", file=_said(args.out))
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    """Grade every student file in a folder, each in its own process with a time limit, into a CSV: one row per
    file with its exercise, verdict, try and first divergence. A file that hangs or crashes is a row, not a stop."""
    from ..teach.exercises import EXERCISES
    from ..teach.grading import grade_folder, students_csv, summary, write_csv, write_students

    if args.list:
        for name, make in EXERCISES.items():
            print(f"{name:<24} {make().title}")
        return 0
    if args.folder is None:
        print("grade: give the FOLDER of student files (or --list to name the exercises)", file=sys.stderr)
        return 2
    try:
        rows = grade_folder(
            args.folder, timeout=args.timeout, jobs=args.jobs, progress=lambda line: print(line, file=sys.stderr)
        )
    except OSError as exc:
        print(f"grade: {exc}", file=sys.stderr)
        return 2
    try:
        path = write_csv(rows, args.csv)
    except OSError as exc:
        return _cannot_write(exc, args.csv)
    print(f"wrote {_where(path)}: {summary(rows)}", file=_said(args.csv))
    if str(args.csv) != "-":  # beside it, one row per student
        per_student = students_csv(args.csv)
        try:
            write_students(rows, per_student)
        except OSError as exc:
            return _cannot_write(exc, per_student)
        print(f"wrote {_where(per_student)}: one row per student", file=_said(args.csv))
    return 0


def cmd_timeline(args: argparse.Namespace) -> int:
    """Print a scenario's timeline as a text grid (one row per device)."""
    from ..views.textgrid import text_timeline

    result, _ = _result(args.scenario)
    if result is None:
        return 2
    try:
        check_devices(args.devices, result.world.size)
    except FilterError as exc:
        print(exc, file=sys.stderr)
        return 2
    columns = args.columns or terminal_width()
    label_w = max(len(f"device {result.world.size - 1}"), 10)
    slots = args.width or max(10, columns - label_w)
    window = tuple(None if t is None else t * 1e-6 for t in (args.window or (None, None)))
    try:
        grid = text_timeline(result, slots, tag=get(args.scenario).op_tag(), devices=args.devices, window=window)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    key = [not line.startswith(("time (", "device ")) for line in grid.splitlines()]  # the ruler and rows: as asked
    print("\n".join(textwrap.fill(line, columns, subsequent_indent="  ", break_on_hyphens=False) if is_key else line
                    for line, is_key in zip(grid.splitlines(), key)))  # fmt: skip
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure latency, bandwidth and compute speed on real torch.distributed ranks; write a cost model."""
    try:
        from ..calibration.calibrate import main_calibrate
    except ImportError as exc:  # torch is an optional extra
        print(f"calibrate needs torch (pip install '.[torch]'): {exc}", file=sys.stderr)
        return 2
    try:
        main_calibrate(args.ranks, args.backend, args.out, args.repeats, args.pattern, args.statistic, args.spread)
    except OSError as exc:
        return _cannot_write(exc, args.out)
    return 0


def _cannot_write(exc: OSError, out: object = None) -> int:
    """A write that failed after the checks (a full disk, a read-only file system): say so, exit 2."""
    if isinstance(exc, BrokenPipeError):  # the reader of standard output left: main() ends quietly
        raise exc
    name = exc.filename or out
    where = f" {short_path(name)}" if name else ""
    print(f"cannot write{where}: {exc.strerror or exc}; choose another --out", file=sys.stderr)
    return 2


def _said(out: object) -> TextIO:
    """Where a command reports what it wrote: standard error when the file itself goes to standard output."""
    return sys.stderr if str(out) in _STANDARD_OUTPUT else sys.stdout


_STANDARD_OUTPUT = (STDOUT, "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def _where(path: object) -> str:
    return "standard output" if str(path) == STDOUT else str(path)


def _result(name: str):
    """The finished run of a named scenario and its check's report (None where it was not checked), or (None, None),
    with the reason on stderr."""
    try:
        run = get(name).run()
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return None, None
    return _result_of(name, run), run.report


def _result_of(name: str, run):
    """A scenario run's result; for a deadlock, the run up to it; else None (each with the reason on stderr)."""
    if run.result is None:
        partial = getattr(run.error, "partial", None)
        if partial is not None:  # a deadlock: what happened before it is worth seeing
            print(f"scenario {name!r} stops with {type(run.error).__name__}; showing the run up to there:\n"
                  f"{run.error}", file=sys.stderr)  # fmt: skip
            return partial
        print(f"scenario {name!r} stops with {type(run.error).__name__}, so there is no run to show", file=sys.stderr)
    return run.result


def _contrast() -> str:
    """Split vs replicated, side by side: who computes what, and what crosses."""
    rows = []
    for name in ("split", "replicated"):
        result = get(name).run().result
        per_device = [[op.name for op in result.trace.ops if op.rank == r] for r in range(result.world.size)]
        ran = "; ".join(f"device {r} ran {'+'.join(ops) or 'nothing'}" for r, ops in enumerate(per_device))
        whole = sum(1 for ops in per_device if {"A", "B"} <= set(ops))
        rows.append(f"  {name:<11} {ran}")
        rows.append(f"  {'':<11} messages: {len(result.trace.messages)}; devices that finish an input alone: {whole}")
    return (
        "=== Same two devices, two different divisions of work\n"
        + "\n".join(rows)
        + "\n  The device count does not say how the work is divided:"
        + "\n  write down the part boundaries and what crosses them."
    )
