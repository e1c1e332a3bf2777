"""The guides' Python examples run as written (each page after the home page's seed example), and the README
stays a short overview (the guides hold the rest)."""

import contextlib
import io
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _run(text: str, namespace: dict, where: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        for block in BLOCK.findall(text):
            exec(compile(block, where, "exec"), namespace)
    return out.getvalue()


def test_the_home_page_example_passes_its_check():
    assert "check passed: 7 values and the result match" in _run((DOCS / "index.md").read_text(), {}, "index.md")


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md") if BLOCK.search(p.read_text())))
def test_every_guide_runs_as_written(page):
    namespace: dict = {}
    _run((DOCS / "index.md").read_text(), namespace, "index.md")  # the seed model, split and run they build on
    _run((DOCS / page).read_text(), namespace, page)


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md") if BLOCK.search(p.read_text())))
def test_a_guide_that_needs_the_home_page_example_says_so(page):
    """A newcomer runs a page's blocks as they read it: where they need the home page's names, the page says so."""
    text = (DOCS / page).read_text()
    try:
        _run(text, {}, page)
    except NameError as exc:
        assert "[the home page's](index.md)" in text, (
            f"{page} needs the home page's example ({exc}) and does not say so"
        )


def test_the_readme_is_an_overview():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 250
    for link in re.findall(r"\]\((docs/[\w./-]+)\)", "\n".join(lines)):  # every guide it points at exists
        assert (ROOT / link).is_file(), link
