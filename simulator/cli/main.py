"""The command line: ``python -m simulator demo | list | run NAME | html NAME | explore | memory | timeline NAME | export NAME |
figures | grade FOLDER | whatif | validate | calibrate``.

``main`` builds the parser from the table of commands (``options.COMMANDS``: each command's function in
``commands.py``, and its arguments) and runs one. See ``--help``.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import re
import shutil
import sys
import textwrap
from collections.abc import Iterator, Sequence
from typing import NoReturn

from .options import COMMANDS, EPILOGS


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


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose "arguments are required" says where to find one."""

    def error(self, message: str) -> NoReturn:
        if message.endswith("required: scenario"):
            message += " (`python -m simulator list` names them, e.g. wrong-input)"
        elif message.endswith("required: COMMAND"):
            message += f" (one of {', '.join(COMMANDS)}; start with `python -m simulator demo`)"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
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
        p.set_defaults(func=fn, command_parser=p)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    with _printable_everything():
        args, unknown = build_parser().parse_known_args(argv)
        _refuse_unknown_options(args, unknown)
        _refuse_lost_values(args)
        try:
            return args.func(args)
        except BrokenPipeError:  # e.g. `python -m simulator demo | head`: the reader left, which is fine
            sys.stderr.close()
            return 0


def _refuse_unknown_options(args: argparse.Namespace, unknown: list[str]) -> None:
    """A mistyped flag (``whatif --tpp 2``) is refused by the command it was given to, with that command's usage
    and the flag it most likely meant, not by the top-level parser with no hint."""
    if not unknown:
        return
    parser = args.command_parser
    flags = [flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")]
    hints = []
    for word in unknown:
        name = word.split("=", 1)[0]
        close = difflib.get_close_matches(name, flags, n=1, cutoff=0.6) if name.startswith("-") else []
        if close:
            hints.append(f"{name}: did you mean {close[0]}?")
    hint = f" ({'; '.join(hints)})" if hints else f" (`{parser.prog} --help` lists its options)"
    parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")


def _refuse_lost_values(args: argparse.Namespace) -> None:
    """argparse takes the value of ``--opt=--`` for its end-of-options marker and leaves the option an empty list:
    an option of one value given that way gets the usage error it should have had, not a crash further on."""
    parser = args.command_parser
    for action in parser._actions:
        if action.option_strings and action.nargs is None and isinstance(getattr(args, action.dest, None), list):
            parser.error(f"argument {'/'.join(action.option_strings)}: expected one value, got none")


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
