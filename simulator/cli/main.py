"""The command line: ``python -m simulator demo | list | run NAME | html NAME | explore | timeline NAME | export NAME |
figures | grade FOLDER | whatif | validate``.

See ``--help``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

from ..core.files import STDOUT, short_path
from ..core.values import ValueStyle
from ..teach.examples import all_scenarios, get
from ..views.textgrid import MAX_SLOTS
from ..views.web.document import MAX_EVENTS
from .show import (
    EventFilter,
    FilterError,
    check_devices,
    devices_arg,
    kinds_arg,
    show_scenario,
    steps_arg,
    terminal_width,
)
from .types import bounded_int, output_file_like, output_folder
from .whatif import add_whatif_args, cmd_validate, cmd_whatif

DEMO = ("split", "wrong-input", "replicated", "wrong-shape", "send-send-deadlock")
MAX_EVENTS_LIMIT = 10**9  # an event budget, not an allocation; beyond this no viewer opens the file anyway
MAX_RANKS = 64  # real processes on this one machine


def cmd_demo(args: argparse.Namespace) -> int:
    """Walk through the seed scenarios message by message, with the check results."""
    print("What crosses between devices? A two-stage model: stage A computes 2x + 1, stage B squares it.\n")
    ok = True
    for name in DEMO:
        ok &= show_scenario(get(name), step=not args.brief, width=args.width, timeline=False)
    print(_contrast())
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
    print(f"{len(written)} files in {args.out}/")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """Export a scenario's run as Chrome Trace Event JSON (open it in ui.perfetto.dev or chrome://tracing)."""
    from ..views.plot.chrome_trace import write_chrome_trace

    result = _result(args.scenario)
    if result is None:
        return 2
    try:
        info = write_chrome_trace(result, args.out or f"{args.scenario}.trace.json", max_events=args.max_events)
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
    if run.result is None:
        print(
            f"scenario {args.scenario!r} stops with {type(run.error).__name__}, so there is no run to show",
            file=sys.stderr,
        )
        return 2
    try:
        doc = build_document(run, max_events=args.max_events, first_event=args.first_event)
        path = write_page(doc, args.out or f"{args.scenario}.html", step=args.step, present=args.present)
    except OSError as exc:
        return _cannot_write(exc, args.out or f"{args.scenario}.html")
    except ValueError as exc:
        print(f"cannot write the page: {exc}", file=sys.stderr)
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


def cmd_grade(args: argparse.Namespace) -> int:
    """Grade every student file in a folder, each in its own process with a time limit, into a CSV: one row per
    file with its exercise, verdict, try and first divergence. A file that hangs or crashes is a row, not a stop."""
    from ..teach.exercises import EXERCISES
    from ..teach.grading import grade_folder, summary, write_csv

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
    return 0


def cmd_timeline(args: argparse.Namespace) -> int:
    """Print a scenario's timeline as a text grid (one row per device)."""
    from ..views.textgrid import text_timeline

    result = _result(args.scenario)
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
    print(grid)
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure latency, bandwidth and compute speed on real torch.distributed ranks; write a cost model."""
    try:
        from ..backends.calibrate import main_calibrate
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
    """The finished run of a named scenario, or None (with the reason on stderr)."""
    try:
        run = get(name).run()
    except KeyError as exc:
        print(exc.args[0], file=sys.stderr)
        return None
    if run.result is None:
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


COMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], Callable[[argparse.ArgumentParser], None]]] = {
    "demo": (
        cmd_demo,
        lambda p: (
            p.add_argument("--brief", action="store_true", help="print the event log, not every step"),
            p.add_argument(
                "--width",
                type=bounded_int(40, 1000),
                help="keep lines within this many characters (default: the terminal's, at most 120)",
            ),
        ),
    ),
    "list": (cmd_list, lambda p: None),
    "run": (
        cmd_run,
        lambda p: (
            p.add_argument("scenario", help="a scenario name (see `list`)"),
            p.add_argument("--step", action="store_true", help="show every device's memory after each event"),
            p.add_argument(
                "--values",
                choices=("new", "all", "names"),
                help="with --step: show every value held (all), only the value each event places in full (new), "
                "or names only (default: all where each device's values fit on one line, else new)",
            ),
            *_filters(p),
            p.add_argument(
                "--max-elements",
                type=bounded_int(0, 100_000),
                default=ValueStyle().max_elements,
                help="show arrays of up to this many numbers in full; larger ones as shape, first values and norm "
                f"(default: {ValueStyle().max_elements})",
            ),
            p.add_argument(
                "--width",
                type=bounded_int(40, 1000),
                help="keep lines within this many characters (default: the terminal's, at most 120)",
            ),
        ),
    ),
    "html": (
        cmd_html,
        lambda p: (
            p.add_argument("scenario", help="a scenario name (see `list`)"),
            p.add_argument(
                "-o",
                "--out",
                type=output_file_like("page.html"),
                metavar="FILE",
                help="the page to write, or - for standard output (default: SCENARIO.html)",
            ),
            p.add_argument(
                "--step",
                type=int,
                default=0,
                help="the step the page opens at (default: 0, the start; a link can name one too: page.html#step=40)",
            ),
            p.add_argument(
                "--present",
                action="store_true",
                help="the projector mode: every card, the messages in flight and the timeline on one screen "
                "(1280 x 720 and up), the newest values as numbers, larger type; keys: arrows step, Home/End, "
                "D jumps to the first divergence",
            ),
            p.add_argument(
                "--max-events",
                type=bounded_int(1, MAX_EVENTS_LIMIT),
                default=MAX_EVENTS,
                help=f"show at most this many events; longer runs are thinned to a window, and the page says so "
                f"(default: {MAX_EVENTS:,})",
            ),
            p.add_argument(
                "--first-event",
                type=int,
                help="where a thinned run's window starts (default: the start, or near the first divergence)",
            ),
        ),
    ),
    "explore": (
        cmd_explore,
        lambda p: p.add_argument(
            "-o",
            "--out",
            type=output_file_like("schedules.html"),
            metavar="FILE",
            default="schedules.html",
            help="the page to write (default: schedules.html)",
        ),
    ),
    "grade": (
        cmd_grade,
        lambda p: (
            p.add_argument("folder", nargs="?", type=Path, metavar="FOLDER", help="the folder of student files"),
            p.add_argument(
                "--csv",
                type=output_file_like("grades.csv"),
                default="grades.csv",
                metavar="FILE",
                help="the CSV to write, one row per file (default: grades.csv)",
            ),
            p.add_argument(
                "--timeout",
                type=bounded_int(1, 3600),
                default=60,
                help="seconds a file may take before it is stopped and marked 'timed out' (default: 60)",
            ),
            p.add_argument(
                "--jobs",
                type=bounded_int(1, 64),
                default=min(8, os.cpu_count() or 1),
                help="files graded at once (default: the number of CPUs, at most 8)",
            ),
            p.add_argument("--list", action="store_true", help="list the exercises a file can name, and stop"),
        ),
    ),
    "figures": (
        cmd_figures,
        lambda p: (
            p.add_argument("only", nargs="*", metavar="NAME", help="build only these figures (see --list)"),
            p.add_argument("--out", type=output_folder, default="figures", help="output folder (default: figures)"),
            p.add_argument("--list", action="store_true", help="list the figures and their files"),
            p.add_argument(
                "--style",
                choices=("slide", "paper"),
                default="slide",
                help="slide (the default): 1920 px wide, text sized for a projector; paper: 1650 px, smaller text",
            ),
        ),
    ),
    "export": (
        cmd_export,
        lambda p: (
            p.add_argument("scenario", help="a scenario name (see `list`)"),
            p.add_argument(
                "--out",
                type=output_file_like("run.trace.json"),
                help="output file, or - for standard output (default: SCENARIO.trace.json)",
            ),
            p.add_argument(
                "--max-events",
                type=bounded_int(1, MAX_EVENTS_LIMIT),
                default=1_000_000,
                help="collapse per-chunk events above this many (default: 1,000,000)",
            ),
        ),
    ),
    "timeline": (
        cmd_timeline,
        lambda p: (
            p.add_argument("scenario", help="a scenario name (see `list`)"),
            p.add_argument(
                "--width",
                type=bounded_int(1, MAX_SLOTS),
                help="at most this many time slots (default: what fits the terminal); a slot is a round length of "
                f"time (1, 2, 2.5 or 5 times a power of ten), so the grid may use fewer; at most {MAX_SLOTS:,}",
            ),
            p.add_argument(
                "--columns",
                type=bounded_int(40, 1000),
                help="keep lines within this many characters (default: the terminal's, at most 120)",
            ),
            p.add_argument("--devices", type=devices_arg, help="only these devices' rows, e.g. 0,2 or 0-3"),
            p.add_argument(
                "--window",
                type=_window,
                metavar="START:END",
                help="only this part of the run, in microseconds, e.g. 2:10 (either end may be left out)",
            ),
        ),
    ),
    "whatif": (cmd_whatif, add_whatif_args),
    "validate": (
        cmd_validate,
        lambda p: p.add_argument("--json", action="store_true", help="print the rows as JSON"),
    ),
    "calibrate": (
        cmd_calibrate,
        lambda p: (
            p.add_argument(
                "--ranks",
                type=bounded_int(2, MAX_RANKS),
                default=2,
                help="ranks to measure on, all at once (default: 2)",
            ),
            p.add_argument(
                "--backend",
                default="gloo",
                choices=("gloo", "nccl"),
                help="torch.distributed backend: gloo on CPUs, nccl with one GPU per rank (default: gloo)",
            ),
            p.add_argument(
                "--out",
                type=output_file_like("cost.json"),
                default="cost.json",
                help="cost model file to write (default: cost.json)",
            ),
            p.add_argument(
                "--repeats",
                type=bounded_int(1, 10_000),
                default=20,
                help="repeats of each message size and addition (default: 20)",
            ),
            p.add_argument(
                "--pattern",
                default="pingpong",
                choices=("pingpong", "exchange", "ring"),
                help="one direction at a time, both partners at once, or every rank to the next at once (default: pingpong)",
            ),
            p.add_argument(
                "--statistic",
                default="median",
                choices=("median", "mean"),
                help="per size: the typical message, or the expected cost with the usual stalls, far-out repeats "
                "left out (default: median)",
            ),
            p.add_argument(
                "--spread",
                action="store_true",
                help="keep every measured message time: each simulated message then draws its time from them",
            ),
        ),
    ),
}


EPILOGS = {
    "grade": "A student file is a .py file that names its exercise and holds the answer: a line EXERCISE = "
    '"ring-all-reduce" (see --list), and the function the notebook\'s grading cell grades (ex.grade(ring)): the '
    "one function the file defines, or the one a line ANSWER = ring names (ANSWER = rows for the schedule "
    'exercise, whose answer is data). STUDENT = "ada" names the student; by default the subfolder the file is in '
    "(FOLDER/ada/ring.py), else the file's name. Files in name order; a student's files for one exercise are their "
    "tries 1, 2, ... Columns: file, student, exercise, verdict (passed, FAILED, not verified; timed out, crashed, "
    "not graded), try_number, tries, first_divergence, detail, seconds. Progress goes to stderr. Each file runs "
    "with your rights: this is not a sandbox.",
}


def _filters(p: argparse.ArgumentParser) -> tuple:
    """The event filters ``run`` takes."""
    return (
        p.add_argument("--devices", type=devices_arg, help="only events on these devices, e.g. 0,2 or 0-3"),
        p.add_argument(
            "--steps", type=steps_arg, metavar="FIRST:LAST", help="only these steps (1-based), e.g. 10:40, 10: or :40"
        ),
        p.add_argument(
            "--kinds", type=kinds_arg, help="only these kinds of event, e.g. send,recv (send, recv, op, hold, free)"
        ),
    )


def _window(text: str) -> tuple[float | None, float | None]:
    lo, sep, hi = text.partition(":")
    try:
        start, end = (float(lo) if lo.strip() else None, float(hi) if hi.strip() else None)
    except ValueError:
        raise argparse.ArgumentTypeError(f"cannot read {text!r} as START:END in microseconds, e.g. 2:10") from None
    if any(t is not None and not abs(t) < 1e300 for t in (start, end)):  # inf, nan, or past what seconds hold
        raise argparse.ArgumentTypeError(f"{text}: give finite times in microseconds, e.g. 2:10")
    if start is not None and end is not None and not end > start:
        swapped = f", e.g. {end:g}:{start:g}" if end < start else ""
        raise argparse.ArgumentTypeError(
            f"{text}: the end ({end:g} us) must come after the start ({start:g} us){swapped}"
        )
    return start, end


class _Help(argparse.HelpFormatter):
    """argparse's help, at most 120 columns wide however wide the terminal, never breaking a word at its
    hyphen (``wrong-input`` is a scenario's name)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=min(120, shutil.get_terminal_size().columns))

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        one = " ".join(text.split())
        return textwrap.fill(one, width, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        formatter_class=_Help,
        prog="python -m simulator",
        description="An educational simulator of parallelism strategies: devices with private memory, "
        "messages on a simulated clock, every run checked against one device.",
        epilog="Start with `python -m simulator demo`, then `python -m simulator run wrong-input --step`, "
        "or `python -m simulator html wrong-input -o bug.html` and open the page in a browser.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (fn, add_args) in COMMANDS.items():
        p = sub.add_parser(
            name,
            help=_summary(fn.__doc__),
            description=fn.__doc__,
            epilog=EPILOGS.get(name),
            formatter_class=_Help,
        )
        add_args(p)
        p.set_defaults(func=fn)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    with _printable_everything():
        args = build_parser().parse_args(argv)
        try:
            return args.func(args)
        except BrokenPipeError:  # e.g. `python -m simulator demo | head`: the reader left, which is fine
            sys.stderr.close()
            return 0


@contextlib.contextmanager
def _printable_everything() -> Iterator[None]:
    """Text the user typed is printed back (a file name, an unknown scenario) and may hold what the terminal's
    encoding cannot (a lone surrogate: a file name that is not UTF-8): print it escaped, never fail on it."""
    streams = [(s, s.errors) for s in (sys.stdout, sys.stderr) if hasattr(s, "reconfigure") and not s.closed]
    for stream, _ in streams:
        stream.reconfigure(errors="backslashreplace")
    try:
        yield
    finally:
        for stream, errors in streams:
            if not stream.closed:
                stream.reconfigure(errors=errors)


def _summary(doc: str | None) -> str:
    """A command's one-line help: the first sentence of its docstring, however it is wrapped."""
    first = " ".join((doc or "").strip().split("\n\n")[0].split())
    return re.split(r"\.\s+(?=[A-Z])", first)[0].rstrip(".") + "."  # (not at "et al. 2021")
