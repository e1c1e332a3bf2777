"""Partial sums in a check: terms of a sum that devices hold (``partial=``), added up and compared once every member
of the group has its term; the partial sum a value is, for an explanation ("a partial sum, sent as A"); and terms a
program adds up with its own messages (a ring written with isend and irecv, ``terms.hand_summed``), which are
partial sums rather than divergences. ``run_check._Checker`` holds this as a mixin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.trace import Op
from .compare import same, structured
from .terms import by_name, hand_summed, running_sum
from .verdict import Unchecked, _message


@dataclass
class _Partial:
    """One device's term of a sum over a group (an op or hold with ``partial=``)."""

    rank: int
    event: int
    record: Op


class _Terms(list):
    """Each member's terms of one sum not added up yet (a list per member, in the group's order), with each member's
    place and how many members have none: a term is placed and counted without a scan of the group."""

    def __init__(self, group: tuple[int, ...]) -> None:
        super().__init__([] for _ in group)
        self.places = {r: k for k, r in enumerate(group)}
        self.waiting = len(group)


class _PartialSums:
    """The partial sums of a check (mixed into ``run_check._Checker``, whose walk, tolerances and lists it uses)."""

    def _add_partial(self, i: int, rec: Op) -> None:
        group = rec.partial
        key = (rec.name, repr(rec.index), group)
        terms = self.partials.get(key)
        if terms is None:
            terms = self.partials[key] = _Terms(group)
        place = terms.places.get(rec.rank)
        if place is None:
            raise ValueError(f"device {rec.rank} holds a partial sum of {rec.name} over {group}, which omits it")
        if not terms[place]:
            terms.waiting -= 1
        terms[place].append(_Partial(rec.rank, i, rec))
        if not terms.waiting:  # every member has its next term: add them up in member order
            parts = [t.pop(0) for t in terms]
            terms.waiting = sum(not t for t in terms)
            total = parts[0].record.output
            for p in parts[1:]:
                total = total + p.record.output
            ref = self._ref(rec.rank)
            members = ", ".join(map(str, group))
            expected = ref.expected(rec.name, rec.index)
            if len(group) > 1 and not same(total, expected, self.rtol, self.atol):
                # terms of an average (each replica's gradient of its own samples, averaged by the all-reduce):
                # their mean is the value; a sum where the average was meant still fails, at the all-reduce
                mean = total / len(group) if not structured(total) else None
                if mean is not None and same(mean, expected, self.rtol, self.atol):
                    total = mean
            # a wrong sum stands where its last term does by cause (the same term on every backend: measured
            # times may bring the terms in any order), the highest device among equals; a right one stands anywhere
            if same(total, expected, self.rtol, self.atol):
                last = parts[-1]
            else:
                last = max(parts, key=lambda p: (self.order.key(p.event)[:2], p.rank))
            if not self._compare(
                "partial sums", last.rank, last.event, last.record, rec.name, expected, total, path=members
            ):
                self.diverged[-1].hint = self._smaller_group(rec.name, parts, expected)

    def _smaller_group(self, name: str, parts: list, expected: Any) -> str | None:
        """'The terms of devices 0, 1 alone add up to Y: ...' where a group the run's collectives sum over, smaller than
        the one declared, adds up to the value on its own (partial=True said every device, in a data-parallel x
        tensor-parallel world where each tensor-parallel pair sums its own)."""
        by_rank = {p.rank: p.record.output for p in parts}
        for group in sorted(getattr(self.trace, "groups", ()) or (), key=len):
            if 1 < len(group) < len(by_rank) and set(group) <= set(by_rank):
                total = by_rank[group[0]]
                for r in group[1:]:
                    total = total + by_rank[r]
                if same(total, expected, self.rtol, self.atol):
                    return (
                        f"The terms of devices {', '.join(map(str, group))} alone add up to {name}: each such group holds "
                        f"a sum of its own, so say which devices' terms add up: partial={tuple(group)} (the group its "
                        f"all-reduce sums over), not all {len(by_rank)} devices."
                    )
        return None

    def _partial_of(self, rank: int, value: Any) -> Op | None:
        """The partial-sum record on ``rank`` whose value this is (by identity, then by value)."""
        rec = self.origin_of(rank, value)
        if isinstance(rec, Op) and rec.partial is not None:
            return rec
        if structured(value):
            return None
        shape = np.shape(value)
        for rec in self.partial_records[rank]:
            if np.shape(rec.output) == shape and same(value, rec.output, self.rtol, self.atol):
                return rec
        return None

    def _unfinished_partials(self) -> None:
        for (name, _, group), terms in self.partials.items():
            have = [m for m, t in zip(group, terms) if t]
            if have:
                missing = [m for m, t in zip(group, terms) if not t]
                self.unchecked.append(
                    Unchecked(
                        "partial sums",
                        f"the partial sums of {name} over devices {list(group)} were computed on devices {have} "
                        f"only (not on {missing}), so they could not be added up and compared with {name}",
                    )
                )

    def _summed_by_hand(self) -> None:
        """Terms of a sum that the program adds up with its own messages (a ring written with isend and irecv,
        ``terms.hand_summed``): not divergences but partial sums, and the unnamed messages that carry chunks of
        their running sums are placed."""
        sums, kept = [], []
        index = None  # each device's records by name, gathered once for all the divergences (terms.by_name)
        for d in self.diverged:
            terms = None
            if d.where == "output" and isinstance(d.record, Op):
                index = index if index is not None else by_name(self.trace)
                terms = hand_summed(self.trace, d.record, d.expected, self.rtol, self.atol, index)
            if terms is None:
                kept.append(d)
                continue
            sums.append(terms)
            note = (
                f"{d.name} on devices {', '.join(map(str, sorted(terms)))} are terms of a sum the program adds up with "
                "its own messages: checked as partial sums, their total and what each device holds after"
            )
            if note not in self.notes:
                self.notes.append(note)
        if not sums:
            return
        self.diverged = kept
        placed = {
            id(m) for m in self._unplaced
            if any(m.src in t and running_sum(m.payload, t, self.rtol, self.atol) for t in sums)
        }  # fmt: skip
        texts = {_message(m) for m in self._unplaced if id(m) in placed}
        self.checked += len(placed)
        self.unchecked = [
            u for u in self.unchecked
            if not (u.kind == "unplaced message" and any(u.text.startswith(t + " has no name") for t in texts))
        ]  # fmt: skip
