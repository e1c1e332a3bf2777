"""Argument types for the command line: numbers within bounds, and paths that can be written.

argparse calls each type with the text the user typed; an ``ArgumentTypeError`` becomes a usage
error that names the option, the value and why it is refused (exit status 2), never a traceback.
Checking here, before any work, means a long run is never lost to a bad ``--out`` at the very end,
and no number the user typed can ask for an absurd allocation (``--width 1000000000``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ..core.files import STDOUT, check_folder, check_writable, short_path


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """A type for a whole number in ``low..high`` (both included)."""

    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", "").replace(",", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is out of range: give a whole number from {low:,} to {high:,}")
        return value

    parse.__name__ = "whole number"  # argparse names the type in its messages
    return parse


def output_file(text: str, example: str = "run.json") -> Path:
    """A file we can create or replace, a device or pipe we can write through, or ``-`` (standard output):
    not empty, not a folder; a file's folder, where it exists, one we may write into (see
    ``simulator.core.files`` for what each kind of path gets)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"an empty file name; give a path such as out/{example}, or - for standard output"
        )
    path = Path(text)
    try:
        if text != STDOUT and path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name inside it, e.g. {path / example}")
        check_writable(path)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot write {short_path(text)}: {_reason(exc)}") from None
    return path


def output_file_like(example: str) -> Callable[[str], Path]:
    """``output_file`` whose messages suggest a file named like ``example`` (a page, a trace, a cost model)."""

    def parse(text: str) -> Path:
        return output_file(text, example)

    parse.__name__ = "file name"
    return parse


def output_folder(text: str) -> Path:
    """A folder we can write into (created if missing): not empty, not a file."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty folder name; give a path such as figures")
    path = Path(text)
    try:
        if path.exists() and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{text} is a file, not a folder; give a folder name")
        check_folder(path)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot write into {short_path(text)}: {_reason(exc)}") from None
    return path


def _reason(exc: OSError) -> str:
    """What an OSError says, without its number and file name (the message names the file)."""
    return exc.strerror if exc.errno is not None and exc.strerror else str(exc)
