"""Values a check cannot place by name: a name the model does not know (with the name it should have, where the
value equals one of the model's), a message without a name (placed by the value it carries, or said to carry none
of the model's), and a right value that also equals another of the model's values (an input that cannot tell two
values apart). ``run_check._Checker`` holds this as a mixin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core.trace import Message
from . import diagnose
from .compare import show, structured
from .reference import Reference
from .verdict import Unchecked, _message


class _Unnamed:
    """What a check says of values it cannot place by name (mixed into ``run_check._Checker``)."""

    def _unknown(
        self, rank: int, name: str, value: Any, context: str, partial: bool = False, partials: str | None = None
    ) -> None:
        if (rank, name) in self._seen_unknown:
            return
        self._seen_unknown.add((rank, name))
        ref = self._ref(rank)
        hint = self._identify(ref, value)
        if hint and ref.modules:  # a torch program names values by module path: that is what it can change
            advice = (
                f", but it equals {hint[0]}: give the module the path it has in the single-device model, "
                f"{hint[1].split(' with ')[0]} (Reference.of_torch names each module's output by its path)"
            )
        elif hint:
            advice = f", but it equals {hint[0]}: name it {hint[1]}"
        elif partials is not None:  # a collective's term, named by partials=
            advice = (
                f": the collective names its members' terms {partials}[0], {partials}[1], ... (partials={partials!r}); "
                "give the model values of those names, or leave partials= out"
            )
        elif partial:  # already said to be one term of a sum: what is left is the sum's name
            advice = (
                ", and a term of a sum is named after the sum it adds up to: give it the sum's name from the "
                "reference, with partial=True as now"
            )
        elif ref.modules and ".grad" in name and not any(".grad" in known for known in ref.values):
            advice = (  # the program ran a backward pass, the reference did not: no path would make it compared
                ", and the single-device model ran no backward pass, so it has no gradients to compare: give "
                "Reference.of_torch a function that runs the program's backward too (def step(model, x): "
                "out = model(x); out.sum().backward(); return out)"
            )
        elif ref.modules:
            advice = (
                ", and its value is none of the single-device model's: give the module the path it has in the model "
                "(Reference.of_torch names each module's output by its path, wrappers' module. and _orig_mod. left out)"
            )
        else:
            advice = (
                ", and its value is none of the reference's (if it is one term of a sum or of an average, as a "
                "replica's gradient is, name it after the sum or the average and say partial=True)"
            )
        context = f" {context}" if context else ""
        if self.own_names:  # the program's own intermediate: every value of the model is still compared
            also = f": it equals {hint[0]} (name it {hint[1]} to have it compared)" if hint else ": not compared"
            self.notes.append(f"{name} on device {rank}{context} is a name of your own, not the model's{also}")
            return
        self.unchecked.append(
            Unchecked("unknown name", f"{name} on device {rank}{context} is not a name in the reference{advice}", name)
        )

    def _place(self, i: int, msg: Message) -> None:
        """An unnamed message: find the reference value it carries, or say that none fits."""
        ref = self._ref(msg.dst)
        if self.own_names:  # a step of the program's own (a running sum): what it leads to is compared
            if ref.identify(msg.payload, rtol=self.rtol, atol=self.atol):
                self._ambiguous(ref, msg.payload, None, lambda: f"{_message(msg)}, with no name, carries")
            return
        if self._identify(ref, msg.payload) or self._partial_of(msg.src, msg.payload):
            self._ambiguous(ref, msg.payload, None, lambda: f"{_message(msg)}, with no name, carries")
            return
        self._unplaced.append(msg)
        cast = diagnose.cast_down(ref, msg.payload)
        fix = (
            f" (it is {cast}): send it in the model's precision"
            if cast
            else ": say what it carries, recv(..., name=...), so it can be checked"
        )
        self.unchecked.append(
            Unchecked(
                "unplaced message",
                f"{_message(msg)} has no name and carries {show(msg.payload)}, which is no value of the single-device "
                f"run{fix}",
            )
        )

    def _identify(self, ref: Reference, value: Any) -> tuple[str, str] | None:
        """('S1 on one device', 'S1'), or a block of a value with the index= to say, for a value under no name."""
        names = ref.identify(value, rtol=self.rtol, atol=self.atol)
        if names:
            return " and ".join(f"{n} on one device" for n in names[:3]), " or ".join(names[:3])
        if structured(value):
            return None
        a = np.asarray(value)
        if self._block_searches <= 0:  # each search scans every value: a few dozen explain plenty
            return None
        self._block_searches -= 1
        for n, v in ref.values.items():
            b = np.asarray(v)
            if b.dtype.kind in "biuf" and a.dtype.kind in "biuf" and a.ndim == b.ndim and a.size < b.size:
                block = diagnose.block_of(a, b)
                if block is not None:
                    at = diagnose.show_index(block)
                    return f"the block {at} of {n} on one device", f"{n} with index=np.s_{at}"
        return None

    def _ambiguous(self, ref: Reference, value: Any, name: str | None, where: str | Callable[[], str] | None) -> bool:
        """A correct value that also equals another named value: this input cannot tell the two apart. Notes it
        (``where``: its words, or a function that makes them; None: only say whether there is something to note).

        ``name`` is the value the slot should hold, where known (a message's name); an op's input or a
        result is ambiguous when two different named values equal it.
        """
        if name is None:  # then a function of the value alone: once found plain, it is plain (an input used again)
            key = (id(ref), id(value))
            if key in self._unambiguous:
                return False
            if self._ambiguous_now(ref, value, name, where):
                return True
            self._unambiguous[key] = value  # (kept, so that its id is not given to another while the check goes on)
            return False
        return self._ambiguous_now(ref, value, name, where)

    def _ambiguous_now(self, ref: Reference, value: Any, name: str | None, where: Any) -> bool:
        """``_ambiguous``, worked out."""
        if structured(value):
            return False
        a = np.asarray(value)
        if not ref.has_shape(a.shape):
            return False  # no named value of its shape: it equals none (the common case, told at once)
        if a.dtype.kind not in "biuf" or not a.any():
            return False  # zeros (fresh buffers, zero gradients) equal each other in every model
        names = self._identify_names(ref, a)
        others = [n for n in names if n != name]
        if len(others) < (1 if name in names else 2):
            return False
        if where is not None:
            where = where if isinstance(where, str) else where()
            self.notes.append(
                f"{where} {show(value)}, but with these inputs "
                + " and ".join(names[:4])
                + " are equal: a program that used one for the other would look the same; try another input"
            )
        return True
