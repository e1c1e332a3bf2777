"""A ring all-reduce over 1,024 devices (about two million messages): this engine against SimPy.

Both sides run the same algorithm on the same data and cost model, and must agree on the result and
on the simulated end time:

  this engine  ``dev.all_reduce(x)`` (simulator/collectives/ring.py): reduce-scatter ring, then all-gather
               ring; each message copied, booked on its link, labelled and recorded; each reduction a
               recorded compute op; World(keep_payloads=False) keeps metadata only
  SimPy        devices as SimPy processes; a message goes through a Cable whose put() starts a process
               that waits the link delay and then puts the payload into the receiver's Store (SimPy's
               own "Event Latency" example); links booked alpha-beta style; each reduction a NumPy add
               plus a timeout for its compute time; every message's and reduction's metadata appended
               to a list

Printed: messages, wall time, messages per second, peak memory (ru_maxrss of each side's own process),
and the ratio. The sides alternate (--repeat times each) and each keeps its best wall time, so that a
busy machine slows both alike. Beside them: the floor (benchmarks/floor.py: a heap push, a heap pop
and a greenlet switch per message, nothing recorded), and the host bytes a finished run keeps per
message (tracemalloc, in a separate run). ``--baseline DIR`` adds the engine of another checkout (an
older commit, say) as a third side.
Targets: at least 8x SimPy's rate, and 3x the engine before the columnar trace; the peak below a third
of SimPy's; at most 120 bytes kept per message.

Run: python benchmarks/ring_allreduce_vs_simpy.py [--devices N] [--elements N] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import simpy

from simulator import CostModel, World
from simulator.tensors.placements import chunk_bounds

COST = CostModel()  # 1 us latency, 100 GB/s links, 100 TFLOP/s
ROOT = str(Path(__file__).resolve().parent.parent)


# ---- this engine -----------------------------------------------------------------------------
def engine_program(dev, n):
    return dev.all_reduce(np.full(n, float(dev.rank), np.float32))


def run_engine(p: int, n: int):
    result = World(p, cost=COST, keep_payloads=False).run(engine_program, n)
    return len(result.trace.messages), result.time, result.outputs[0]


# ---- SimPy -----------------------------------------------------------------------------------
class Cable:
    """SimPy's documented latency pattern, with alpha-beta link booking and a metadata log."""

    def __init__(self, env: simpy.Environment, log: list) -> None:
        self.env = env
        self.inbox: dict[tuple[int, int], simpy.Store] = {}
        self.free: dict[tuple[int, int], float] = {}
        self.log = log

    def store(self, src: int, dst: int) -> simpy.Store:
        key = (src, dst)
        if key not in self.inbox:
            self.inbox[key] = simpy.Store(self.env)
        return self.inbox[key]

    def put(self, src: int, dst: int, value, label: str) -> None:
        payload = np.array(value)  # the receiver gets its own copy
        payload.setflags(write=False)
        now = self.env.now
        start = max(now, self.free.get((src, dst), 0.0))
        done = start + payload.nbytes / COST.bandwidth
        self.free[(src, dst)] = done
        arrive = done + COST.latency
        self.log.append(
            ("msg", len(self.log), src, dst, payload.shape, payload.dtype, payload.nbytes, now, arrive, label)
        )
        self.env.process(self._deliver(self.store(src, dst), payload, arrive - now))

    def _deliver(self, store: simpy.Store, payload, delay: float):
        yield self.env.timeout(delay)
        yield store.put(payload)

    def get(self, src: int, dst: int):
        return self.store(src, dst).get()


def run_simpy(p: int, n: int):
    env = simpy.Environment()
    log: list = []
    cable = Cable(env, log)
    results: list = [None] * p
    bounds = chunk_bounds(n, p)

    def device(rank: int):
        x = np.full(n, float(rank), np.float32)
        chunks = [x[bounds[j] : bounds[j + 1]] for j in range(p)]
        right, left = (rank + 1) % p, (rank - 1) % p
        for s in range(p - 1):  # reduce-scatter
            out_j, in_j = (rank - s - 1) % p, (rank - s - 2) % p
            cable.put(rank, right, chunks[out_j], f"all_reduce ring step {s} chunk {out_j}")
            got = yield cable.get(left, rank)
            chunks[in_j] = np.add(got, chunks[in_j])
            seconds = COST.compute_time(chunks[in_j].size)
            log.append(("op", len(log), rank, "all_reduce.sum", env.now, env.now + seconds))
            yield env.timeout(seconds)
        for s in range(p - 1):  # all-gather
            out_j, in_j = (rank - s) % p, (rank - s - 1) % p
            cable.put(rank, right, chunks[out_j], f"all_reduce ring step {p - 1 + s} chunk {out_j}")
            chunks[in_j] = yield cable.get(left, rank)
        results[rank] = np.concatenate(chunks)

    for r in range(p):
        env.process(device(r))
    env.run()
    return sum(1 for e in log if e[0] == "msg"), env.now, results[0]


# ---- measurement -----------------------------------------------------------------------------
# Each side runs in its own fresh process, so that its peak memory (ru_maxrss) is its own and one
# side's leftovers do not slow the other.
def kept_engine(p: int, n: int):
    """Run the engine under tracemalloc; report the bytes its finished result keeps (not a timed run)."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    result = World(p, cost=COST, keep_payloads=False).run(engine_program, n)
    gc.collect()
    kept = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    print(json.dumps({"kept_per_message": kept / len(result.trace.messages)}))


SIDES = {"engine": run_engine, "simpy": run_simpy, "kept": kept_engine, "baseline": run_engine}


def run_side(side: str, p: int, n: int) -> None:
    if side == "kept":
        kept_engine(p, n)
        return
    t0 = time.perf_counter()
    messages, sim_time, out = SIDES[side](p, n)
    wall = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    digest = hashlib.sha256(np.ascontiguousarray(out).tobytes()).hexdigest()[:16]
    print(
        json.dumps(
            {
                "messages": messages,
                "sim_time": sim_time,
                "wall": wall,
                "peak_mb": peak_mb,
                "digest": digest,
                "first": float(out[0]),
            }
        )
    )


def spawn(side: str, p: int, n: int, root: str = ROOT) -> dict:
    """Run one side in a fresh process (``root``: the checkout whose simulator it imports)."""
    cmd = [sys.executable, __file__, "--side", side, "--devices", str(p), "--elements", str(n)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": root})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=1024)
    parser.add_argument("--elements", type=int, default=None, help="array length (default: one per device)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each side, alternating; the best counts")
    parser.add_argument("--baseline", help="another checkout whose engine runs as a third side")
    parser.add_argument("--side", choices=sorted(SIDES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    p = args.devices
    n = args.elements or p
    if args.side:
        run_side(args.side, p, n)
        return
    from floor import floor_rate

    print(f"ring all-reduce of {n} float32 over {p} devices, each side in a fresh process, best of {args.repeat}")
    print(f"{'':<12} {'messages':>10} {'wall s':>8} {'msg/s':>10} {'peak MB':>9} {'simulated us':>13}")
    sides = [("this engine", "engine", ROOT), ("SimPy", "simpy", ROOT)]
    if args.baseline:
        sides.append(("baseline", "baseline", str(Path(args.baseline).resolve())))
    rows: dict[str, dict] = {}
    floor = 0.0
    for _ in range(args.repeat):  # alternate the sides; keep each side's best wall time
        for name, side, root in sides:
            r = spawn(side, p, n, root)
            if name not in rows or r["wall"] < rows[name]["wall"]:
                rows[name] = r
        floor = max(floor, floor_rate(p, 2 * p * (p - 1)))
    for name in rows:
        r = rows[name]
        print(
            f"{name:<12} {r['messages']:>10,} {r['wall']:>8.2f} {r['messages'] / r['wall']:>10,.0f} "
            f"{r['peak_mb']:>9.0f} {r['sim_time'] * 1e6:>13.3f}",
            flush=True,
        )
    print(f"{'floor':<12} {'':>10} {'':>8} {floor:>10,.0f}   (a heap push, a pop and a switch per message)")
    a, b = rows["this engine"], rows["SimPy"]
    assert a["messages"] == b["messages"], "message counts differ"
    assert a["digest"] == b["digest"] and a["first"] == p * (p - 1) / 2, "the two models computed different sums"
    assert abs(a["sim_time"] - b["sim_time"]) <= 1e-9 * a["sim_time"], "simulated end times differ"
    kept = spawn("kept", p, n)["kept_per_message"]
    print(f"ratio: this engine runs at {b['wall'] / a['wall']:.2f}x SimPy's rate (target: at least 8x)")
    print(f"peak: {a['peak_mb'] / b['peak_mb']:.2f} of SimPy's (target: below a third)")
    print(f"kept: {kept:.1f} bytes per message after the run (target: at most 120)")
    if "baseline" in rows:
        c = rows["baseline"]
        print(f"against the baseline: {c['wall'] / a['wall']:.2f}x its rate (target: at least 3x)")


if __name__ == "__main__":
    main()
