"""The torch-backend notebook runs top to bottom on real gloo processes and shows what it claims."""

import re

import pytest

pytest.importorskip("torch.distributed")

from tests.notebooks import assert_every_plot_shows, execute_notebook, outputs_text  # noqa: E402


@pytest.mark.slow
@pytest.mark.gloo
def test_torch_notebook_executes():
    nb = execute_notebook("06_simulated_vs_real_processes.ipynb")
    assert assert_every_plot_shows(nb) == 2  # the simulated and measured timelines, plain and calibrated
    text = outputs_text(nb)
    assert text.count("check passed: 7 values and the result match the single-device run") == 2  # sim and real
    assert "same run: 1 message and 3 ops/values match, outputs equal" in text
    assert "same explanation: True" in text
    assert "replicated on real processes: [[49.0], [81.0]] messages: 0" in text
    assert "torch backend: device 1 raised ContractError: contract violated" in text
    # PyTorch checks on both sides (stage 0 its outputs, stage 1 what it is told to receive); either may be first
    assert re.search(
        r"PyTorch pipelining: device [01] raised PipeliningMetadataError: Stage [01] \w+\[0\]: shape mismatch", text
    )
    assert "one microbatch:  [49.]" in text and "two microbatches: [49. 81.]" in text
    assert "calibrated on 2 gloo ranks" in text
