"""Prediction answers kept out of the package: a digest to check a prediction, and the "why" sealed with the answer.

The package holds, for each question, a digest of its answer and the explanation encrypted with a key made from
the answer itself: a right prediction opens it, nothing else does, and neither can be printed from the package
before a try. The answers in plain words are in ``instructor/exercises/answers.py`` (a test checks that the
sealed forms here match them). A prediction is compared after ``normal``: numbers to 6 significant digits (so
49.0000001 is 49), shapes as tuples of ints, words without case or surrounding spaces.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from typing import Any

_SALT = b"parallelism-simulator/exercises/v1"


def normal(answer: Any) -> str:
    """An answer in the one form its digest is taken of."""
    if isinstance(answer, bool):
        return f"bool:{answer}"
    if isinstance(answer, (tuple, list)):
        try:
            return "(" + ",".join(normal(int(v)) for v in answer) + ")"
        except (TypeError, ValueError):
            return "(" + ",".join(normal(v) for v in answer) + ")"
    try:
        number = float(answer)
    except (TypeError, ValueError):
        return str(answer).strip().lower()
    return f"{number:.6g}"


def digest(exercise: str, key: str, answer: Any) -> str:
    """What the package keeps to check a prediction of ``answer``."""
    return hashlib.sha256(b"digest|" + _SALT + f"|{exercise}|{key}|{normal(answer)}".encode()).hexdigest()[:32]


def seal(exercise: str, key: str, answer: Any, text: str) -> str:
    """``text`` encrypted with a key made from the answer (what ``reveal`` opens with a right prediction)."""
    data = text.encode()
    return base64.b64encode(_xor(data, _stream(exercise, key, answer, len(data)))).decode()


def reveal(exercise: str, key: str, answer: Any, sealed: str) -> str:
    """The sealed text, opened with a prediction (right only if its digest matched)."""
    data = base64.b64decode(sealed)
    return _xor(data, _stream(exercise, key, answer, len(data))).decode(errors="replace")


def _stream(exercise: str, key: str, answer: Any, n: int) -> bytes:
    seed = hashlib.sha256(b"key|" + _SALT + f"|{exercise}|{key}|{normal(answer)}".encode()).digest()
    out = bytearray()
    block = 0
    while len(out) < n:
        out += hashlib.sha256(seed + block.to_bytes(8, "big")).digest()
        block += 1
    return bytes(out[:n])


def _xor(data: bytes, stream: Sequence[int]) -> bytes:
    return bytes(a ^ b for a, b in zip(data, stream))
