"""Message tags: users' tags below 2**30, the collectives' above, and the one check both backends use.

Collectives tag their messages from ``TAG_BASE`` up (see simulator/collectives/call.py), with a
``CollectiveTag``: the only kind of tag a device accepts in that range, so a user's tag can never be
mistaken for a collective's message (which would silently corrupt a later all-reduce).
"""

from __future__ import annotations

from typing import Any

import numpy as np

TAG_BASE = 1 << 30


class CollectiveTag(int):
    """A tag in the collectives' reserved range (from TAG_BASE); the only kind a device accepts there."""

    __slots__ = ()


def user_tag(tag: Any, rank: int, op: str) -> int:
    """A valid tag as an int: 0 to TAG_BASE - 1, or a collective's own tag; else an error with the fix."""
    if type(tag) is CollectiveTag:
        return tag
    if isinstance(tag, (bool, np.bool_)) or not isinstance(tag, (int, np.integer)):
        raise TypeError(
            f"device {rank}: {op}(tag={tag!r}): a tag is an int (0 to {TAG_BASE - 1:,}); got {type(tag).__name__}"
        )
    tag = int(tag)
    if tag < 0:
        raise ValueError(f"device {rank}: {op}(tag={tag}): tags are >= 0; use a tag from 0 to {TAG_BASE - 1:,}")
    if tag >= TAG_BASE:
        raise ValueError(
            f"device {rank}: {op}(tag={tag:,}): tags from {TAG_BASE:,} (2**30) up are reserved for the collectives, "
            f"whose messages would be mixed up with yours; use a tag below {TAG_BASE:,}"
        )
    return tag
