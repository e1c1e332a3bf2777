"""Why the first divergence is wrong, in words: a partial sum used as the whole value, an op fed a shard,
another block of the same value, or a pattern in the difference (``simulator.checker.diagnose``).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..core.trace import Message, Op
from . import diagnose
from .causal import native_call, op_kind
from .comm_summary import message_kind
from .compare import same, structured
from .terms import bias_count, unsummed_terms
from .verdict import Divergence


class _Explanations:
    """The explanation of the first divergence (mixed into ``_Checker``; run once, after the walk).

    It fills in what the found value also is (``is_also``, ``part_of``) and a hint in words. It reads the
    checker's ``rtol``, ``atol``, ``trace``, ``world_size`` and ``outputs``, and asks ``_partial_of``
    (run_check.py) and ``_results_add_up`` (results.py).
    """

    def _explain(self, d: Divergence) -> None:
        ref, found = d.reference, d.found
        if d.hint is None:
            # a returned value is compared with the model's result, not with its own name: a device that
            # returns an intermediate value (stage A's output) should hear which value it returned
            own = None if d.where == "result" else d.name
            d.is_also = ref.identify(found, rtol=self.rtol, atol=self.atol, exclude=own)
            if not d.is_also and d.where not in ("result", "partial sums"):
                d.part_of = ref.identify_part(found, getattr(d.record, "index", None), exclude=d.name)
            d.hint = self._partial_hint(d) or self._hint(d)
            if d.where == "input":  # a wrong input that came in a message: the sender is where to look
                d.hint = " ".join(filter(None, (d.hint, self._arrival(d))))

    def _arrival(self, d: Divergence) -> str | None:
        """Which message brought an op's wrong input (a receive without name= is checked only where it is used)."""
        came = self.origin_of(d.rank, d.found)
        if not isinstance(came, Message) or came.label is not None:
            return None
        return (
            f"It arrived in message #{came.id} from device {came.src} (tag {came.tag}): check what device {came.src} "
            f"sends, and which of device {came.dst}'s receives takes it."
        )

    def _partial_hint(self, d: Divergence) -> str | None:
        """A partial sum used where the complete value is needed: sent, fed to an op, or returned."""
        rec = d.record
        if d.where == "message":
            p = self._partial_of(rec.src, d.found)
            return _partial_words(p, f"sent to device {rec.dst} as {d.name}") if p else None
        if d.where == "input":
            p = self._partial_of(rec.rank, d.found)
            return _partial_words(p, f"fed to op {rec.name}") if p else None
        if d.where == "output" and rec.inputs and not native_call(getattr(rec, "label", None)):
            # (a native all-reduce's op takes the partial sums as its inputs: that is what it is for)
            for pos, x in enumerate(rec.inputs):
                p = self._partial_of(rec.rank, x)
                if p is not None:
                    return _partial_words(p, f"input {pos} of op {rec.name}")
        return None

    def _pieces_hint(self, d: Divergence) -> str | None:
        """A list of blocks where one array was meant: all_gather without ``axis=`` gives its pieces as a list."""
        pieces = [np.asarray(p) for p in d.found]
        expected = np.asarray(d.expected)
        if not pieces or any(p.ndim != expected.ndim or p.dtype.kind not in "biufc" for p in pieces):
            return None
        for axis in range(expected.ndim):
            try:
                joined = np.concatenate(pieces, axis=axis)
            except ValueError:
                continue
            if same(joined, expected, self.rtol, self.atol):
                return (
                    f"It is a list of {len(pieces)} pieces that, joined along axis {axis}, make the value: "
                    f"all_gather(x, axis={axis}) joins them (without axis= it returns the list)."
                )
        return None

    def _called(self, rank: int, kind: str) -> bool:
        """Whether device ``rank`` called the collective ``kind`` (its messages, or a native call's op)."""
        if any(m.src == rank and message_kind(m.label) == kind for m in self.trace.messages):
            return True
        return any(op.rank == rank and op.name.startswith(f"{kind} (native)") for op in self.trace.ops)

    def _result_names(self, d: Divergence) -> str:
        """A device returned another of the model's values: which value the model returns, and who returns it."""
        names = d.reference.identify(d.expected, rtol=self.rtol, atol=self.atol)
        result = d.reference.describe(names[0]) if names else "another value"
        return (
            f"The model's result is {result}, and this is a value on the way to it: the wrong value returned, or a "
            "step left out? (A device that holds none of the result returns None.)"
        )

    def _flow_hint(self, d: Divergence) -> str | None:
        """A wrong result told by what the op that computed it was fed: an input where the model's op takes
        another (the classroom bug: stage B squares the raw input x, sent in place of A), or the model's own
        inputs and a different computation."""
        op, ref = d.record, d.reference
        if not isinstance(op, Op) or not op.inputs or structured(d.found) or structured(d.expected):
            return None
        for name in ref.identify(d.expected, rtol=self.rtol, atol=self.atol):
            wanted = ref.inputs.get(name)
            if wanted is None or len(wanted) != len(op.inputs):
                continue
            matched = []
            for got, want in zip(op.inputs, wanted):
                want_names = ref.identify(want, rtol=self.rtol, atol=self.atol) if not structured(want) else []
                got_names = ref.identify(got, rtol=self.rtol, atol=self.atol) if not structured(got) else []
                if set(want_names) & set(got_names):
                    matched.append(want_names[0])
                    continue
                if not want_names:
                    continue
                came = self.origin_of(op.rank, got)
                via = (
                    f", which arrived in message #{came.id} from device {came.src}" if isinstance(came, Message) else ""
                )
                block = None if got_names or not _floaty(got, want) else diagnose.block_of(got, np.asarray(want))
                if block is not None:  # a device's share of the input: its result is a share too, to combine
                    return (
                        f"Op {op.name} on device {op.rank} computed it from the block {diagnose.show_index(block)} "
                        f"of {want_names[0]}{via}, where the model computes {name} from the whole of it: the "
                        "devices' results are to be combined (an all-reduce, an all-gather?)."
                    )
                what = ref.describe(got_names[0]) if got_names else "a value the model does not have"
                return (
                    f"Op {op.name} on device {op.rank} computed it from {what}{via}, where the model computes {name} "
                    f"from {ref.describe(want_names[0])}" + (f": check what device {came.src} sends." if via else ".")
                )
            if len(matched) == len(op.inputs):
                return (
                    f"Op {op.name} on device {op.rank} was fed what the model's {name} is fed ({', '.join(matched)}), "
                    f"but computed another value: its own arithmetic differs from {name}'s."
                )
        return None

    def _shard_advice(self, d: Divergence, block: str) -> str:
        """An op fed a block of its input: it computes a block of its output (index=) or a partial sum (partial=)."""
        rec, name = d.record, d.name
        head = f"It is the block {block} of that input, so this op works on a shard"
        whole, out = d.reference.values[name], rec.output
        if structured(whole) or structured(out):
            return f"{head}: say which part of {name} it computes with index= (or partial=True for one term of a sum)."
        whole = np.asarray(whole)
        out = np.asarray(out) if out is not None else None
        if out is not None and out.shape == whole.shape:
            return (
                f"{head} and computes a value of {name}'s full shape {whole.shape}: one term of a sum (a row-parallel "
                f"matmul). Say so with partial=True (or the group's ranks), dev.compute({name!r}, fn, ..., "
                f"partial=True), and add the terms with an all-reduce; the checker adds them up and compares with {name}."
            )
        at = diagnose.block_of(out, whole) if out is not None and _floaty(out, whole) else None
        where = f"np.s_{diagnose.show_index(at)}" if at is not None else "np.s_[...]"
        return (
            f"{head}: if op {name} computes only part of {name}, say which part with index=, e.g. "
            f"dev.compute({name!r}, fn, ..., index={where}), and the checker compares it with that part of {name}."
        )

    def _hint(self, d: Divergence) -> str | None:
        if isinstance(d.found, (list, tuple)) and not structured(d.expected):
            return self._pieces_hint(d)
        if structured(d.found) or structured(d.expected):
            return None
        member = _member_hint(d)
        if member:
            return member
        found, expected = np.asarray(d.found), np.asarray(d.expected)
        if d.where == "result" and self._results_add_up(d):
            if self._called(d.rank, "all_reduce"):  # torch's habit: all_reduce(y) changes y there
                return (
                    f"The devices' results add up to the model's result, and device {d.rank} called all_reduce: it "
                    "returns the sum as a new array and leaves its input as it was, so use what it returns, "
                    "y = dev.all_reduce(y) (or dev.all_reduce(y, in_place=True), as torch does)."
                )
            return (
                "The devices' results add up to the model's result: each device returned a partial sum "
                "(the all-reduce that adds them is missing?)."
            )
        if d.where == "result" and d.is_also:
            return self._result_names(d)
        if d.where == "result":
            flow = self._flow_hint(d)
            if flow:
                return flow
        if d.where == "input" and _floaty(found, expected):
            block = diagnose.block_of(found, expected)
            if block is not None:
                return self._shard_advice(d, diagnose.show_index(block))
        if (
            d.where in ("held value", "message")
            and getattr(d.record, "index", None) is None
            and _floaty(found, expected)
        ):
            block = diagnose.block_of(found, expected)
            if block is not None:  # a shard held or received without saying which one it is
                at = diagnose.show_index(block)
                how = f"dev.hold({d.name!r}, ..., index=np.s_{at})" if d.where == "held value" else f"index=np.s_{at}"
                return f"It is the block {at} of {d.name}: say which block a device holds with {how}."
        counted = bias_count(d.reference, d.name, getattr(d.record, "index", None), found, self.rtol, self.atol)
        if counted is not None:
            bias, k = counted
            what = d.reference.aliases.get(d.name, d.name)
            if k == 0:
                return f"It is {what} less its bias {bias}: the bias, added after the sum of a row-parallel layer, is missing?"
            return (
                f"It is {what} with its bias {bias} counted {k} times: added by each of {k} devices before the sum "
                "adds their terms? (Add it on one device only, or after the sum.)"
            )
        terms = None
        torch = d.reference is not None and d.reference.modules  # advice in torch's words, not partial=True
        if d.where == "output":
            terms = unsummed_terms(self.trace, d.record, d.expected, self.rtol, self.atol, torch=torch)
        elif d.where == "held value":  # a held term, after an all-reduce: taken before the sum came
            taken_early = self._called(d.rank, "all_reduce")
            terms = unsummed_terms(
                self.trace, d.record, d.expected, self.rtol, self.atol, "hold", taken_early, torch=torch
            )
        return (
            terms
            or self._wrong_block(d)
            or diagnose.explain(found, expected, self._group_sizes(d))
            or (self._clipped(d.name, found, expected) if d.reference.modules else None)
        )

    def _clipped(self, name: str, found: np.ndarray, expected: np.ndarray) -> str | None:
        """A gradient that is the right one times a factor no sum explains: scaled (clipped) by another norm."""
        if ".grad" not in name or found.shape != expected.shape or not _floaty(found, expected):
            return None
        bb = float(np.vdot(expected, expected))
        k = float(np.vdot(expected, found)) / bb if bb else 0.0
        if not np.isfinite(k) or k <= 0 or same(found, expected, self.rtol, self.atol):
            return None
        if not same(found, k * expected, self.rtol, self.atol):
            return None
        return (
            f"Every element is {k:.4g} times what it should be: the gradient scaled by another factor, as clipping "
            "by the norm of this rank's shards (to_local()) rather than of the whole gradient scales it?"
        )

    def _group_sizes(self, d: Divergence) -> list[int]:
        """The sizes of the groups this device sums over (its collectives, partial sums): k times too big names one.
        A program with no collective and no partial sum has none (a value twice too big is then just that)."""
        sizes = {len(g) for g in self.trace.groups if d.rank in g}
        partial = getattr(d.record, "partial", None)
        return sorted(sizes | ({len(partial)} if partial else set()))

    def _wrong_block(self, d: Divergence) -> str | None:
        """A shard that is another block of the same value: taken from the wrong device, or an index off by one."""
        index = getattr(d.record, "index", None)
        if index is None or d.name not in d.reference.values:
            return None
        found, whole = np.asarray(d.found), np.asarray(d.reference.values[d.name])
        if callable(index):  # a part known by its shape (the torch backend's): its block, once the whole is known
            index = index.resolve(whole.shape) if hasattr(index, "resolve") else None
            if index is None:
                return None
        if isinstance(index, tuple) and len(index) < whole.ndim:  # said in full, as the found block is
            index = index + (slice(None),) * (whole.ndim - len(index))
        if not _floaty(found, whole) or found.shape == whole.shape:
            return None
        block = diagnose.block_of(found, whole)
        if block is None:
            return None
        alike = self._alike_elsewhere(d)
        if alike and block[0] != slice(None) and all(b == slice(None) for b in block[1:]):
            return (
                f"It is the block {diagnose.show_index(block)} of {d.name}, not the block {diagnose.show_index(index)} "
                f"this device should hold, and device{'s' if len(alike) > 1 else ''} {', '.join(map(str, alike))} "
                "computed the same rows: every replica saw the same rows of the batch (each rank takes its own: "
                "x.chunk(world_size)[rank], or a DistributedSampler for its DataLoader)?"
            )
        dims = getattr(getattr(d.record, "index", None), "mesh_dims", lambda: ())()
        if len(dims) > 1:  # several mesh dims split the value: a block of the right size picked by the wrong one
            return (
                f"It is the block {diagnose.show_index(block)} of {d.name}, not the block {diagnose.show_index(index)} "
                f"this device should hold on its mesh of dims {', '.join(dims)}: the block picked by its coordinate on "
                "another mesh dim (mesh['tp'] where mesh['dp'] was meant, or the dims in another order)?"
            )
        return (
            f"It is the block {diagnose.show_index(block)} of {d.name}, not the block {diagnose.show_index(index)} "
            "this device should hold: a shard taken from another device, or an index off by one?"
        )

    def _alike_elsewhere(self, d: Divergence) -> list[int]:
        """The other devices whose record of the same name, made the same time (the k-th), equals this one's."""
        rec, pool = d.record, self.trace.ops
        if not isinstance(rec, Op) or structured(rec.output):
            return []
        mine = [op.id for op in pool if op.rank == rec.rank and op.name == rec.name]
        k = mine.index(rec.id) if rec.id in mine else None
        if k is None:
            return []
        found = []
        for rank in range(self.trace.world_size):
            theirs = [op for op in pool if op.rank == rank and op.name == rec.name] if rank != rec.rank else []
            if len(theirs) > k and not structured(theirs[k].output):
                other = np.asarray(theirs[k].output)
                if other.shape == np.shape(rec.output) and same(other, rec.output, self.rtol, self.atol):
                    found.append(rank)
        return found


def _partial_words(p: Op, how: str) -> str:
    group = ", ".join(map(str, p.partial))
    return (
        f"That is device {p.rank}'s partial sum of {p.name} (one term of a sum over devices {group}), {how} as if "
        f"it were the complete {p.name}: the all-reduce that adds the partial sums is missing?"
    )


def _floaty(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype.kind in "biuf" and b.dtype.kind in "biuf" and a.size > 0


_TERM = re.compile(r"^(.+)\[(\d+)\]$")  # a member's term as partials= names it: x[2]


def _member_hint(d: Divergence) -> str | None:
    """A collective's message named ``x[m]`` by ``partials="x"`` that carries the model's ``x[k]``: partials= numbers
    the terms by the members' places in the group, and the student numbered them by rank (a subgroup, or a group in
    another order)."""
    rec = d.record
    if d.where != "message" or not isinstance(rec, Message) or op_kind(rec.label) is None:
        return None
    named = _TERM.match(d.name or "")
    if named is None or int(named.group(2)) == rec.src:  # (a place that is the sender's rank: numbered alike)
        return None
    prefix = named.group(1)
    other = next((n for n in (d.is_also or d.part_of or []) if (m := _TERM.match(n)) and m.group(1) == prefix), None)
    if other is None:
        return None
    return (
        f"partials={prefix!r} names each member's term {prefix}[m] by its place m in the call's group (the group's "
        f"first rank is member 0), not by its rank: device {rec.src} gives {other}. List the group in the order of the "
        f"model's terms, or name them by place."
    )
