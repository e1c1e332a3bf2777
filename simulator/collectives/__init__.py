"""Collectives written as point-to-point messages (see ``api.py``); the names other modules import."""

from ..tags import TAG_BASE
from .api import (
    ALGORITHMS,
    REDUCE_FNS,
    CollectiveMethods,
    FlatSlice,
    all_gather,
    all_reduce,
    all_to_all,
    barrier,
    broadcast,
    describe_call,
    gather,
    reduce,
    reduce_scatter,
    resolve_group,
    scatter,
    ulp_distance,
)
from .api import (
    _Call as _Call,  # the type booked.py and ring_plan.py annotate with
)

__all__ = [
    "ALGORITHMS",
    "REDUCE_FNS",
    "TAG_BASE",
    "CollectiveMethods",
    "FlatSlice",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "barrier",
    "broadcast",
    "describe_call",
    "gather",
    "reduce",
    "reduce_scatter",
    "resolve_group",
    "scatter",
    "ulp_distance",
]
