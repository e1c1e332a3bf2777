"""`make lab` installs what the lab needs, without torch: only notebooks 06 and 12 (real processes, torch programs)
and one cell of 07 (torch's own schedule classes) use torch, and each says at once how to add it."""

import contextlib
import importlib.util
import io
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
IMPORT = re.compile(r"^\s*(?:from|import)\s+([\w.]+)", re.M)
ADD_TORCH = 'pip install -e ".[torch]" -c constraints.txt'
TORCH_NOTEBOOKS = ("06_simulated_vs_real_processes", "12_torch_programs")


def lab_extras() -> set[str]:
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^\$\(VENV\)/\.lab:.*\n\t\$\(PIP\) -e \"\.\[([\w,]+)\]\"", makefile, re.M)
    assert recipe, "the Makefile has no $(VENV)/.lab recipe installing the package with extras"
    return set(recipe[1].split(","))


def notebook_imports() -> dict[str, set[str]]:
    found = {}
    for path in sorted((ROOT / "notebooks").rglob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        found[str(path.relative_to(ROOT))] = set(IMPORT.findall(code))
    return found


def code_cells(name: str) -> list[str]:
    return [
        c.source
        for c in nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4).cells
        if c.cell_type == "code"
    ]


def without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A laptop set up by `make lab`: importlib finds no torch."""
    find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else find(name, *a))


def test_the_lab_installs_no_torch_and_only_notebooks_06_07_12_use_it():
    extras = lab_extras()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "notebooks" in extras and all(re.search(rf"^{extra} = \[", pyproject, re.M) for extra in extras)
    assert "torch" not in extras  # 80 laptops downloading torch in the room is what stalls a lab
    real = [
        name
        for name, mods in notebook_imports().items()
        if any(m.startswith(("torch", "simulator.real", "simulator.calibration", "simulator.torchsim")) for m in mods)
    ]
    assert real == [
        "notebooks/06_simulated_vs_real_processes.ipynb",
        "notebooks/07_pipeline_schedules.ipynb",
        "notebooks/12_torch_programs.ipynb",
    ]


@pytest.mark.parametrize("name", TORCH_NOTEBOOKS)
def test_a_notebook_that_needs_torch_says_how_to_add_it_at_its_first_cell(monkeypatch, name):
    first = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4).cells[0].source
    assert "It needs torch" in first and ADD_TORCH in first and "make lab" in first
    check = code_cells(name)[0]
    exec(compile(check, name, "exec"), {})  # torch here: the check passes quietly
    without_torch(monkeypatch)
    with pytest.raises(ModuleNotFoundError) as missing:
        exec(compile(check, name, "exec"), {})
    assert f"notebook {name[:2]} needs torch: {ADD_TORCH}" in str(missing.value)  # not a bare "No module named"


def test_notebook_07_skips_its_comparison_with_torch_s_classes_saying_why(monkeypatch):
    (cell,) = [c for c in code_cells("07_pipeline_schedules") if "torchsim" in c]
    without_torch(monkeypatch)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(cell, "07", "exec"), {})  # make_schedule and the rest are never reached
    assert out.getvalue().startswith("skipped: ") and ADD_TORCH in out.getvalue()


def test_the_lab_plan_prints_the_answers_it_states():
    """docs/lab.md's expected answers are computed by its own block: the block's output is the text under it."""
    text = (ROOT / "docs" / "lab.md").read_text()
    code, stated = re.search(r"```python\n(.*?)```\n\n```\n(.*?)```", text, re.S).groups()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "lab.md", "exec"), {})
    assert out.getvalue() == stated
    assert stated.startswith("v = 1: zb-h1")  # the answer the lab asks for, with one stage per device


def test_the_readme_and_the_lab_plan_say_what_make_lab_does():
    readme = (ROOT / "README.md").read_text()
    without_make = readme[readme.index("Without `make`") :].split("\n\n")[0]
    assert '".[notebooks]"' in without_make and "06" in without_make and "12" in without_make
    assert ADD_TORCH in without_make and "make lab" in without_make
    make_lab = next(line for line in readme.splitlines() if line.startswith("make lab"))
    assert "no torch" in make_lab
    plan = (ROOT / "docs" / "lab.md").read_text()
    checklist = plan[plan.index("## The week before") : plan.index("**Hand out")]
    assert '.venv/bin/pip install -e ".[notebooks]"' in checklist and ADD_TORCH in checklist
    assert "`make lab` installs the same as the lines above, without torch" in checklist
    assert "git archive" in plan and ":!instructor" in plan and "full screen" in plan.lower()
