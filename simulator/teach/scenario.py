"""Named scenarios: a world, a rank program, its inputs, and the single-device reference.

A scenario is what a teacher runs in front of a class: ``run()`` replays it, checks it against the
single-device model, and says in words what happened. Scenarios that are meant to fail (a deadlock,
a broken contract) expect an error; their run captures it instead of raising.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..checker import CheckReport, References, Split, check
from ..core.engine import RunResult
from ..core.errors import SimulationError
from ..core.values import fit_lines, value_text
from ..core.world import World
from ..parallel.schedules.labels import op_tag

EXPECTATIONS = ("match", "diverge", "error")


@dataclass(frozen=True)
class Scenario:
    """A runnable, checkable story.

    expect: "match" (the check passes), "diverge" (the check FAILS at a bug), or "error" (the run
    itself stops with a SimulationError such as a deadlock or a contract violation).
    split: the split the story teaches (``simulator.checker.split``): who computes what, what each device is
    given, what may cross; the check holds the run to it as well as to the values.
    """

    name: str
    title: str
    story: str
    world: World
    program: Callable[..., Any]
    args: tuple = ()
    reference: Callable[[], References] | None = None
    expect: str = "match"
    tags: tuple[str, ...] = field(default_factory=tuple)
    split: Split | None = None

    def __post_init__(self) -> None:
        if self.expect not in EXPECTATIONS:
            raise ValueError(f"Scenario {self.name!r}: expect must be one of {EXPECTATIONS}, got {self.expect!r}")

    def op_tag(self) -> Callable[[str], str]:
        """How timelines label this scenario's ops: by pass and microbatch (``F3``, ``B3``), with the
        backward as one ``B`` where its pipeline schedule runs it as one action (see ``simulator.parallel.schedules.labels``)."""
        for obj in (self.program, *self.args):
            schedule = getattr(obj, "schedule", None)
            if schedule is not None and hasattr(schedule, "op_tag"):
                return schedule.op_tag
        return op_tag

    def start(self):
        """A live run, to advance event by event (see ``simulator.views.stepper.Stepper``)."""
        return self.world.start(self.program, *self.args)

    def run(self, on: Any = None) -> ScenarioRun:
        """Run the scenario and check it. ``on``: a ``TorchWorld`` (``simulator.real.launch``) to run the same
        program, arguments and rules on real processes, checked alike; None: the simulator."""
        try:
            if on is None:
                result = self.world.run(self.program, *self.args)
            else:
                result = on.run_like(self.world, self.program, *self.args)
        except SimulationError as exc:
            if self.expect != "error":
                raise
            return ScenarioRun(self, None, None, exc)
        checked = result if on is None else result.trace  # a real run's trace is what it recorded
        report = check(checked, self.reference(), split=self.split) if self.reference is not None else None
        return ScenarioRun(self, result, report, None)

    def view_source(self) -> tuple[Any, CheckReport | None, str, str]:
        """What the step-through view shows of this scenario (``simulator.views.web``): its run, checked."""
        return self.run().view_source()


@dataclass
class ScenarioRun:
    """The outcome of running a scenario: its result and check report, or the error it stopped with."""

    scenario: Scenario
    result: RunResult | None
    report: CheckReport | None
    error: SimulationError | None

    @property
    def as_expected(self) -> bool:
        expect = self.scenario.expect
        if expect == "error":
            return self.error is not None
        if self.report is None:
            return expect == "match"
        return self.report.verdict == ("passed" if expect == "match" else "FAILED")

    def view_source(self) -> tuple[Any, CheckReport | None, str, str]:
        """(trace, report, title, story): what the step-through view shows (``simulator.views.web``)."""
        s = self.scenario
        if self.result is None:
            partial = getattr(self.error, "partial", None)
            if partial is None:
                raise ValueError(
                    f"scenario {s.name!r} stops with {type(self.error).__name__}, so there is no finished run to "
                    f"show: {self.error}"
                )
            said = [line.strip() for line in str(self.error).splitlines()]  # a deadlock: the run up to it
            why = " ".join(line for line in said if line.startswith(("deadlock", "wait-for cycle")))
            return partial.trace, None, f"{s.name}: {s.title}", f"{s.story} It stops here, with {why}"
        return self.result.trace, self.report, f"{s.name}: {s.title}", s.story

    def summary(self) -> str:
        if self.error is not None:
            return fit_lines(f"stopped with {type(self.error).__name__}:\n{self.error}")
        lines = [f"outputs: {_outputs(self.result.outputs)}", f"messages: {len(self.result.trace.messages)}"]
        if self.report is not None:
            lines.append(str(self.report))
        return "\n".join(lines)


def _outputs(outputs: list[Any]) -> str:
    return ", ".join(f"device {r}: {_short(v)}" for r, v in enumerate(outputs))


def _short(v: Any) -> str:
    if v is None:
        return "-"
    return value_text(v, 72)  # a training step's gradients by name; arrays in full when short, else summarised
