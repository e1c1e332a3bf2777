"""The seed notebook runs top to bottom and shows what it claims."""

import pytest

from tests.notebooks import execute_notebook, outputs_text


@pytest.mark.slow
def test_seed_notebook_executes():
    text = outputs_text(execute_notebook("01_what_crosses_the_boundary.ipynb"))
    assert "check passed" in text
    assert "carried [3.], but device 1 should have received A" in text
    assert "in flight: #0 0->1=[7.]" in text
    assert "device 0: [49.], device 1: [81.]" in text
