"""The seed notebook runs top to bottom and shows what it claims."""

import pytest

from tests.notebooks import assert_every_plot_shows, execute_notebook, outputs_text, outputs_words, widget_texts


@pytest.mark.slow
def test_seed_notebook_executes():
    nb = execute_notebook("01_what_crosses_the_boundary.ipynb")
    assert assert_every_plot_shows(nb) == 1  # the split and the bug on one clock
    text = outputs_text(nb)
    assert "check passed" in text
    assert "carried [3.], but device 1 should have received A" in outputs_words(nb)
    assert "in flight: #0 0->1=[7.]" in text
    assert "device 0: [49.], device 1: [81.]" in text
    split, bug = widget_texts(nb)  # the step-through view, opened on the message, then on the divergence
    assert split.startswith("split: ") and "step 3/5" in split and "in flight: #0 0->1 A=[7.]" in split
    assert "device 1 | A=[3.]  <- first divergence" in bug
