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
    assert printed.count("check passed") == 3
    assert "check passed: 7 values and the result match the single-device run" in printed
    assert "check passed: 8 values and the result match the single-device run" in printed


def _checker_block() -> str:
    return next(b for b in re.findall(r"```python\n(.*?)```", README, re.S) if "def row_parallel" in b)


def _run_variant(old: str, new: str) -> str:
    block = _checker_block()
    assert old in block
    namespace: dict = {}
    out = io.StringIO()
    first = re.findall(r"```python\n(.*?)```", README, re.S)[0]
    with contextlib.redirect_stdout(out):
        exec(compile(first, "README.md", "exec"), namespace)
        out.truncate(0)
        exec(compile(block.replace(old, new), "README.md", "exec"), namespace)
    return " ".join(out.getvalue().split())


def test_readme_quotes_the_missing_all_reduce_as_the_checker_words_it():
    text = _run_variant("return dev.all_reduce(y)", "return y")
    quoted = re.search(r'Forget the all-reduce \(`return y`\) and the check says: "(.*?)"\. Leave', README, re.S)
    for piece in " ".join(quoted.group(1).split()).split("[[...]]"):
        assert piece.strip() in text


def test_readme_advice_for_a_missing_index_and_a_missing_partial():
    assert "the block [:, 0:3] of that input" in _run_variant("index=cols)  # returns", ")  # returns")
    assert "partial=True" in _run_variant("partial=True)", ")")


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
