"""The README's Python examples run as written and print what the README says."""

import contextlib
import io
import re
from pathlib import Path

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def test_readme_python_blocks_run_and_print_what_they_claim():
    out = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(out):
        for block in re.findall(r"```python\n(.*?)```", README, re.S):
            exec(compile(block, "README.md", "exec"), namespace)  # later blocks build on earlier ones
    printed = out.getvalue()
    assert "[49.]" in printed
    assert printed.count("check passed") == 2
    assert "check passed: 7 values and the result match the single-device run" in printed
    assert "check passed: 6 values and the result match the single-device run" in printed


def test_readme_quotes_the_checker_word_for_word():
    namespace: dict = {}
    first = re.findall(r"```python\n(.*?)```", README, re.S)[0]
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(first, "README.md", "exec"), namespace)
    bug = first.replace("dev.send(h, dst=1)", "dev.send(x, dst=1)")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(bug, "README.md", "exec"), {})
    quoted = re.search(r"check FAILED.*?\(the model's raw input\)\.", README, re.S).group(0)
    assert " ".join(quoted.split()) in " ".join(out.getvalue().split())
