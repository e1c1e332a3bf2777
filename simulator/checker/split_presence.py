"""What a device had, as the split check's rules ask it while the walk goes on: what reached it in a message or a
collective, what it held or computed itself, whether a value the split keeps elsewhere ever reached it (and a value
found on a device it never reached: ``_foreign``), and the rules on what it was given (a held part, an op on the whole
of an input given in part, asked once per value: ``_wholes_of``).

Each question is asked again and again as the walk goes on, and the lists it reads only grow: each message or value
is looked at once per name (``_looked``). ``split_check._SplitWalk`` holds this as a mixin, with the lists it fills.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.trace import Message, Op
from ..cost.meta import MetaArray
from . import diagnose
from .compare import same, structured
from .reference import Reference
from .split import ALL, elements, part_words


class _Presence:
    """The questions about what a device had (mixed into ``split_check._SplitWalk``, which fills the lists)."""

    def _got(self, rank: int) -> list[Message]:
        """What device ``rank`` has received so far, in order (a columnar walk keeps rows: made records when asked)."""
        received, rows = self.received[rank], self._received_rows[rank]
        if rows:
            received.extend(map(self.trace.message_at_row, rows))
            rows.clear()
        return received

    def _carries(self, msg: Message) -> list[str]:
        """Its name, and the model's values it equals whatever the receiver named it (what the device now has)."""
        found = self._carried.get(msg.id)
        if found is None:
            found = [msg.name] if msg.name is not None else []
            if msg.payload is not None and not structured(msg.payload):
                ref = self.ref_of(msg.dst)
                found += [n for n in ref.identify(msg.payload, rtol=self.rtol, atol=self.atol) if n not in found]
            self._carried[msg.id] = found
        return found

    def _brought(self, rank: int, name: str) -> bool:
        """Whether ``name``, or a block of it, reached device ``rank`` in a message or a collective."""
        return self._arrived(rank, name) or self._among("collected", name, rank)

    def _present(self, rank: int, name: str) -> bool:
        """Whether ``name``, or a block of it, was ever on device ``rank``: held or computed there under any name,
        received, or brought by a collective."""
        if name in self.own_names[rank] or self._brought(rank, name):
            return True
        return self._among("own", name, rank)

    def _among(self, which: str, name: str, rank: int) -> bool:
        """Whether one of the values a device's collectives brought (``which="collected"``) or it held or computed
        itself (``"own"``) is the model's ``name`` or a block of it (True when there is nothing to compare with).
        The lists only grow as the walk goes on: each value is looked at once per name (``_looked``)."""
        whole = self.ref_of(rank).values.get(name)
        if whole is None or structured(whole):
            return True
        key = (which, rank, name)
        looked = self._looked.get(key, 0)
        if looked is True:
            return True
        values = self.collected[rank] if which == "collected" else self.own[rank]
        for item in values[looked:]:
            v = item if which == "collected" else item[1]
            if v is None or structured(v):
                continue
            if _is_block(v, whole) or (np.shape(v) == np.shape(whole) and same(v, whole, self.rtol, self.atol)):
                self._looked[key] = True
                return True
        self._looked[key] = len(values)
        return False

    def _foreign(self, i: int, rank: int, value: Any, rec: Op | None, verb: str) -> None:
        """A value that is only some other devices' (by the split) on a device it never reached: read through a
        Python object the devices share (a global, a closure), which real processes do not have."""
        if not self.split.compute:  # no value belongs to some devices only: none can be foreign (_elsewhere)
            return
        # Asked once per value and device (an op's inputs are used again and again: a weight by each microbatch):
        # once it is not foreign it stays so (what reached a device only grows), and once told it is not told again.
        settled = self._settled
        key = (rank, id(value))
        if key in settled:
            return
        settled[key] = value  # (kept, so that its id is not given to another while the walk goes on)
        names = self._foreign_names(rank, value)
        if names is None:
            return
        name = names[0]
        belongs = self.split.owner_text(name, self.trace.world_size)
        text = (
            f"device {rank} {verb} {name}, which belongs to {belongs} and never reached device {rank} in a "
            "message: a device has only what it was given, received or computed itself (a global or a closure "
            "that devices share works only in this simulation, not on real processes)"
        )
        if rec is None:
            text += "; a device that holds none of the result returns None"
        self._add(("foreign", rank, name), "compute", rank, i, text, rec)

    def _foreign_names(self, rank: int, value: Any) -> list[str] | None:
        """The model's names for ``value`` when every one of them is kept on other devices and none reached ``rank``
        (then it is foreign there), else None."""
        if (
            value is None
            or structured(value)
            or type(value) is MetaArray
            or np.asarray(value).dtype.kind not in "biufc"
        ):
            return None
        names = self._identify(self.ref_of(rank), value)
        if not names or not all(self._elsewhere(rank, n) for n in names):
            return None
        return names

    def _never_had(self, rank: int, name: str) -> bool:
        """Whether ``name`` is kept on other devices (computed or given there) and never reached ``rank``."""
        if self._elsewhere(rank, name):
            return True
        return self._gives(name) and self._part_of(name, rank) is None and not self._arrived(rank, name)

    def _elsewhere(self, rank: int, name: str) -> bool:
        """Whether the split keeps ``name`` on other devices and it never reached ``rank`` (a message, a collective)."""
        owners = self._owners(name)
        if owners is None or owners(rank) or self._gives(name) or self._arrived(rank, name):
            return False
        whole = self.ref_of(rank).values.get(name)
        if whole is None or structured(whole):  # nothing a collective brought can be it
            return True
        return not self._among("collected", name, rank)

    def _arrived(self, rank: int, name: str) -> bool:
        """Whether ``name`` (or a block of it) reached device ``rank`` in a message. Asked again and again as the
        walk goes on: each message is looked at once per name (``_looked``: how many were, or True once one did)."""
        looked = self._looked.get((rank, name), 0)
        if looked is True:
            return True
        received = self._got(rank)
        if name in self._carried_names(rank, received):
            self._looked[(rank, name)] = True
            return True
        whole = self.ref_of(rank).values.get(name)
        if whole is not None and not structured(whole):
            b = np.asarray(whole)
            ndim, size = b.ndim, b.size
            for msg in received[looked:]:
                p = msg.payload
                if type(p) is np.ndarray and (p.ndim != ndim or not 0 < p.size < size):
                    continue  # (_is_block's own first test, without its calls)
                if _is_block(p, whole):
                    self._looked[(rank, name)] = True
                    return True
        self._looked[(rank, name)] = len(received)
        return False

    def _carried_names(self, rank: int, received: list[Message]) -> set[str]:
        """Every name the messages device ``rank`` received carry (``_carries``), grown as more arrive: whether a
        name arrived is then one look-up, not a pass over the messages for each name."""
        names, seen = self._carried_by.get(rank, (set(), 0))
        for msg in received[seen:]:
            names.update(self._carries(msg))
        self._carried_by[rank] = (names, len(received))
        return names

    # ---- what each device was given -----------------------------------------------------------------
    def _held_input(self, i: int, rec: Op) -> None:
        name, rank = rec.name, rec.rank
        mine = self._part_of(name, rank)
        if mine is ALL or self._arrived(rank, name):
            return
        whole = self.ref_of(rank).values.get(name)
        if whole is None or structured(whole):
            return
        shape = np.shape(whole)
        held = elements(rec.index, shape)
        allowed = np.zeros(0, dtype=int) if mine is None else elements(mine, shape)
        if np.isin(held, allowed).all():
            return
        if mine is None:
            text = f"device {rank} holds {name}, but {self._given_to(name)} {name}"
        elif rec.index is None:
            text = f"device {rank} was given all of {name}; its part is {part_words(mine, shape)}"
        else:
            text = f"device {rank} holds {part_words(rec.index, shape)} of {name}, but its part is {part_words(mine, shape)}"
        self._add(("given", rank, name), "given", rank, i, text, rec)

    def _inputs(self, i: int, rec: Op) -> None:
        """An op computed from the whole of an input of which its device was given only a part. The first such
        input in the split's order (then in the op's) is told, unless that input arrived in a message."""
        rank = rec.rank
        ref = self.ref_of(rank)
        parts = self._parts_given(rank, ref)
        if not parts:
            return
        first = None  # (the part's place among parts, how the input is its whole)
        for x in rec.inputs:
            for k, how in self._wholes_of(rank, ref, x):
                if first is None or k < first[0]:
                    first = (k, how)
        if first is None:
            return
        name, mine, whole = parts[first[0]]
        if self._arrived(rank, name):
            return
        shape = np.shape(whole)
        if mine is None:
            rule = f"{self._given_to(name)} {name}, and it never arrived in a message"
        else:
            rule = f"its part is {part_words(mine, shape)}, and the rest never arrived in a message"
        text = f"device {rank} computed {rec.name} from all of {name}{first[1]}, but {rule}"
        self._add(("given", rank, name), "given", rank, i, text, rec)

    def _wholes_of(self, rank: int, ref: Reference, x: Any) -> list[tuple[int, str]]:
        """The inputs given to ``rank`` in part (``_parts_given``, by their place) of which ``x`` is the whole, each
        with how ("" or " (transposed)": the plain whole first). Worked out once per value and device (a weight is
        read by every microbatch), kept with the value (so that its id is not given to another while the walk goes
        on); a value of no shape given in part, nor of one transposed, is the whole of none without a look."""
        key = (rank, id(x))
        known = self._wholes.get(key)
        if known is not None:
            return known[1]
        model = self._model_of.get((id(ref), id(x)))
        if model is None:
            found = self._wholes_now(rank, ref, x)
        else:  # what the model says that name holds, byte for byte: its answer, kept with the reference and split
            memo = self._memo(ref, "wholes of a name", self.split)
            found = memo.get((rank, model))
            if found is None:
                found = memo[(rank, model)] = self._wholes_now(rank, ref, x)
        self._wholes[key] = (x, found)
        return found

    def _wholes_now(self, rank: int, ref: Reference, x: Any) -> list[tuple[int, str]]:
        """``_wholes_of``, worked out."""
        found: list[tuple[int, str]] = []
        if not structured(x):
            plain, turned = self._rules[("shapes given", rank, id(ref))]
            x_shape = np.shape(x)
            same_shape = plain.get(x_shape)
            if same_shape:  # whether x is the whole of an input, asked once (_identify)
                names = self._identify(ref, x)
                found = [(k, "") for k, name in same_shape if name in names]
            if len(x_shape) >= 2:  # maybe the whole of one transposed (X.T)
                done = {k for k, _ in found}
                for k, whole in turned.get(x_shape[::-1], ()):
                    if k not in done and _transposed(x, whole):
                        found.append((k, " (transposed)"))
                found.sort()
        return found

    def _memo(self, ref: Reference, what: str, owner: Any = None) -> dict:
        """``ref.memo(what, this walk's tolerances, owner)``, looked up once per walk."""
        key = (id(ref), what)
        memo = self._memos.get(key)
        if memo is None:
            memo = self._memos[key] = ref.memo(what, (self.rtol, self.atol), owner)
        return memo

    def _parts_given(self, rank: int, ref: Reference) -> list[tuple[str, Any, Any]]:
        """(name, the part given to ``rank``, the whole value) of each input the split gives this device less than
        all of, in the split's order; worked out once per device, with those parts by their shape (for
        ``_wholes_of``: shape -> [(place, name)], and shape -> [(place, whole)] for each whole of two or more axes)."""
        key = ("parts given", rank, id(ref))
        parts = self._rules.get(key)
        if parts is None:
            parts = self._rules[key] = [
                (name, mine, whole)
                for name in self.split.given
                for mine in [self._part_of(name, rank)]
                if mine is not ALL
                for whole in [ref.values.get(name)]
                if whole is not None and not structured(whole)
            ]
            plain: dict[tuple, list[tuple[int, str]]] = {}
            turned: dict[tuple, list[tuple[int, Any]]] = {}
            for k, (name, _, whole) in enumerate(parts):
                shape = np.shape(whole)
                plain.setdefault(shape, []).append((k, name))
                if len(shape) >= 2:
                    turned.setdefault(shape, []).append((k, whole))
            self._rules[("shapes given", rank, id(ref))] = (plain, turned)
        return parts

    def _given_to(self, name: str) -> str:
        ranks = [r for r in range(self.trace.world_size) if self._part_of(name, r) is not None]
        if not ranks:
            return "no device is given"
        if len(ranks) == 1:
            return f"only device {ranks[0]} is given"
        return f"only devices {_listed(map(str, ranks))} are given"


def _transposed(x: Any, whole: Any) -> bool:
    """Whether ``x`` is ``whole`` transposed, element for element (``X.T`` handed to an op). Exact, not within a
    tolerance: a copy's transpose is; two corners first, since most inputs of that shape are something else."""
    xt, w = np.transpose(x), np.asarray(whole)
    ends = ((0,) * w.ndim, (-1,) * w.ndim)
    return (w.size == 0 or all(xt[e] == w[e] for e in ends)) and bool(np.array_equal(xt, w))


def _is_block(value: Any, whole: Any) -> bool:
    if value is None or structured(value) or structured(whole):
        return False
    a, b = np.asarray(value), np.asarray(whole)
    if a.dtype.kind not in "biuf" or b.dtype.kind not in "biuf" or a.ndim != b.ndim or a.size >= b.size or not a.size:
        return False
    return diagnose.block_of(a, b) is not None


def _listed(names: Any) -> str:
    names = list(names)
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]
