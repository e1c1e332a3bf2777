"""One verdict, simulated or real: a program that moves data through a module-level dict is FAILED simulated, with
the reason (the isolation check), and stops on gloo processes, where each rank has its own module (KeyError); the
right program passes both ways."""

import numpy as np
import pytest

from simulator import PerDevice, World
from simulator.checker import check
from simulator.real.errors import RemoteRankError
from simulator.teach.exercises import grade, tensor
from tests import split_programs as P

pytest.importorskip("torch.distributed")

pytestmark = [pytest.mark.slow, pytest.mark.gloo]


def words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="module")
def row_split():
    """The row-split exercise on the notebook's inputs: each device given its columns of X and rows of W."""
    exercise = tensor.row_split()
    inputs = exercise.inputs(None)
    split = exercise.split(inputs)
    args = [PerDevice([split.part(n, r, inputs[n]) for r in range(2)]) for n in exercise.arguments]
    return exercise.reference(inputs), split, args


def test_a_module_dict_is_failed_simulated_and_stops_on_gloo(gloo_worlds, row_split):
    reference, split, args = row_split
    simulated = check(World(2).run(P.row_total_from_a_module_dict, *args), reference, split=split, isolation=True)
    assert simulated.verdict == "FAILED"
    assert "device 0's result depends on x and w, which only device 1 holds, but no message carried it" in words(
        simulated.text()
    )
    graded = grade("row-split", P.row_total_from_a_module_dict, seed=1)
    assert graded.verdict == "FAILED" and graded.diagnosis == "isolation"

    P.ROW_PARTS.clear()  # (the simulation left both parts in this process's dict; a rank process starts empty)
    # each rank holds only its own part: whichever rank reads the dict first misses the other's (KeyError: 0 or 1)
    with pytest.raises(RemoteRankError, match=r"KeyError: [01]"):
        gloo_worlds(2, timeout=20).run(P.row_total_from_a_module_dict, *args)


def test_the_right_row_split_passes_simulated_and_on_gloo(gloo_worlds, row_split):
    reference, split, args = row_split
    simulated = check(World(2).run(P.row_unnamed_all_reduce, *args), reference, split=split, isolation=True)
    assert simulated.ok, simulated.text()
    real = gloo_worlds(2, timeout=20).run(P.row_unnamed_all_reduce, *args)
    assert check(real.trace, reference, split=split).ok
    np.testing.assert_allclose(real.outputs[0], reference.result)
