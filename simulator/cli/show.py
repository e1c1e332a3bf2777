"""What ``python -m simulator run`` and ``demo`` print: a scenario's events, its timeline and its check,
within the terminal's width, filtered by device, step range and event kind.

    python -m simulator run pipeline-1f1b                      # the event log, the timeline, the check
    python -m simulator run tp-megatron-mlp --step             # each device's values after each event
    python -m simulator run pipeline-1f1b --devices 0 --kinds op --steps 1:40

Steps are numbered as the stepper numbers them: step n is the state after the n-th event (1-based),
so ``--steps 10:12`` shows the 10th, 11th and 12th events.
"""

from __future__ import annotations

import shutil
import textwrap
from dataclasses import dataclass
from typing import Any

from ..core.trace import format_event
from ..core.values import SHOW_ALL, ValueStyle, clip
from ..core.world import MAX_DEVICES
from ..teach.scenario import Scenario
from ..views.stepper import Stepper
from ..views.textgrid import text_timeline

KINDS = ("send", "recv", "op", "hold", "free")


MAX_WIDTH = 120  # wider lines are hard to read, and do not fit a projected terminal


def terminal_width() -> int:
    """The terminal's width in characters (``COLUMNS``, or 120 where there is no terminal), at most 120."""
    return max(40, min(MAX_WIDTH, shutil.get_terminal_size((MAX_WIDTH, 24)).columns))


@dataclass(frozen=True)
class EventFilter:
    """Which events to show: on these devices, in this step range (1-based, inclusive), of these kinds.

    None means no restriction. A message event is on both its devices.
    """

    devices: frozenset[int] | None = None
    steps: tuple[int | None, int | None] = (None, None)
    kinds: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if self.kinds is not None and not self.kinds <= set(KINDS):
            bad = sorted(self.kinds - set(KINDS))
            raise ValueError(f"no event kind {bad[0]!r}: choose from {', '.join(KINDS)}")

    @property
    def active(self) -> bool:
        return self.devices is not None or self.steps != (None, None) or self.kinds is not None

    def matches(self, step: int, kind: str, rec: Any) -> bool:
        lo, hi = self.steps
        if (lo is not None and step < lo) or (hi is not None and step > hi):
            return False
        if self.kinds is not None and kind not in self.kinds:
            return False
        if self.devices is None:
            return True
        ranks = {rec.src, rec.dst} if kind in ("send", "recv") else {rec.rank}
        return bool(ranks & self.devices)

    def check(self, world_size: int, n_events: int) -> None:
        """Refuse (``FilterError``) devices the run does not have, or a step range that starts after its last step."""
        check_devices(self.devices, world_size)
        lo, hi = self.steps
        if lo is not None and lo > n_events:
            asked = f"{lo}" if hi == lo else f"{lo}:{'' if hi is None else hi}"
            has = f"steps 1-{n_events}" if n_events > 1 else ("step 1 only" if n_events else "no steps")
            raise FilterError(f"--steps {asked}: the run has {has}")

    def describe(self) -> str:
        parts = []
        if self.devices is not None:
            parts.append("devices " + ", ".join(map(str, sorted(self.devices))))
        if self.steps != (None, None):
            lo, hi = self.steps
            parts.append(f"steps {lo or 1} to {hi if hi is not None else 'the end'}")
        if self.kinds is not None:
            parts.append("kinds " + ", ".join(k for k in KINDS if k in self.kinds))
        return "; ".join(parts)


class FilterError(ValueError):
    """A filter that asks for devices or steps the run does not have (the command line exits with 2)."""


def check_devices(devices: frozenset[int] | None, world_size: int) -> None:
    """Refuse (``FilterError``) ranks outside the run's devices, naming the ones it has."""
    bad = sorted(r for r in devices or () if not 0 <= r < world_size)
    if bad:
        asked = ",".join(map(str, sorted(devices)))
        has = f"devices 0-{world_size - 1}" if world_size > 1 else "device 0 only"
        extra = "" if len(bad) == len(devices) else f" (no device {', '.join(map(str, bad))})"
        raise FilterError(f"--devices {asked}: the run has {has}{extra}")


def parse_devices(text: str) -> frozenset[int]:
    """``"0,2-3"`` -> {0, 2, 3}."""
    ranks: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        try:
            first, last = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise ValueError(f"cannot read {text!r} as devices: write ranks like 0,2 or a range like 0-3") from None
        if first > last >= 0:
            raise ValueError(f"devices {part!r}: write a range lower rank first, e.g. {last}-{first}")
        if not 0 <= first <= last < MAX_DEVICES:  # (a range of 10**20 ranks would fill memory)
            raise ValueError(f"devices {part!r}: ranks run from 0 to at most {MAX_DEVICES - 1:,}")
        ranks.update(range(first, last + 1))
    return frozenset(ranks)


def parse_steps(text: str) -> tuple[int | None, int | None]:
    """``"10:40"`` -> (10, 40); ``"10:"`` -> (10, None); ``"7"`` -> (7, 7)."""
    lo, sep, hi = text.partition(":")
    try:
        first = int(lo) if lo.strip() else None
        last = (int(hi) if hi.strip() else None) if sep else first
    except ValueError:
        raise ValueError(f"cannot read {text!r} as steps: write FIRST:LAST, e.g. 10:40, 10: or :40") from None
    if first is not None and first < 1:
        raise ValueError(f"steps {text!r}: steps start at 1 (the first event)")
    if first is not None and last is not None and last < first:
        raise ValueError(f"steps {text!r}: the last step comes before the first")
    return first, last


def show_scenario(
    scenario: Scenario,
    *,
    step: bool,
    width: int | None = None,
    only: EventFilter = EventFilter(),
    values: str | None = None,
    style: ValueStyle = SHOW_ALL,
    timeline: bool = True,
) -> bool:
    """Print a scenario's story, events (or steps), timeline and check; returns whether it behaved as expected.

    A filter for devices or steps the run does not have is a ``FilterError``, raised before anything is printed.

    values: for ``step``, "all" (every value held), "new" (the value each event places, in full; the rest
    by name) or "names"; by default "all" where every device's values fit on one line, else "new".
    """
    width = width or terminal_width()
    run = scenario.run()
    result = run.result
    if result is not None:
        only.check(result.world.size, len(result.trace.events))
    print(clip(f"=== {scenario.name}: {scenario.title}", width))
    print(textwrap.fill(scenario.story, width, initial_indent="    ", subsequent_indent="    ") + "\n")
    if result is not None:
        events = result.trace.events
        chosen = [i for i, (kind, rec) in enumerate(events, 1) if only.matches(i, kind, rec)]
        if only.active:
            print(f"  showing {len(chosen)} of {len(events)} events ({only.describe()})")
        if step:
            stepper = Stepper(result.trace)
            shown = sorted(only.devices) if only.devices is not None else None
            values = values or _values_mode(stepper, width, style)
            for i in chosen:
                print(stepper.goto(i).render(width, style=style, values=values, devices=shown))
        else:
            digits = len(str(len(events)))
            for i in chosen:
                head = f"  {i:>{digits}}  "
                print(head + format_event(*events[i - 1], width - len(head), style))
        if timeline and result.trace.end_time > 0:
            print("\n  timeline:")
            grid = text_timeline(result, max(10, width - 12), tag=scenario.op_tag(), devices=only.devices, legend=True)
            print("\n".join(clip("  " + line, width) for line in grid.splitlines()))
        print()
    for line in run.summary().splitlines():
        print(textwrap.fill(line, width, initial_indent="  ", subsequent_indent="    ") if line else "")
    verdict = "as expected" if run.as_expected else f"NOT AS EXPECTED (expected: {scenario.expect})"
    print(f"  -> {verdict}\n")
    return run.as_expected


def _values_mode(stepper: Stepper, width: int, style: ValueStyle) -> str:
    """Every value at every step when that stays short (each device on one line at the end), else only
    the value each step places."""
    last = stepper.goto(len(stepper.trace.events)).render(width, style=style, values="all")
    stepper.goto(0)
    return "all" if len(last.splitlines()) <= stepper.trace.world_size + 2 else "new"  # head, devices, in flight


def devices_arg(text: str) -> frozenset[int]:
    """argparse type for ``--devices``."""
    return _arg(parse_devices, text)


def steps_arg(text: str) -> tuple[int | None, int | None]:
    """argparse type for ``--steps``."""
    return _arg(parse_steps, text)


def kinds_arg(text: str) -> frozenset[str]:
    """argparse type for ``--kinds``: a comma-separated list of event kinds."""
    kinds = frozenset(k.strip() for k in text.split(",") if k.strip())
    bad = sorted(kinds - set(KINDS))
    if bad or not kinds:
        import argparse

        raise argparse.ArgumentTypeError(f"no event kind {bad[0] if bad else text!r}: choose from {', '.join(KINDS)}")
    return kinds


def _arg(parse, text: str):
    import argparse

    try:
        return parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
