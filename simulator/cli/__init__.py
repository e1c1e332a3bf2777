"""The command line: ``python -m simulator COMMAND`` (``--help`` lists and explains every command).

==========  ====================================================================================
main.py     the parser and ``main``: reads the table of commands, runs one
options.py  every command's arguments and their help (the table ``main`` reads)
commands.py what demo, list, run, timeline, html, explore, memory, grade, export, figures, calibrate do
whatif.py   what ``whatif`` and ``validate`` do: a training step planned, the planner checked against papers
show.py     what ``run`` and ``demo`` print: events, memory after each, the timeline and the check
types.py    argument types: numbers within bounds, paths that can be written
torchrun.py a scenario or rank program on processes ``torchrun`` starts (``-m simulator.cli.torchrun``)
==========  ====================================================================================
"""

from .main import main

__all__ = ["main"]
