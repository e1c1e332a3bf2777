"""Run an exercise notebook in this process, as written (the starter) or with the instructor's solution.

Fast: the cells are executed here, in one namespace per run, not in a kernel (the notebook tests run
them in a kernel too). A solution file has ``# %% [tag]`` sections, each replacing the cell with that tag.
"""

import contextlib
import io
import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks" / "exercises"
SOLUTIONS = ROOT / "instructor" / "exercises"


def exercise_notebooks() -> list[str]:
    return sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))


def solution_cells(notebook: str) -> dict[str, str]:
    """The solution's sections by tag."""
    text = (SOLUTIONS / notebook.replace(".ipynb", ".py")).read_text()
    parts = re.split(r"^# %% \[([\w-]+)\]\n", text, flags=re.M)
    return {tag: body.strip() + "\n" for tag, body in zip(parts[1::2], parts[2::2])}


def run_cells(notebook: str, solved: bool) -> dict[str, str]:
    """Execute the notebook's code cells top to bottom; returns what each tagged cell printed (by tag), plus
    everything under "all"."""
    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    replace = solution_cells(notebook) if solved else {}
    namespace: dict = {"__name__": "__main__"}
    printed: dict[str, str] = {}
    everything = []
    for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
        tags = cell.metadata.get("tags", [])
        source = next((replace[t] for t in tags if t in replace), cell.source)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(source, f"<cell {i}>", "exec"), namespace)
        for t in tags:
            printed[t] = out.getvalue()
        everything.append(out.getvalue())
    printed["all"] = "\n".join(everything)
    return printed
