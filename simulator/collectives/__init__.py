"""Collectives written as point-to-point messages, over any group of devices.

Every collective here is a plain function of a device and a group that uses only the device's public
point-to-point API (``isend``/``irecv``/``recv``/``wait``/``compute``), so the same code runs on the
simulator and on the torch.distributed backend, and every chunk of every step is a message in the
trace. Reductions are compute ops (they take simulated time under the cost model).

Algorithms (a dict from name to function per collective; ``ALGORITHMS`` lists them):

=================  =====================================================================
all_reduce         ring (reduce-scatter ring, then all-gather ring), halving_doubling
                   (Rabenseifner: recursive halving, then recursive doubling; extra
                   members of a group that is not a power of two fold into a partner
                   first), tree (binomial reduce to the first member, then binomial
                   broadcast), direct (every member sends chunk j straight to member j,
                   then every owner sends its reduced chunk straight to everyone)
reduce_scatter     ring, halving_doubling (power-of-two groups), direct
all_gather         ring, halving_doubling (recursive doubling; power-of-two groups), direct
broadcast, reduce  tree (binomial), direct
scatter, gather    tree (binomial; pieces of equal shape), direct
all_to_all         direct, pairwise (step s: send to member +s, receive from member -s)
barrier            dissemination (round k: signal member +2^k, wait for member -2^k)
=================  =====================================================================

Summation order (it differs between algorithms, so float results can differ in the last bits; see
``ulp_distance``): ring sums chunk c in ring order starting after its owner, ((x[c+1] + x[c+2]) +
...) + x[c]; direct sums in member order, ((x[0] + x[1]) + ...) + x[p-1]; tree and
halving_doubling sum pairwise, as a binary tree over members.

Chunks: all_reduce splits the flattened array into p chunks by torch.chunk's rule (see
``placements.chunk_bounds``). Tags: each device counts its collective calls per group; a call's tag
is ``TAG_BASE + count * 65536 + a 16-bit checksum of the group``, so it cannot collide with user
tags (keep those below ``TAG_BASE``) and two groups' concurrent calls do not share a tag (unless
their checksums collide, which the counts make harmless for all practical runs). Every message is
labelled ``"<kind>#<count> <algorithm> step <s> chunk <c>"`` for traces and summaries.

Naming for the checker: ``name=`` says which reference value the result is (messages carrying final
chunks are named after it, with the chunk as index, and the result is recorded as an op of that
name); ``partials=`` names the members' inputs in the reference as ``f"{partials}[m]"`` (member m's
partial sum), so the messages of a sum's reduction phase are named like ``"Z.partial[0]+Z.partial[1]"``
and the checker can compare them with the reference's own partial sums. (A halving_doubling message
that bundles several chunks is not named; its chunks are checked where they end up.)

Eager sends: where the device says its sends complete at once (``dev.eager_sends``), the ring loops
use a plain ``send`` and skip the request; elsewhere (rendezvous mode, the torch backend) they post
``isend`` and wait on it after the matching receive, which cannot deadlock.

Modules (one concept each; each builds only on those listed after it):

=====================  ===============================================================================
methods.py             ``CollectiveMethods``: the same as device methods (``dev.all_reduce(x)``), attached
                       to the core's ``Device`` as this package loads
api.py                 the public functions above, and ``ulp_distance``
booked.py              the whole-ring fast path: a ring all-reduce booked whole (its rows, and its payloads
                       where the run keeps them), through the hook the engine offers (``Engine.held_calls``)
ring_plan.py           ... the plan and timings it books
ring_payloads.py       ... and the payloads, every running sum computed at once
algorithms.py          ``ALGORITHMS``, the table from collective and algorithm name to function
ring.py                ring reduce-scatter, all-gather, all-reduce
direct.py              direct algorithms of every collective but all-to-all
halving_doubling.py    recursive halving and doubling, and the folding of groups of any size
tree.py                binomial trees: broadcast, reduce, scatter, gather, all-reduce
exchange.py            all-to-all (direct, pairwise) and the dissemination barrier
chunks.py              cutting a value into chunks; several blocks in one message
call.py                ``_Call``: one call on one device (group, tag, labels, reductions, names)
in_place.py            ``all_reduce(x, in_place=True)``: the result in x's own memory
=====================  ===============================================================================
"""

from ..core.tags import TAG_BASE
from .algorithms import ALGORITHMS
from .api import (
    all_gather,
    all_reduce,
    all_to_all,
    barrier,
    broadcast,
    gather,
    reduce,
    reduce_scatter,
    scatter,
    ulp_distance,
)
from .call import REDUCE_FNS, CallSignature, resolve_group
from .methods import CollectiveMethods

__all__ = [
    "ALGORITHMS",
    "REDUCE_FNS",
    "TAG_BASE",
    "CallSignature",
    "CollectiveMethods",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "barrier",
    "broadcast",
    "gather",
    "reduce",
    "reduce_scatter",
    "resolve_group",
    "scatter",
    "ulp_distance",
]
