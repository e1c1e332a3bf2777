"""Short labels for ops in timelines: which pass and which microbatch, as the pipeline papers draw them.

A training step's ops are named after the values they make (``h2.mb3``, ``dz2.mb3``, ``dW2.mb3``,
see ``simulator.parallel.mlp``); in a timeline block there is room for only a few characters, so
each op is labelled by its pass and microbatch: ``F3`` (forward), ``I3`` (input gradients), ``W3``
(weight gradients), or ``B3`` where a schedule runs the whole backward as one action (GPipe, 1F1B).
Consecutive ops of one device with the same label are one block (a stage's forward over several
layers is one ``F3``). Other ops keep their own names; when a name does not fit its block, the
microbatch number is what is kept (``stage.mb3`` in three characters is ``st3``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

_MB = re.compile(r"[._]?mb(\d+)")  # "h2.mb3", "stage_mb3", "Smb3"
_KINDS = (  # the training-step names of simulator.parallel.mlp, and the pass each belongs to
    (re.compile(r"^(h\d+|loss|t|x|z\d+)\.mb(\d+)"), "F"),
    (re.compile(r"^(dh\d+|dz\d+)\.mb(\d+)"), "I"),
    (re.compile(r"^(dW\d+|db\d+)\.mb(\d+)$"), "W"),  # not the buffers summed over microbatches
)
PASS_WORDS = {"F": "forward", "B": "backward", "I": "input gradients", "W": "weight gradients"}
KIND_WORDS = {"F": "forward", "I": "backward: input gradients", "W": "backward: weight gradients"}
OTHER_WORDS = "gradient sync and optimizer"


def pass_kind(name: str) -> str:
    """What an op of a training step does, in words (the colour groups of the schedule figures)."""
    label = pass_label(name)
    return KIND_WORDS[label[0]] if label else OTHER_WORDS


def pass_label(name: str) -> str:
    """``F3``, ``I3`` or ``W3`` for an op of a training step (forward, input or weight gradients of
    microbatch 3); "" for any other op."""
    for pattern, letter in _KINDS:
        m = pattern.match(name)
        if m:
            return f"{letter}{m[2]}"
    return ""


def op_tag(name: str) -> str:
    """The label of an op in a timeline: its pass and microbatch (``F3``) for a training step's ops,
    else its own name."""
    return pass_label(name) or name


def schedule_tag(kinds: Iterable[str]) -> Callable[[str], str]:
    """Labels for a schedule whose actions have these kinds: where the backward is one action (``B``,
    as in GPipe and 1F1B), its input- and weight-gradient ops are both labelled ``B3``."""
    split = bool({"I", "W"} & set(kinds))

    def tag(name: str) -> str:
        label = op_tag(name)
        if not split and label[:1] in ("I", "W") and label != name:
            return "B" + label[1:]
        return label

    return tag


def microbatch_of(name: str) -> str | None:
    """The microbatch number a name carries (``h2.mb3`` -> "3"), or None; a sum over microbatches
    (``dW3.mb0+dW3.mb1``) carries none."""
    if "+" in name:
        return None
    m = _MB.search(name)
    return m[1] if m else None


def fit(label: str, room: int) -> str:
    """``label`` in at most ``room`` characters, keeping its microbatch number where it has one."""
    if len(label) <= room:
        return label
    if room <= 0:
        return ""
    mb = microbatch_of(label)
    if mb is not None and len(mb) <= room:  # the number first: with no room for more, the number alone
        head = label[: _MB.search(label).start()] if len(mb) < room else ""
        sep = "." if head[-1:].isdigit() and len(mb) + 1 < room else ""  # S0 of microbatch 3: "S0.3", not "S03"
        return head[: room - len(mb) - len(sep)] + sep + mb
    return label[:room]


def blocks(spans: Sequence[Any], tag: Callable[[str], str], gap: float = 1e-15) -> list[tuple[float, float, str]]:
    """Consecutive spans (in time order, one device) that carry the same label and touch, as one block:
    ``(t0, t1, label)``; spans of no time are left out. A span is anything with ``t0``, ``t1`` and ``name``."""
    out: list[tuple[float, float, str]] = []
    for s in spans:
        if s.t1 <= s.t0:
            continue  # an op of no time (a buffer's bookkeeping) is not drawn, and does not split a block
        label = tag(s.name)
        if out and out[-1][2] == label and s.t0 - out[-1][1] <= gap:
            out[-1] = (out[-1][0], max(out[-1][1], s.t1), label)
        else:
            out.append((s.t0, s.t1, label))
    return out


def legend_words(labels: Iterable[str]) -> str:
    """What the pass letters among ``labels`` mean, e.g. "F3 = forward of microbatch 3, B3 = backward"."""
    letters = []
    for label in labels:
        m = re.fullmatch(r"([FBIW])(\d+)", label)
        if m and m[1] not in letters:
            letters.append(m[1])
    if not letters:
        return ""
    order = [k for k in "FBIW" if k in letters]
    return ", ".join(f"{k}n = {PASS_WORDS[k]}" for k in order) + " of microbatch n"
