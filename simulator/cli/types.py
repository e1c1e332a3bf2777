"""Argument types for the command line: numbers within bounds, and paths that can be written.

argparse calls each type with the text the user typed; an ``ArgumentTypeError`` becomes a usage
error that names the option, the value and why it is refused (exit status 2), never a traceback.
Checking here, before any work, means a long run is never lost to a bad ``--out`` at the very end,
and no number the user typed can ask for an absurd allocation (``--width 1000000000``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path


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
    """A file path we can create or replace: not empty, not a folder, in a folder we may write into."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"an empty file name; give a path such as out/{example}")
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder; give a file name inside it, e.g. {path / example}")
    _check_writable_folder(path.parent, text)
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
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a file, not a folder; give a folder name")
    _check_writable_folder(path, text)
    return path


def _check_writable_folder(folder: Path, text: str) -> None:
    """The folder (or, if it is still to be made, its nearest existing parent) must be a writable folder."""
    existing = folder if str(folder) else Path(".")
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text}: no permission to write into {existing}/")
