"""One BLAS thread while devices run (World(blas_threads=...)), the caller's own setting before and after."""

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from simulator import World

blas = pytest.mark.skipif(not any(i["user_api"] == "blas" for i in threadpool_info()), reason="no BLAS found")


def blas_threads(dev):
    dev.compute("y", np.matmul, np.ones((4, 4)), np.ones((4, 4)))
    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


@blas
def test_devices_run_with_one_blas_thread_and_the_callers_setting_comes_back():
    with threadpool_limits(2, user_api="blas"):  # as on a 2-core machine, where BLAS starts two
        assert World(2).run(blas_threads).outputs == [1, 1]
        assert World(2, blas_threads=2).run(blas_threads).outputs == [2, 2]
        assert World(2, blas_threads=None).run(blas_threads).outputs == [2, 2]  # left alone
        assert max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas") == 2


@blas
def test_stepping_holds_the_limit_only_while_devices_run():
    with threadpool_limits(2, user_api="blas"):
        engine = World(2).start(blas_threads)
        list(engine.events())
        assert engine.outputs == [1, 1]
        assert max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas") == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_a_bad_thread_count_is_refused(bad):
    with pytest.raises(ValueError, match="blas_threads"):
        World(2, blas_threads=bad)
