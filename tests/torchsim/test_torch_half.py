"""A row-parallel linear layer in float16, written as engineers write it (each rank's slice of the input and the
weight, one product, ``dist.all_reduce``), checked against the layer on one device: its sum of four partial products
added in the ring's order is right (one or two ulps off near zero), and one element half off is not."""

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
nn = torch.nn

from simulator import Reference, check, simulate_torch  # noqa: E402


class Linear(nn.Module):
    def __init__(self, w):
        super().__init__()
        self.w = nn.Parameter(w)

    def forward(self, x):
        return x @ self.w


def row_parallel(x, w, off):
    r, p = dist.get_rank(), dist.get_world_size()
    k = x.shape[1] // p
    y = x[:, r * k : (r + 1) * k] @ w[r * k : (r + 1) * k]
    dist.all_reduce(y)
    y[0, 0] += off
    return y


@pytest.mark.parametrize("off, verdict", [(0.0, "passed"), (0.5, "FAILED")])
def test_a_float16_row_parallel_layer_gets_its_verdict(off, verdict):
    torch.manual_seed(0)
    x, w = torch.randn(4, 64, dtype=torch.float16), torch.randn(64, 32, dtype=torch.float16)
    run = simulate_torch(row_parallel, 4, x, w, off)
    assert check(run, Reference.of_torch(Linear(w), x)).verdict == verdict
