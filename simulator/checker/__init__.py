"""The checker: a parallel run against the same model on one device, with one of three verdicts.

``check(run, reference)`` walks the run's events in order and compares every value it can place in the
single-device run:

- a message whose receiver named what it carries (``recv(..., name="A")``), or, with no name, the
  reference value it equals (so an unnamed message is placed by its value);
- each held value and op output of a name the reference knows (``index=`` selects the block a device
  holds; ``partial=`` says the device holds one term of a sum over a group, and the terms are added up
  and compared once every member has computed its own);
- each op's inputs, for ops computed whole;
- what each device returns, against what the model returns (a returned shard is compared with its
  part of the result, and the parts must cover the whole result).

The verdict is one of three:

- **passed**: every named value and the result were compared and are equal, and nothing was left out (and
  the run keeps its declared split, where one is given);
- **FAILED**: the first place the run differs, with what was expected, what was found and, where it
  can tell, why ("[3.] is x, the model's raw input"; "4 times what it should be"; "a partial sum"); or
  the first place it breaks its declared split ("device 1 computed A, which belongs to device 0"); or, with
  ``isolation=``, a value on a device that depends on data only another device holds, with no message that
  carried it (``isolation.py``). The
  first is first by cause (``causal.py``), so a real run is blamed where its simulation is;
- **not verified**: nothing differs, but something could not be compared: a name the reference does
  not know, a reference value no device computed, a message that carries no value of the model, a
  result no device returned, or an input for which a correct value also equals another named value.
  ``ok`` is True only for passed.

Modules, each building only on those after it in this list (checked by import-linter):

- ``run_check.py``     ``check`` and the walk over the events: messages, held values, ops, partial sums
- ``value_columns.py`` the value walk over a columnar trace: values the model's byte for byte, with no record
- ``split_check.py``   a run held to its declared split: who computed what, what was given, what crossed
- ``split_columns.py`` the split's walk over a columnar trace, a record made only where a rule must look
- ``split_presence.py`` what a device had, as the split's rules ask it: received, brought, held, kept elsewhere, given
- ``isolation.py``     data that reached a device outside messages, found by differential runs
- ``differential.py``  ``Differential``: the program run again with some devices' own inputs changed
- ``results.py``       the result each device returns, and which parts of the model's result were covered
- ``partial_sums.py``  terms of a sum held on several devices, added up once all are there; sums added by hand
- ``unnamed.py``       values placed without a name: names the model lacks, unnamed messages, equal values
- ``expected.py``      what each name should hold, its tolerance and whether the model knows it, worked out once
- ``explain.py``       the first divergence explained in words (a partial sum, a shard, a wrong block, ...)
- ``verdict.py``       ``CheckReport``, ``Divergence``, ``Unchecked``, ``Violation``: the verdict and its text
- ``split.py``         ``Split``: who owns what beside the model (compute, given, crosses, collectives, budget)
- ``causal.py``        the order of events by cause (what each depended on), not by clock
- ``reference.py``     ``Reference``: the same model run on one device, every named value kept
- ``diagnose.py``      patterns in a wrong value, in words: k times too large, blocks reordered, wrong axis
- ``terms.py``         a value that, added to the same value on other devices, is the expected one (an
                       all-reduce missing after a row-parallel layer)
- ``comm_summary.py``  what crossed, counted per device and collective (as PyTorch's CommDebugMode counts)
- ``compare.py``       one found value against one expected value, within its dtype's tolerance
"""

from .comm_summary import CommSummary, comm_summary, message_table
from .differential import Differential, mixed, owned_elements
from .reference import NO_RESULT, Reference
from .run_check import References, check
from .split import ALL, Budget, Split
from .verdict import FAILED, NOT_VERIFIED, PASSED, CheckReport, Divergence, Unchecked, Violation

__all__ = [
    "ALL",
    "FAILED",
    "Budget",
    "NOT_VERIFIED",
    "NO_RESULT",
    "PASSED",
    "CheckReport",
    "CommSummary",
    "Differential",
    "Divergence",
    "Reference",
    "References",
    "Split",
    "Unchecked",
    "Violation",
    "check",
    "comm_summary",
    "message_table",
    "mixed",
    "owned_elements",
]
