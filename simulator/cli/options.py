"""Every command's arguments, with the help that explains them: the table ``main.build_parser`` reads."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from ..core.values import ValueStyle
from ..views.textgrid import MAX_SLOTS
from ..views.web.document import MAX_EVENTS
from .commands import (
    cmd_calibrate,
    cmd_demo,
    cmd_explore,
    cmd_export,
    cmd_figures,
    cmd_grade,
    cmd_html,
    cmd_list,
    cmd_memory,
    cmd_run,
    cmd_timeline,
)
from .show import (
    devices_arg,
    kinds_arg,
    steps_arg,
)
from .types import bounded_int, output_file_like, output_folder
from .whatif import add_whatif_args, cmd_validate, cmd_whatif

MAX_EVENTS_LIMIT = 10**9  # an event budget, not an allocation; beyond this no viewer opens the file anyway
MAX_RANKS = 64  # real processes on this one machine

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
    "memory": (
        cmd_memory,
        lambda p: p.add_argument(
            "-o",
            "--out",
            type=output_file_like("memory.html"),
            metavar="FILE",
            default="memory.html",
            help="the page to write (default: memory.html)",
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
            p.add_argument(
                "-o", "--out", type=output_folder, default="figures", help="output folder (default: figures)"
            ),
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
                "-o",
                "--out",
                type=output_file_like("run.trace.json"),
                metavar="FILE",
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
                "-o",
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
    "calibrate": "Use the cost model it writes: from simulator.calibration.costfile import load_cost, then "
    "World(n, cost=load_cost('cost.json')). docs/real-processes.md says how the fit is made and how far to trust it.",
    "grade": "A student file is a .py file that names its exercise and holds the answer: a line EXERCISE = "
    '"ring-all-reduce" (see --list), and the function the notebook\'s grading cell grades (ex.grade(ring)): the '
    "one function the file defines, or the one a line ANSWER = ring names, after it (ANSWER = schedule for the "
    'schedule exercise, whose answer is the function schedule(p, m)). STUDENT = "ada" names the student; by default the subfolder the file is in '
    "(FOLDER/ada/ring.py), else the file's name. An answer cell copied from its notebook works: the notebook's setup "
    "names (stage_a, mean_gradient, BETA, np) are given to the file. A student's files for one exercise are their "
    "tries 1, 2, ... by the files' times. Columns: file, student, exercise, verdict (passed, FAILED, not verified; "
    "timed out, crashed, not graded), try_number, tries, first_divergence, detail, seconds, handed_in, hint; "
    "beside it, FILE-students.csv has one row per student (exercises passed, tries, last verdict, hint). Progress goes to "
    "stderr. The verdict is made in this process; each answer runs in a process of its own, from a scratch folder, "
    "with limits on memory, time, output and processes, and cannot read instructor/ or the other files.",
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
