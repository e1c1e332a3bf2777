"""The training notebooks run top to bottom and show what they claim."""

import re

import pytest

from tests.notebooks import assert_every_plot_shows, execute_notebook, outputs_text, outputs_words


@pytest.mark.slow
def test_pipeline_notebook_executes():
    nb = execute_notebook("04_pipeline_1f1b.ipynb")
    assert assert_every_plot_shows(nb) == 1  # the 1F1B timeline
    text = outputs_text(nb)
    assert "schedule breaks rule 3" in text
    # the step the notebook says "every device holds its layer's parameters" is the one that places the last
    assert re.search(r"step 10/\?  t=0\.000us  hold  device 3  b4\n(.*\n)*?  device 3 \| W4=", text)
    assert "check passed" in text
    assert re.search(r"1F1B\s+33\.0\s+0\.375\s+\[4, 3, 2, 1\]", text)  # the bubble: idle / busy
    assert re.search(r"ZB-H1\s+27\.0\s+0\.125\s+\[4, 4, 4, 4\]", text)
    assert "is t.mb3 (the targets (labels) of microbatch 3)" in outputs_words(nb)


@pytest.mark.slow
def test_data_parallel_notebook_executes():
    nb = execute_notebook("05_data_parallel.ipynb")
    assert assert_every_plot_shows(nb) == 1  # the overlap comparison
    text = outputs_text(nb)
    assert "check passed" in text
    assert "carries bucket(dW2,db2).replica[0]" in outputs_words(nb)
    # the markdown names the sum an all-gather step carries: the table shows that message too
    assert "carries bucket(dW2,db2).replica[1]+bucket(dW2,db2).replica[0]" in outputs_words(nb)
    assert "is dW4.sum (the replicas' gradients of W4 summed but not divided by 2)" in outputs_words(nb)
    assert re.search(r"\n\s+3\s+108\s+108\s+648\s+864\s+864\n", text)
