"""The notebooks as stored (what a reader opens before running anything) print within 120 columns."""

import nbformat
import pytest

from tests.notebooks import ROOT, assert_lines_fit

STORED = sorted(p.relative_to(ROOT / "notebooks") for p in (ROOT / "notebooks").rglob("*.ipynb"))


@pytest.mark.parametrize("name", STORED, ids=str)
def test_stored_outputs_fit_in_120_columns(name):
    assert_lines_fit(nbformat.read(ROOT / "notebooks" / name, as_version=4), str(name))


def test_a_long_line_is_found():
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(outputs=[nbformat.v4.new_output("stream", text="x" * 121)])]
    )
    with pytest.raises(AssertionError, match="cell 0: a line of 121 columns"):
        assert_lines_fit(nb, "made up")
