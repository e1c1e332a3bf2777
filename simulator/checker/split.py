"""The declared split: beside the single-device model, who owns what.

The values alone cannot tell a split program from one that computes the right numbers in the wrong place
(device 1 recomputing stage A from the raw x it was sent, every device handed the whole input). A
``Split`` says what the lesson is about, and ``check(run, reference, split=...)`` holds the run to it
(``simulator.checker.split_check``):

    SEED = Split(
        compute={"A": 0, "B": 1},    # device 0 computes A, device 1 computes B
        given={"x": {0: ALL}},       # device 0 is given all of x; device 1 none of it
        crosses={"A": (0, 1)},       # only A may cross, from device 0 to device 1
    )

- ``compute``: name -> the devices that compute (or hold) that value of the model: a rank, a collection
  of ranks, ``ALL``, or a function of the rank (a mesh coordinate: ``lambda r: mesh.coords(r)[0] == 0``).
  A name may end in ``*`` to cover a family (``"h1.*"``: every microbatch's). A name not listed may be
  computed anywhere.
- ``given``: input name -> {rank: the part of it that device is given}: a NumPy index (``np.s_[0:4]``),
  or ``ALL`` for the whole. A rank left out is given none of it. Shorthands: a rank (that device is
  given all of it), ``ALL`` (every device is). ``part(name, rank, value)`` cuts a device's part, so an
  exercise hands each device only its own (``simulator.core.PerDevice``).
- ``crosses``: name -> the boundaries it may cross, (src, dst) or a list of them, ``ALL`` for any. When
  given, it lists everything the program's own messages may carry: a message on a boundary must carry
  one of those values (or a block of it), identified by its ``name=`` or by its value. Messages of a
  collective are governed by ``collectives`` and ``budget`` instead. None (the default): no rule.
- ``collectives``: the collectives a program may call (``("all_reduce",)``); ``()`` for none (write it
  with send and recv); None (the default) for any.
- ``budget``: ``Budget(bytes=..., messages=..., what="a ring all-reduce")``, the most each device may send.

What a device may hold is what it was given, received, or computed itself; the check says what broke in
the words of the lesson: "device 1 computed A, which belongs to device 0: A should have crossed, but x
did", "device 2 sent 192 bytes, 2x the 96 bytes a ring all-reduce sends", "device 0 was given all of X;
its part is rows 0:4".
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from .diagnose import show_index
from .reference import part


class _All:
    """Every device, or all of a value."""

    def __repr__(self) -> str:
        return "ALL"

    def __reduce__(self) -> str:
        return "ALL"


ALL: Any = _All()

Devices = int | Iterable[int] | Callable[[int], bool] | _All


@dataclass(frozen=True)
class Budget:
    """The most each device may send: bytes and messages (None: no limit); ``what`` names the algorithm the
    budget is taken from, for the words of a broken budget ("2x the bytes a ring all-reduce sends")."""

    bytes: int | None = None
    messages: int | None = None
    what: str = "the split allows"


@dataclass(frozen=True)
class Split:
    """Who owns what: which device computes each value, what each is given, what may cross, and how much.

    See the module docstring. Frozen, and its mappings read-only: a program under test cannot loosen it.
    """

    compute: Mapping[str, Any] = field(default_factory=dict)
    given: Mapping[str, Any] = field(default_factory=dict)
    crosses: Mapping[str, Any] | None = None
    collectives: tuple[str, ...] | None = None
    budget: Budget | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "compute", MappingProxyType({k: _devices(k, v) for k, v in self.compute.items()}))
        object.__setattr__(self, "given", MappingProxyType({k: _given(k, v) for k, v in self.given.items()}))
        if self.crosses is not None:
            crosses = {k: _boundaries(k, v) for k, v in self.crosses.items()}
            object.__setattr__(self, "crosses", MappingProxyType(crosses))
        if self.collectives is not None:
            if isinstance(self.collectives, str):
                raise TypeError(f"Split(collectives={self.collectives!r}): give a tuple of kinds, e.g. ('all_reduce',)")
            object.__setattr__(self, "collectives", tuple(self.collectives))
        if self.budget is not None and not isinstance(self.budget, Budget):
            raise TypeError(f"Split(budget={self.budget!r}): give a Budget(bytes=..., messages=...)")
        # what each table says of a name, found once per Split (a check asks it of every op; a pattern is a scan)
        object.__setattr__(self, "_found", {})

    def _find(self, table: str, name: str) -> Any:
        """``_lookup`` of ``name`` in the table ``table`` ("compute", "given" or "crosses"), remembered: the tables
        are read-only, so the answer for a name never changes."""
        found = self._found
        key = (table, name)
        if key in found:
            return found[key]
        if len(found) > _FOUND_MOST:  # a program making new names without end: start again rather than grow
            found.clear()
        value = found[key] = _lookup(getattr(self, table), name)
        return value

    # ---- what the split says --------------------------------------------------------------------
    def owners(self, name: str) -> Callable[[int], bool] | None:
        """Which devices may compute ``name`` (a test of the rank), or None when any may."""
        return self._find("compute", name)

    def owners_and_gives(self, name: str) -> tuple[Callable[[int], bool] | None, bool]:
        """``(owners(name), gives(name))`` in one look-up: what the split check asks of every op's name."""
        key = ("owners and gives", name)
        found = self._found.get(key)
        if found is None:
            found = (self.owners(name), self.gives(name))
            if len(self._found) <= _FOUND_MOST:
                self._found[key] = found
        return found

    def owner_text(self, name: str, world_size: int) -> str:
        test = self.owners(name)
        ranks = [r for r in range(world_size) if test is None or test(r)]
        return _ranks_text(ranks)

    def part_of(self, name: str, rank: int) -> Any:
        """The index of ``name`` device ``rank`` is given: ALL, an index, or None (none of it). A name the
        split does not list is not an input it rules on: ALL."""
        parts = self._find("given", name)
        if parts is None:
            return ALL
        return parts(rank) if callable(parts) else parts.get(rank)

    def part(self, name: str, rank: int, value: Any) -> Any:
        """Device ``rank``'s part of the input ``name`` (its value on one device): what to give it, or None."""
        index = self.part_of(name, rank)
        if index is None:
            return None
        return value if index is ALL else part(value, index)

    def may_cross(self, name: str, src: int, dst: int) -> bool:
        """Whether the value ``name`` (or a sum 'a+b' of values that may) may cross from ``src`` to ``dst``."""
        if self.crosses is None:
            return True
        names = name.split("+") if "+" in name and self._find("crosses", name) is None else [name]
        for n in names:
            allowed = self._find("crosses", n)
            if allowed is None or not allowed(src, dst):
                return False
        return True

    def crossing_names(self, src: int, dst: int) -> list[str]:
        """The names (or patterns) that may cross from ``src`` to ``dst``."""
        if self.crosses is None:
            return []
        return [k for k, test in self.crosses.items() if test(src, dst)]

    def gives(self, name: str) -> bool:
        """Whether the split says which devices are given ``name`` (a name or a pattern of it)."""
        return self._find("given", name) is not None

    def allows(self, kind: str) -> bool:
        return self.collectives is None or kind in self.collectives


_FOUND_MOST = 1 << 16  # names a Split remembers its answers for (Split._find)


@functools.lru_cache(maxsize=4096)
def _pattern(key: str) -> re.Pattern | None:
    """A key with ``*`` is a pattern (only ``*`` is special: names such as x[0] keep their brackets)."""
    if "*" not in key:
        return None
    return re.compile("".join(".*" if c == "*" else re.escape(c) for c in key) + r"\Z")


def _lookup(table: Mapping[str, Any], name: str) -> Any:
    if name in table:
        return table[name]
    for key, value in table.items():
        pat = _pattern(key)
        if pat is not None and pat.match(name):
            return value
    return None


def _devices(name: str, spec: Any) -> Callable[[int], bool]:
    if spec is ALL:
        return _Every()
    if callable(spec):
        return spec
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return _Ranks((int(spec),))
    try:
        if isinstance(spec, str):
            raise TypeError(spec)
        ranks = tuple(int(r) for r in spec)
    except (TypeError, ValueError):
        raise TypeError(
            f"Split(compute={{{name!r}: {spec!r}}}): say which devices compute {name}: a rank, a list of ranks, "
            "ALL, or a function of the rank"
        ) from None
    return _Ranks(ranks)


def _given(name: str, spec: Any) -> Any:
    if spec is ALL:
        return _Whole()
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return MappingProxyType({int(spec): ALL})
    if isinstance(spec, Mapping):
        return MappingProxyType({int(r): v for r, v in spec.items()})
    if callable(spec):
        return spec
    raise TypeError(
        f"Split(given={{{name!r}: {spec!r}}}): say which part of {name} each device is given: "
        "{rank: np.s_[...] or ALL}, a rank (all of it, to that device alone), or ALL (all of it, to every device)"
    )


def _boundaries(name: str, spec: Any) -> Callable[[int, int], bool]:
    if spec is ALL:
        return _AnyBoundary()
    if callable(spec):
        return spec
    pairs = [spec] if len(spec) == 2 and all(isinstance(v, (int, np.integer)) for v in spec) else list(spec)
    try:
        return _Pairs(tuple((int(a), int(b)) for a, b in pairs))
    except (TypeError, ValueError):
        raise TypeError(
            f"Split(crosses={{{name!r}: {spec!r}}}): say where {name} may cross: (src, dst), a list of them, or ALL"
        ) from None


@dataclass(frozen=True)
class _Ranks:
    ranks: tuple[int, ...]

    def __call__(self, rank: int) -> bool:
        return rank in self.ranks


@dataclass(frozen=True)
class _Every:
    def __call__(self, rank: int) -> bool:
        return True


@dataclass(frozen=True)
class _Whole:
    def __call__(self, rank: int) -> Any:
        return ALL


@dataclass(frozen=True)
class _Pairs:
    pairs: tuple[tuple[int, int], ...]

    def __call__(self, src: int, dst: int) -> bool:
        return (src, dst) in self.pairs


@dataclass(frozen=True)
class _AnyBoundary:
    def __call__(self, src: int, dst: int) -> bool:
        return True


def _ranks_text(ranks: list[int]) -> str:
    if not ranks:
        return "no device"
    if len(ranks) == 1:
        return f"device {ranks[0]}"
    return "devices " + ", ".join(map(str, ranks))


def part_words(index: Any, shape: tuple[int, ...]) -> str:
    """A part of a value in words: "rows 0:4", "columns 3:6", "the block [0:2, 2:4]", "all of it"."""
    if index is ALL or index is None:
        return "all of it"
    idx = index if isinstance(index, tuple) else (index,)
    sliced = [(axis, s) for axis, s in enumerate(idx) if not (isinstance(s, slice) and s == slice(None))]
    if len(sliced) == 1 and isinstance(sliced[0][1], slice) and len(shape) in (1, 2):
        axis, s = sliced[0]
        start, stop, _ = s.indices(shape[axis])
        what = "rows" if axis == 0 and len(shape) == 2 else "columns" if axis == 1 else "elements"
        return f"{what} {start}:{stop}"
    return f"the block {show_index(index)}"


def elements(index: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Which elements (flat positions) of a value of this shape an index covers (ALL/None: every one)."""
    ids = np.arange(int(np.prod(shape))).reshape(shape)
    if index is ALL or index is None:
        return ids.reshape(-1)
    return np.ravel(part(ids, index))


__all__ = ["ALL", "Budget", "Split", "elements", "part_words"]
