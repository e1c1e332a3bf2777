"""Adam, written as three elementwise ops so a sharded optimizer can run it on any slice of the state.

Mixed-precision Adam keeps, per parameter, an fp32 master copy and two fp32 moments: K = 12 bytes of
optimizer state per parameter in the ZeRO paper's accounting (Rajbhandari et al., 2020), next to
2 bytes of fp16 parameter and 2 of fp16 gradient. The simulator computes in float64; the accounting
in ``simulator.parallel.zero`` counts elements and prices them at those sizes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Adam:
    """Adam (Kingma and Ba) with bias correction; ``step`` is 1 for the first update."""

    lr: float = 1e-2
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def first_moment(self, m: np.ndarray, g: np.ndarray) -> np.ndarray:
        return self.beta1 * m + (1.0 - self.beta1) * g

    def second_moment(self, v: np.ndarray, g: np.ndarray) -> np.ndarray:
        return self.beta2 * v + (1.0 - self.beta2) * g * g

    def update(self, step: int, master: np.ndarray, m: np.ndarray, v: np.ndarray) -> np.ndarray:
        m_hat = m / (1.0 - self.beta1**step)
        v_hat = v / (1.0 - self.beta2**step)
        return master - self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
