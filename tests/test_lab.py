"""`make lab` installs what every notebook needs: the notebooks extra, and torch for the real processes of 06 and
torch's own schedule classes in 07."""

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
IMPORT = re.compile(r"^\s*(?:from|import)\s+([\w.]+)", re.M)


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


def test_the_lab_installs_torch_for_the_notebooks_that_start_real_processes():
    extras = lab_extras()
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert "notebooks" in extras and all(re.search(rf"^{extra} = \[", pyproject, re.M) for extra in extras)
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
    assert "torch" in extras  # without it notebooks 06 and 12 stop at their first cells, and 07 at its comparison
    first = nbformat.read(ROOT / real[0], as_version=4).cells[0].source
    assert "It needs torch" in first and "make lab" in first  # and it says so, for a student installing by hand


def test_the_lab_plan_prints_the_answers_it_states():
    """docs/lab.md's expected answers are computed by its own block: the block's output is the text under it."""
    import contextlib
    import io

    text = (ROOT / "docs" / "lab.md").read_text()
    code, stated = re.search(r"```python\n(.*?)```\n\n```\n(.*?)```", text, re.S).groups()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "lab.md", "exec"), {})
    assert out.getvalue() == stated
    assert stated.startswith("v = 1: zb-h1")  # the answer the lab asks for, with one stage per device


def test_the_lab_installs_without_torch_and_says_where_torch_is_needed():
    readme = (ROOT / "README.md").read_text()
    without_make = readme[readme.index("Without `make`") :].split("\n\n")[0]
    assert '".[notebooks]"' in without_make and "06" in without_make and "12" in without_make
    assert '".[notebooks,torch]"' in without_make
    for name in ("06_simulated_vs_real_processes", "12_torch_programs"):
        first = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4).cells[0].source
        assert "It needs torch" in first and "notebooks,torch" in first, name
    plan = (ROOT / "docs" / "lab.md").read_text()
    assert "git archive" in plan and ":!instructor" in plan and "full screen" in plan.lower()
