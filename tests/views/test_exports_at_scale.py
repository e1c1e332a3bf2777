"""Exports and figures of huge runs: thinned per device, vectorized, the same numbers as event by event."""

import json

import numpy as np
import pytest

from simulator import CostModel, World
from simulator.cost.model import TwoLevel
from simulator.parallel.compose import Parallel3D
from simulator.parallel.mlp import MLP
from simulator.tensors.mesh import DeviceMesh
from simulator.views.activity import activity
from simulator.views.memory import memory_timeline
from simulator.views.memory_columns import memory_steps, peaks
from simulator.views.plot.busy import busy_fractions, plot_busy
from simulator.views.plot.chrome_trace import chrome_trace, write_chrome_trace
from simulator.views.plot.thin import Spans, thin, track_spans
from simulator.views.plot.timeline import plot_timeline


def step_3d(keep_payloads=True):
    mesh = DeviceMesh.grid((2, 2, 2), ("dp", "pp", "tp"))
    mlp = MLP((16,) * 5)
    x, t = mlp.data(32, seed=1)
    job = Parallel3D(mlp, mesh, "1f1b", microbatches=4)
    return job.world(keep_payloads=keep_payloads).run(job, mlp.init(seed=0), x, t)


@pytest.mark.parametrize("keep", [True, False])
def test_vectorized_memory_equals_the_replay(keep):
    run = step_3d(keep)
    mem = memory_timeline(run.trace)
    assert peaks(run.trace).tolist() == [mem.peak(r) for r in range(8)]
    rank, t, held = memory_steps(run.trace)
    for r in range(8):
        for ti, h in zip(t[rank == r], held[rank == r]):
            assert h == mem.at(r, ti)


def test_spans_as_arrays_equal_the_activity():
    cost = CostModel(latency=1e-6, bandwidth=1e9, topology=TwoLevel(2, 3e-6, 2e8))
    run = World(4, cost=cost).run(lambda dev: dev.all_reduce(np.arange(100.0) * dev.rank, algorithm="direct"))
    spans, names = track_spans(run.trace, cost)
    act = activity(run)
    for track in ("compute", "send", "recv"):
        got = sorted(zip(spans[track].rank.tolist(), spans[track].t0.tolist(), spans[track].t1.tolist()))
        want = sorted((s.rank, s.t0, s.t1) for s in act.spans if s.track == track)
        assert got == want


def test_thinning_keeps_every_device_and_never_overlaps():
    rng = np.random.default_rng(0)
    rank = rng.integers(0, 5, 2000)
    t0 = rng.uniform(0, 1, 2000)
    spans = Spans(rank, t0, t0 + rng.uniform(0, 0.01, 2000), np.arange(2000), np.zeros(2000, np.int64))
    s = thin(spans, per_device=7)
    assert sorted(set(s.rank.tolist())) == [0, 1, 2, 3, 4] and s.count.sum() == 2000
    for r in range(5):
        mine = np.flatnonzero(s.rank == r)
        assert len(mine) <= 7 and np.all(s.t0[mine][1:] >= s.t1[mine][:-1])
        assert s.t0[mine][0] == t0[rank == r].min() and s.t1[mine][-1] == spans.t1[rank == r].max()
    whole = thin(spans, per_device=2000)  # only overlapping spans merge: the busy time of the union
    assert whole.count.sum() == 2000 and np.all(whole.busy >= whole.t1 - whole.t0 - 1e-12)


def test_busy_fractions_are_the_compute_time():
    run = step_3d()
    compute, comm, t_end = busy_fractions(run, bins=50)
    act = activity(run)
    for r in range(8):
        assert compute[r].sum() * t_end / 50 == pytest.approx(act.busy(r), rel=1e-9)
    assert comm.min() >= 0 and comm.max() <= 1


def test_huge_runs_export_thinned_and_draw_as_images(tmp_path, monkeypatch):
    def ring(dev, rounds):
        x = np.zeros(1)
        for k in range(rounds):
            dev.send(x, dst=(dev.rank + 1) % dev.world_size)
            x = dev.recv(src=(dev.rank - 1) % dev.world_size)
            dev.compute(f"step{k % 3}", lambda: None, seconds=1e-7)

    run = World(64, keep_payloads=False).run(ring, 200)
    info = write_chrome_trace(run, tmp_path / "ring.json", max_events=5000)
    doc = json.loads(info.path.read_text())
    assert info.collapsed and info.events == len(doc["traceEvents"]) <= 5000
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["pid"] for e in slices if e["tid"] == 0} == set(range(64))  # every device's compute shows
    assert sum(e["args"]["messages"] for e in slices if e["tid"] == 1) == 12_800
    assert chrome_trace(run, max_events=5000)["otherData"]["collapsed"] == info.note
    import simulator.views.plot.timeline as timeline

    monkeypatch.setattr(timeline, "MAX_SPANS", 1000)
    fig = plot_timeline(run)
    assert fig.axes[0].images  # drawn as an image, not boxes
    assert plot_busy(run, groups=[("first half", 0), ("second half", 32)]).axes[0].images


def test_a_busy_picture_of_chosen_devices_draws_only_their_rows():
    run = World(8, keep_payloads=False).run(lambda dev: dev.all_reduce(np.ones(64)))
    compute, comm, _ = busy_fractions(run)
    ax = plot_busy(run, devices=[6, 2], labels=["six", "two"]).axes[0]
    image = ax.images[0].get_array()
    assert image.shape[0] == 2  # a row per chosen device, in the order asked
    assert [t.get_text() for t in ax.get_yticklabels()] == ["six", "two"]
    shade = 1.0 - image[..., 0]  # darker where the device was busy
    assert np.array_equal(shade[0] > 0, (compute[6] + comm[6]) > 0)
