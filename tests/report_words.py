"""A check report's words, whatever its line breaks: reports wrap within 120 columns, tests look for phrases."""

from typing import Any


def words(report: Any) -> str:
    """``str(report)`` with every run of whitespace (a line break of the wrapping included) as one space."""
    return " ".join(str(report).split())
