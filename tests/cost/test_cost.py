"""The cost model: closed forms for point-to-point messages, contention, topologies, overlap, presets."""

import math
from dataclasses import replace

import numpy as np
import pytest

from simulator import CostModel, World
from simulator.cost.model import FullyConnected, Ring, TwoLevel
from simulator.cost.presets import PRESETS, classroom, dgx_h100, preset

REL = 1e-9
ALPHA, BW = 2e-6, 5e9  # deliberately not round, so the closed forms are not trivially equal


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=0.0)


def sender(dev, dst: int, n: int, t0: float):
    """Device 0 waits until t0, then sends n float64 elements to dst; dst receives them."""
    if dev.rank == 0:
        if t0:
            dev.compute("wait", lambda: None, seconds=t0)
        dev.send(np.zeros(n), dst)
    elif dev.rank == dst:
        dev.recv(0)


# ---- defaults and validation ------------------------------------------------------------------


def test_defaults_are_unchanged():
    c = CostModel()
    assert (c.latency, c.bandwidth, c.flops, c.memory) == (1e-6, 100e9, 100e12, None)
    assert c.topology == FullyConnected()
    assert c.compute_time(2e12) == 0.02
    assert CostModel(1e-6, 1e9, 1e9, 1e9).memory == 1e9  # positional order kept


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"latency": -1.0}, "latency must be a finite number >= 0"),
        ({"latency": math.inf}, "latency must be a finite number >= 0"),
        ({"bandwidth": 0.0}, "bandwidth must be > 0"),
        ({"flops": 0.0}, "flops must be > 0"),
        ({"memory": 0}, "memory must be > 0 bytes or None"),
    ],
)
def test_bad_cost_model_is_named(kwargs, words):
    with pytest.raises(ValueError, match=words):
        CostModel(**kwargs)


def test_bad_two_level_is_named():
    with pytest.raises(ValueError, match="number of devices per node"):
        TwoLevel(0, 1e-6, 1e9)
    with pytest.raises(ValueError, match="TwoLevel.inter bandwidth must be > 0"):
        TwoLevel(8, 1e-6, 0.0)
    with pytest.raises(ValueError, match="needs world_size"):
        CostModel(topology=Ring()).message_time(8, 0, 3)


# ---- point to point: alpha + n / B, p from 2 to 64 ----------------------------------------------


@pytest.mark.parametrize("p", range(2, 65))
def test_point_to_point_closed_form_fully_connected(p):
    cost = CostModel(latency=ALPHA, bandwidth=BW)
    n = 1000 + 37 * p
    t0 = 3e-6 * p
    msg = World(p, cost=cost).run(sender, p - 1, n, t0).trace.messages[0]
    nbytes = 8 * n
    assert msg.t_send == t0
    assert close(msg.t_arrive - msg.t_send, ALPHA + nbytes / BW)
    assert close(msg.t_recv, t0 + ALPHA + nbytes / BW)
    assert close(cost.message_time(nbytes, 0, p - 1), ALPHA + nbytes / BW)


@pytest.mark.parametrize("p", range(2, 65))
def test_point_to_point_closed_form_ring(p):
    """On a ring, a message over h hops takes h * alpha + n / B (cut-through), h = min(d, p - d)."""
    cost = CostModel(latency=ALPHA, bandwidth=BW, topology=Ring())
    nbytes = 4096 + p
    for dst in range(1, p):
        net = cost.network(p)  # idle links for every message
        start, done, arrive = net.transfer(0, dst, nbytes, 1e-3)
        hops = min(dst, p - dst)
        assert start == 1e-3
        assert close(done - start, nbytes / BW)
        assert close(arrive - 1e-3, hops * ALPHA + nbytes / BW)
        assert close(cost.message_time(nbytes, 0, dst, world_size=p), hops * ALPHA + nbytes / BW)
    # and through the engine, to the farthest device
    far = p // 2
    msg = World(p, cost=cost).run(sender, far, 100, 0.0).trace.messages[0]
    assert close(msg.t_arrive, far * ALPHA + 800 / BW)


@pytest.mark.parametrize("p", [2, 3, 8, 9, 16, 17, 64])
def test_point_to_point_closed_form_two_level(p):
    inter_alpha, inter_bw = 7e-6, 1.25e9
    cost = CostModel(latency=ALPHA, bandwidth=BW, topology=TwoLevel(4, inter_alpha, inter_bw))
    nbytes = 12_345
    for dst in range(1, p):
        arrive = cost.network(p).transfer(0, dst, nbytes, 0.0)[2]
        expect = ALPHA + nbytes / BW if dst < 4 else inter_alpha + nbytes / inter_bw
        assert close(arrive, expect)
        assert close(cost.message_time(nbytes, 0, dst), expect)
        assert close(cost.wire_time(nbytes, 0, dst), nbytes / (BW if dst < 4 else inter_bw))


def test_zero_byte_message_takes_the_latency():
    msg = World(2, cost=CostModel(latency=ALPHA, bandwidth=BW)).run(sender, 1, 0, 0.0).trace.messages[0]
    assert msg.t_arrive == ALPHA


# ---- contention: one message at a time per link direction ------------------------------------


def fan(dev, plan: dict, n: int):
    """Every (src -> dsts) in plan posts its sends at t=0 in order; every destination receives."""
    for dst in plan.get(dev.rank, []):
        dev.isend(np.zeros(n), dst)
    for src, dsts in plan.items():
        for _ in range(dsts.count(dev.rank)):
            dev.recv(src)


def arrivals(world: World, plan: dict, n: int) -> list[tuple[int, int, float]]:
    return [(m.src, m.dst, m.t_arrive) for m in world.run(fan, plan, n).trace.messages]


def test_back_to_back_messages_queue_their_bytes_but_overlap_latency():
    n, k = 500, 5
    w = 8 * n / BW
    got = arrivals(World(2, cost=CostModel(latency=ALPHA, bandwidth=BW)), {0: [1] * k}, n)
    for i, (_, _, t) in enumerate(got):
        assert close(t, ALPHA + (i + 1) * w)


def test_fully_connected_links_to_different_peers_do_not_contend():
    n = 500
    got = arrivals(World(4, cost=CostModel(latency=ALPHA, bandwidth=BW)), {0: [1, 2, 3], 2: [1]}, n)
    assert all(close(t, ALPHA + 8 * n / BW) for _, _, t in got)


def test_the_two_directions_of_a_link_are_independent():
    n = 300
    got = arrivals(World(2, cost=CostModel(latency=ALPHA, bandwidth=BW)), {0: [1], 1: [0]}, n)
    assert all(close(t, ALPHA + 8 * n / BW) for _, _, t in got)


def test_ring_messages_sharing_a_link_queue():
    """0 -> 2 uses links 0->1 and 1->2; 1 -> 2, posted just after, must wait for 1->2 to free up."""
    n = 1000
    w = 8 * n / BW
    cost = CostModel(latency=ALPHA, bandwidth=BW, topology=Ring())
    got = dict(((s, d), t) for s, d, t in arrivals(World(8, cost=cost), {0: [2], 1: [2]}, n))
    assert close(got[(0, 2)], 2 * ALPHA + w)
    # link 1->2 carries 0's bytes during [alpha, alpha + w]; 1's message starts at alpha + w
    assert close(got[(1, 2)], (ALPHA + w) + w + ALPHA)


def test_ring_message_waits_for_a_busy_downstream_link():
    net = CostModel(latency=ALPHA, bandwidth=BW, topology=Ring()).network(8)
    busy = 100_000 / BW
    net.transfer(1, 2, 100_000, 0.0)  # link 1->2 busy during [0, busy]
    start, _, arrive = net.transfer(0, 2, 1000, 0.0)  # its head reaches 1->2 alpha after it starts
    assert close(start, busy - ALPHA)
    assert close(arrive, start + 2 * ALPHA + 1000 / BW)


def test_ring_routes_take_the_shorter_way_and_break_ties_upwards():
    assert Ring.route(0, 3, 8) == [(0, 1), (1, 2), (2, 3)]
    assert Ring.route(0, 5, 8) == [(0, 7), (7, 6), (6, 5)]
    assert Ring.route(0, 4, 8) == [(0, 1), (1, 2), (2, 3), (3, 4)]
    assert Ring.route(6, 1, 8) == [(6, 7), (7, 0), (0, 1)]
    assert Ring.route(1, 0, 2) == [(1, 0)]


def test_two_level_network_port_contention():
    inter_alpha, inter_bw = 7e-6, 1.25e9
    cost = CostModel(latency=ALPHA, bandwidth=BW, topology=TwoLevel(4, inter_alpha, inter_bw))
    n = 1000
    wx, w = 8 * n / inter_bw, 8 * n / BW

    def times(plan):
        return {(s, d): t for s, d, t in arrivals(World(8, cost=cost), plan, n)}

    # two messages leaving device 0 for the other node queue on its port; the intra-node one does not
    got = times({0: [4, 5, 1]})
    assert close(got[(0, 4)], inter_alpha + wx)
    assert close(got[(0, 5)], inter_alpha + 2 * wx)
    assert close(got[(0, 1)], ALPHA + w)
    # two messages arriving at device 4 from the other node queue on its incoming port
    got = times({0: [4], 1: [4]})
    assert sorted(got.values()) == pytest.approx([inter_alpha + wx, inter_alpha + 2 * wx], rel=REL)
    # different ports at both ends: no contention
    got = times({0: [4], 1: [5]})
    assert all(close(t, inter_alpha + wx) for t in got.values())


def test_networks_do_not_share_state():
    cost = CostModel(latency=ALPHA, bandwidth=BW)
    a, b = cost.network(2), cost.network(2)
    a.transfer(0, 1, 10**6, 0.0)
    assert b.transfer(0, 1, 8, 0.0)[0] == 0.0


# ---- overlap of compute and communication ----------------------------------------------------


def producer_consumer(dev, n: int, c: float, nonblocking: bool):
    if dev.rank == 0:
        x = np.zeros(n)
        if nonblocking:
            req = dev.isend(x, 1)
            dev.compute("work", lambda: None, seconds=c)
            dev.wait(req)
        else:
            dev.send(x, 1)
            dev.compute("work", lambda: None, seconds=c)
    else:
        if nonblocking:
            req = dev.irecv(0)
            dev.compute("work", lambda: None, seconds=c)
            dev.wait(req)
        else:
            dev.recv(0)
            dev.compute("work", lambda: None, seconds=c)
    return dev.clock


@pytest.mark.parametrize("c", [1e-6, 4e-6, 50e-6])
def test_isend_irecv_overlap_compute_with_the_transfer(c):
    n = 2000
    w = 8 * n / BW
    world = World(2, cost=CostModel(latency=ALPHA, bandwidth=BW), send_mode="rendezvous")
    done = world.run(producer_consumer, n, c, True).outputs
    assert close(done[0], max(c, w))  # the sender's wait ends when the last byte has left
    assert close(done[1], max(c, ALPHA + w))
    done = world.run(producer_consumer, n, c, False).outputs
    assert close(done[0], w + c)  # blocking: the transfer, then the work
    assert close(done[1], ALPHA + w + c)


# ---- presets ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_valid_and_describe_themselves(name):
    cost = preset(name)
    assert cost.name and cost.name in cost.describe()
    assert cost.network(16).transfer(0, 9, 1000, 0.0)[2] > 0


def test_dgx_h100_numbers():
    c = dgx_h100()
    assert close(c.message_time(450e6, 0, 7), 2e-6 + 1e-3)  # NVLink: 450 GB/s each way
    assert close(c.message_time(50e6, 0, 8), 5e-6 + 1e-3)  # InfiniBand NDR: 50 GB/s per GPU port
    assert c.memory == 81559 * 2**20  # nvidia-smi's total for an H100 80GB HBM3
    assert "between nodes" in c.describe()


def test_unknown_preset_lists_the_names():
    with pytest.raises(ValueError, match="choose one of"):
        preset("cray-1")


def test_runs_with_a_topology_are_deterministic():
    cost = replace(classroom(), topology=Ring())
    plan = {0: [3, 5, 4], 2: [6], 7: [3]}
    a = World(8, cost=cost).run(fan, plan, 64).trace.signature()
    b = World(8, cost=cost).run(fan, plan, 64).trace.signature()
    assert a == b
