"""The notebooks of the rest of the field (07 onwards) run top to bottom and show what they claim."""

import re

import pytest

from tests.notebooks import execute_notebook, outputs_text


@pytest.mark.slow
def test_pipeline_schedules_notebook_executes():
    text = outputs_text(execute_notebook("07_pipeline_schedules.ipynb"))
    assert text.count("same order as torch on every device: True") == 5
    assert "placement (stage -> device): (0, 1, 2, 3, 3, 2, 1, 0)" in text
    assert "check passed" in text and "h2.mb0 freed 1 time" in text
    assert re.search(r"ZB-V\s+0\.0625\s+1/16", text)
    assert re.search(r"interleaved 1F1B \(v=2\)\s+0\.1875\s+3/16", text)
    assert text.count("check passed") >= 4
