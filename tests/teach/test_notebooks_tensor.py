"""The tensor-parallel and ring all-reduce notebooks run top to bottom and show what they claim."""

import re

import pytest

from tests.notebooks import assert_every_plot_shows, execute_notebook, outputs_text, widget_texts


@pytest.mark.slow
def test_tensor_parallel_notebook_executes():
    nb = execute_notebook("02_tensor_parallel.ipynb")
    assert assert_every_plot_shows(nb) == 2  # the partial and the column-sharded Y
    text = outputs_text(nb)
    assert "| Y=[[-0.25  , -0.125 , -0.125 , -0.25  , -0.375 , -1.    ]," in text  # small arrays in full
    assert "rows 0:2  0+1 (sum)" in text  # the partial layout, in the table
    assert "msg #2 as Y.partial[0]" in text  # the row split's first all-reduce message, stepped through
    assert text.count("check passed") >= 3
    assert "Y.partial[0] (device 0's partial sum of Y = X @ W, before the all-reduce)" in text
    (row,) = widget_texts(nb)  # the row split in the step-through view: shards with their parts, chunk labels
    assert "device 1 | X [0:2, 2:4]=[[0.5, 1.], [0.75, 1.]]" in row
    assert "(all_reduce#0 ring step 0 chunk 0)" in row


@pytest.mark.slow
def test_ring_all_reduce_notebook_executes():
    nb = execute_notebook("03_ring_all_reduce.ipynb")
    assert assert_every_plot_shows(nb) == 1  # the ring on its clock
    text = outputs_text(nb)
    assert re.search(
        r"all_reduce#0 ring step 2 chunk 0 +3 -> 0 +x\[1\]\+x\[2\]\+x\[3\] elements 0-1 \(flattened\)", text
    )
    assert "check passed: 44 values and the result match the single-device run" in text
    assert "p= 8: simulated    32.588 us, formula    32.588 us" in text
    assert "2(p-1)/p * n bytes = 6000.0" in text and "6.0 KB" in text
    (ring,) = widget_texts(nb)
    assert "#7 3->0 x[2]+x[3]=[9., 11.] (all_reduce#0 ring step 1 chunk 1)" in ring
