"""Expert-parallel scenarios: a mixture of experts over three devices, and two bugs of the token shuffle.

Three devices, one expert each, four tokens each; the router sends the tokens of group s to the experts in a
fixed pattern (the inputs point at their experts), so that every device sends as many rows as it receives,
but not to the same devices: [[1, 2, 1], [1, 1, 2], [2, 1, 1]] rows from group s (row) to expert e (column).

- ep-dispatch-combine:        dispatch and combine by all-to-all with per-device split sizes; every value
                              and gradient equal to one device's
- ep-bug-swapped-splits:      the combine reuses the dispatch's split sizes the same way round: every
                              message has the size its receiver expects (the totals agree), but the rows go
                              to the wrong devices; the check stops at the first wrong row returned
- ep-bug-combine-wrong-order: the returned rows are added to the tokens in the order they arrive (sorted
                              by expert), not put back to the tokens they came from
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...checker import Split
from ...core.world import World
from ...parallel.experts.model import MoE
from ...parallel.experts.parallel import ExpertParallel, all_to_all_single
from ..scenario import Scenario

MODEL = MoE(d_model=4, d_ff=8, experts=3, top_k=1, capacity_factor=2.0, groups=3)
TARGETS = [
    1,
    0,
    2,
    1,
    2,
    0,
    1,
    2,
    0,
    2,
    1,
    0,
]  # group 0: 1, 2, 1 rows to experts 0, 1, 2; group 1: 1, 1, 2; group 2: 2, 1, 1


def routed_data(seed: int = 50) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Parameters whose router follows the inputs' direction, and inputs pointing at their TARGETS."""
    rng = np.random.default_rng(seed)
    params = MODEL.init(seed=seed)
    params["Wr"] = 3.0 * np.eye(MODEL.d_model, MODEL.experts) + 0.1 * rng.normal(size=(MODEL.d_model, MODEL.experts))
    x = 2.0 * np.eye(MODEL.d_model)[TARGETS] + 0.3 * rng.normal(size=(len(TARGETS), MODEL.d_model))
    return params, x, rng.normal(size=x.shape)


PARAMS, X_IN, T_IN = routed_data()


class SwappedSplits(ExpertParallel):
    """The combine sends with the dispatch's split sizes the same way round (input = what I sent, output =
    what I received), where it must reverse them: the messages still fit, the rows do not."""

    def combine(self, dev, group, outs, counts, s, sends, recvs):
        P = len(group)
        back = []
        for j in range(P):
            for e in self.owned(s, P):
                start = int(counts[:j, e].sum())
                back.append(outs[e][start : start + int(counts[j, e])])
        got = all_to_all_single(dev, np.concatenate(back), recvs, sends, group)  # BUG: (sends, recvs) reversed
        returned, at = {}, 0
        for j in range(P):
            for e in self.owned(j, P):
                n = int(counts[s, e])
                returned[e] = got[at : at + n]
                at += n
        return returned


class CombineInArrivalOrder(ExpertParallel):
    """The returned rows, sorted by expert, are added to tokens 0, 1, 2, ... in that order instead of
    being put back where they came from (the un-permutation forgotten)."""

    def unpermute(self, dev, xs, route, outs, rows):
        def wrong(x, *o):
            y = x.copy()
            gates = np.concatenate([route.gates[r, sl] for r, sl in zip(route.rows, route.slots)])
            arrived = np.concatenate(o)
            y[: len(arrived)] += gates[:, None] * arrived  # BUG: tokens in arrival order, not route.rows
            return y

        return dev.compute("y", wrong, xs, *outs, index=(rows, slice(None)))


# experts over three devices: tokens go to their experts and back by all-to-all, nothing by the program's own sends
SPLIT = Split(collectives=("all_gather", "all_to_all", "all_reduce"), crosses={})


def _scenario(name: str, title: str, story: str, program: Any, expect: str = "match") -> Scenario:
    tags = ("experts", "training") + (("bug",) if expect == "diverge" else ())
    reference = lambda: program.reference(PARAMS, X_IN, T_IN)  # noqa: E731
    return Scenario(name, title, story, World(3), program, (PARAMS, X_IN, T_IN), reference, expect, tags, SPLIT)


SCENARIOS = [
    _scenario(
        "ep-dispatch-combine",
        "A mixture of experts over three devices: dispatch and combine by all-to-all",
        "Each device routes its four tokens; an all-gather tells every device how many rows go where; an all-to-all "
        "with per-device split sizes takes each row to its expert's device, and another brings the outputs back, "
        "where each row returns to its token, times its gate. The backward goes the same ways in reverse.",
        ExpertParallel(MODEL),
    ),
    _scenario(
        "ep-bug-swapped-splits",
        "Bug: the combine uses the dispatch's split sizes the same way round",
        "Device s must send back to j the rows it received from j; it cuts its buffer by the sizes it sent instead. "
        "Each device sends and receives four rows in all, so every message still has the size its receiver expects: "
        "nothing fails, the rows go to the wrong devices. The check stops at the first row returned wrong.",
        SwappedSplits(MODEL),
        "diverge",
    ),
    _scenario(
        "ep-bug-combine-wrong-order",
        "Bug: the returned rows added to the tokens in the order they arrive",
        "The rows come back sorted by expert. Adding them to tokens 0, 1, 2, ... in that order gives each token "
        "another token's expert output: the check stops at the layer's output.",
        CombineInArrivalOrder(MODEL),
        "diverge",
    ),
]

assert [list(r.counts()) for r in MODEL.routings(PARAMS, X_IN)] == [[1, 2, 1], [1, 1, 2], [2, 1, 1]], "routing moved"
