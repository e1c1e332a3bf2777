"""The notebooks of the rest of the field (07 onwards) run top to bottom and show what they claim."""

import re

import pytest

from tests.notebooks import assert_every_plot_shows, execute_notebook, outputs_text


@pytest.mark.slow
def test_pipeline_schedules_notebook_executes():
    nb = execute_notebook("07_pipeline_schedules.ipynb")
    assert assert_every_plot_shows(nb) == 1
    text = outputs_text(nb)
    assert text.count("same order as torch on every device: True") == 5
    assert "placement (stage -> device): (0, 1, 2, 3, 3, 2, 1, 0)" in text
    assert "check passed" in text and "h2.mb0 freed 1 time" in text
    assert re.search(r"ZB-V\s+0\.0625\s+1/16", text)
    assert re.search(r"interleaved 1F1B \(v=2\)\s+0\.1875\s+3/16", text)
    assert text.count("check passed") >= 4


@pytest.mark.slow
def test_transformer_notebook_executes():
    text = outputs_text(execute_notebook("08_transformer_tensor_sequence_parallel.ipynb"))
    assert text.count("finite difference") == 4
    assert text.count("check passed") == 2
    assert "the part [:, :, 0:4] of the (1, 8, 8) array on one device" in text
    assert re.search(r"tensor parallel +closed form: 64 messages, 16384 bytes;  run: 64 messages, 16384 bytes", text)
    assert re.search(
        r"sequence parallel +closed form: 116 messages, 17936 bytes;  run: 116 messages, 17936 bytes", text
    )
    assert re.search(r"\n\s+4\s+10240\s+384\s+6400\s+696\s+4864\s+792\n", text)  # regather: more messages
    assert "the all-reduce that adds the partial sums is missing?" in text
    assert "check FAILED at the first divergence: op L0.proj.mb0 on device 0 computed" in text


@pytest.mark.slow
def test_context_parallel_notebook_executes():
    nb = execute_notebook("09_context_parallel.ipynb")
    assert assert_every_plot_shows(nb) == 1
    text = outputs_text(nb)
    assert "device 0: chunks (0, 7), tokens [0, 1, 2, 3, 28, 29, 30, 31]" in text
    assert "contiguous  chunk pairs per device: [3, 7, 11, 15]" in text
    assert "balanced    chunk pairs per device: [9, 9, 9, 9]" in text
    assert "messages, bytes: (416, 68656)  closed form: (416, 68656)" in text
    assert "check passed" in text
    assert "check FAILED at the first divergence: op L0.scores.mb0 on device 1" in text


@pytest.mark.slow
def test_expert_parallel_notebook_executes():
    nb = execute_notebook("10_expert_parallel.ipynb")
    assert assert_every_plot_shows(nb) == 1
    text = outputs_text(nb)
    assert "rows each expert takes: [[0, 1], [0, 1], [3, 2]]" in text
    assert re.search(r"hand-written (\S+), finite difference \1", text)
    assert "check passed" in text
    assert "messages, bytes: (54, 1712)  closed form: (54, 1712)" in text
    assert "from group 0: [-0.16" in text and "from group 0: [-0.23" in text  # group 0's two rows first
    assert "check FAILED at the first divergence: op E0.out on device 2" in text
    assert "check FAILED at the first divergence: op y on device 0" in text


@pytest.mark.slow
def test_five_dimensions_notebook_executes():
    nb = execute_notebook("11_five_dimensions.ipynb")
    assert assert_every_plot_shows(nb) == 1
    text = outputs_text(nb)
    assert "device 21 at {'dp': 1, 'ep': 0, 'pp': 1, 'cp': 0, 'tp': 1}" in text
    assert "check passed" in text
    assert re.search(r"44 gradients and the loss; largest relative difference from one device's: \d\.\de-1[4-7]", text)
    assert re.search(r"total: +13536 = 13536", text)
    assert re.search(r"pipeline: +64 = 64", text) and re.search(r"ring attention: 512 = 512", text)
    assert re.search(r"all-to-alls: +256 = 256", text)
