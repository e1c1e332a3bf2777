"""Teaching material: named scenarios, self-grading exercises, the step-through view by name, the figures.

=============  ===========================================================================================
scenario.py    ``Scenario``: a world, a rank program, its inputs and its single-device reference, replayed
               and checked (on the simulator, or with ``run(on=TorchWorld(...))`` on real processes)
examples/      the named scenarios (``get("wrong-input")``; ``python -m simulator list``), one module per topic
exercises/     exercises that grade themselves, for the notebooks in ``notebooks/exercises/``
grading.py     a class's files graded into a CSV (``python -m simulator grade FOLDER``): the verdict made here,
               each answer run in a process of its own (remote_answer.py, the grader's side; student_process.py,
               the student's: limited and guarded by answer_guard.py, its grader's code sealed by answer_seal.py;
               it returns records, never verdicts)
view.py        ``simulator.view``: the step-through widget and page, for runs and scenarios by name
figures/       every figure in ``figures/``, each built by one registered function
=============  ===========================================================================================
"""

from .examples import all_scenarios, get
from .scenario import Scenario, ScenarioRun

__all__ = ["Scenario", "ScenarioRun", "all_scenarios", "get"]
