"""What the rows would say if NCCL's rings between nodes lost bandwidth with node count as one report measured.

The what-if prices a collective between nodes at 24 GB/s a 200 Gb/s port (on A100, a group with one GPU a node
at what NCCL was measured to reach there) whatever the number of nodes, after one latency (docs/whatif.md,
Collectives). The one measurement by node count found (NVIDIA/nccl issue 1229, March 2024, an H100 cluster
whose network and message size are not given) puts reduce-scatter's bus bandwidth at
"360,345,320,300,280,260" GB/s on 4, 8, 16, 32, 64 and 128 nodes: 72% at 128 nodes of what it was at 4.
Another (NVIDIA/nccl issue 1712, May 2025, A100 nodes with four 200 Gb/s ports) found the ring's bandwidth at
the largest size "basically the same" as nodes were added and only the middle sizes falling, as NCCL's ring
latency, linear in the ranks, predicts. This applies issue 1229's fall (read between its points in
log(nodes), 72% kept beyond 128) to every collective that crosses nodes, or to reduce-scatters and
all-gathers only (NCCL's all-reduce between nodes may run as a tree), and prints every row that moves by
0.003 or more: a sensitivity, nothing fed back.

Run: python benchmarks/whatif_ring_scale.py  (about a minute)
"""

from __future__ import annotations

import math
from dataclasses import fields, replace

NODES = (4, 8, 16, 32, 64, 128)
BUSBW = (360, 345, 320, 300, 280, 260)  # GB/s, NVIDIA/nccl issue 1229


def share(nodes: float) -> float:
    """Issue 1229's bus bandwidth on ``nodes`` nodes over its bandwidth on 4, read in log(nodes)."""
    if nodes <= NODES[0]:
        return 1.0
    if nodes >= NODES[-1]:
        return BUSBW[-1] / BUSBW[0]
    x = math.log(nodes)
    for (a, ba), (b, bb) in zip(zip(NODES, BUSBW), zip(NODES[1:], BUSBW[1:])):
        if a <= nodes <= b:
            t = (x - math.log(a)) / (math.log(b) - math.log(a))
            return (ba + t * (bb - ba)) / BUSBW[0]
    raise AssertionError(nodes)


def falling(achieved, kinds: tuple[str, ...]):
    """``achieved`` with the collectives of ``kinds`` between nodes at ``share(nodes)`` of the port's bandwidth."""
    from simulator.cost.achieved import Achieved, bus_factor

    class Falling(Achieved):
        def collective_time(self, kind, nbytes, ranks, per_node=None):
            per_node = ranks if per_node is None else per_node
            if kind not in kinds or ranks <= 1 or nbytes <= 0 or per_node >= ranks:
                return super().collective_time(kind, nbytes, ranks, per_node)
            curve = self.bus.get(kind, self.bus["all_reduce"])
            factor = bus_factor(kind, ranks)
            inside = factor * nbytes / curve.at(nbytes * self.bus_ranks / ranks)
            rate = per_node * self.gpu_nic_bandwidth  # as priced (one GPU a node: its measured rate) ...
            if per_node == 1 and self.nic_one_per_node and kind in self.nic_one_per_node:
                rate = min(rate, self.nic_one_per_node[kind])
            rate *= share(ranks / per_node)  # ... and falling with the nodes as issue 1229 measured
            return max(inside, self.nic_latency + factor * nbytes / rate)

    return Falling(**{f.name: getattr(achieved, f.name) for f in fields(achieved)})


def main() -> None:
    from simulator.cost.systems import System, system
    from simulator.parallel.whatif.outside import outside_rows
    from simulator.parallel.whatif.tables import published_rows
    from simulator.parallel.whatif.validate import speed_ratio, validate

    outside = outside_rows()
    rows = [(r, True) for r in outside] + [(r, False) for r in published_rows()]

    def ratio(checked, out: bool) -> float:
        return speed_ratio(checked) if out else checked.ratio

    base = [ratio(c, out) for c, (_, out) in zip(validate([r for r, _ in rows]), rows)]
    for kinds in (("reduce_scatter", "all_gather"), ("reduce_scatter", "all_gather", "all_reduce", "all_to_all")):
        moved = []
        for r, _ in rows:
            machine = r.system if isinstance(r.system, System) else system(r.system)
            moved.append(replace(r, system=System(machine.cost, falling(machine.achieved, kinds))))
        print(f"between nodes at issue 1229's share: {', '.join(kinds)} (speed ratio for out-of-sample rows)")
        for before, c, (r, out) in zip(base, validate(moved), rows):
            after = ratio(c, out)
            if abs(after - before) >= 0.003:
                print(f"  {'out ' if out else 'in  '}{r.label:48} {before:.3f} -> {after:.3f}")


if __name__ == "__main__":
    main()
