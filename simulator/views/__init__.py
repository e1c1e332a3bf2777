"""What a run looks like: text views, plots, and the step-through page, all read off a finished trace.

==================  =========================================================================================
stepper.py          ``Stepper``: step through a run event by event, forward and back, seeing each device's memory
textgrid.py         ``text_timeline``: one row per device, one character per time slot, for terminals and tests
sharding_table.py   ``sharding_table``: which device holds which block of an array, as text
activity.py         what each device was doing when: the spans every timeline draws
memory.py           memory held by each device over time; ``memory_columns.py``, the same for huge runs
plot/               timelines, memory plots, animations (matplotlib, only here) and the Chrome-trace export
web/                one JSON-able document of a run, rendered by the notebook widget and the HTML page; the
                    schedule explorer page
==================  =========================================================================================

A view never changes a run; it reads the trace (``simulator.core.trace``). Scenarios by name are the
layer above's: ``simulator.view`` (``simulator.teach.view``) looks names up and calls ``web``.
"""

from .memory import MemoryTimeline, memory_timeline
from .sharding_table import sharding_table
from .stepper import Stepper
from .textgrid import text_timeline

__all__ = ["MemoryTimeline", "Stepper", "memory_timeline", "sharding_table", "text_timeline"]
