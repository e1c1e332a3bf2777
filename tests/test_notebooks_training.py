"""The training notebooks run top to bottom and show what they claim."""

import pytest

from tests.notebooks import execute_notebook, outputs_text


@pytest.mark.slow
def test_pipeline_notebook_executes():
    text = outputs_text(execute_notebook("04_pipeline_1f1b.ipynb"))
    assert "schedule breaks rule 3" in text
    assert "check passed" in text
    assert "1F1B         33.0     0.273     0.375  [4, 3, 2, 1]" in text
    assert "ZB-H1        27.0     0.111     0.125  [4, 4, 4, 4]" in text
    assert "is t.mb3 (the targets (labels) of microbatch 3)" in text


@pytest.mark.slow
def test_data_parallel_notebook_executes():
    text = outputs_text(execute_notebook("05_data_parallel.ipynb"))
    assert "check passed" in text
    assert "carries bucket(dW2,db2).replica[0]" in text
    assert "is dW4.sum (the replicas' gradients of W4 summed but not divided by 2)" in text
    assert "    3        108        108        648     864   864" in text
