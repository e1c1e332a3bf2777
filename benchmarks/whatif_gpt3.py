"""What if we trained GPT-3 on 4,096 GPUs? One 1F1B step, from 64 to 4,096 simulated devices.

Each size runs in a fresh process (simulator/parallel/whatif.py: GPT-3's layer shapes, dp x pp x tp with tp = 8
inside each DGX H100 node, 16 microbatches of one sequence per replica, metadata only). Printed per
size: devices, messages, ops, events, the simulation's wall time, the host's peak resident memory and
what the run added per event, the trace's own bytes per event, and the simulated step time.

With ``--figures``, the largest run also draws its timeline (a pixel row per device, see
simulator/views/plot/busy.py) and each pipeline stage's peak memory, and the scaling table is drawn too;
they go to benchmarks/figures/whatif_gpt3_*.png. Target: 4,096 devices in under 60 s and 4 GB on the 2-core
development machine.

Run: python benchmarks/whatif_gpt3.py [--quick] [--figures]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "benchmarks" / "figures"  # measurements, not slides: `python -m simulator figures` owns figures/
SIZES = [(1, 8, 8), (1, 16, 8), (2, 16, 8), (4, 16, 8), (8, 16, 8), (16, 16, 8), (32, 16, 8)]  # dp, pp, tp


def rss_mb() -> float:
    """Current resident memory of this process, MB (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def run_size(dp: int, pp: int, tp: int, figures: bool) -> dict:
    import numpy as np

    from simulator.parallel.whatif import Step3D, Transformer, gpt3_step
    from simulator.views.memory_columns import peaks

    before = rss_mb()
    t0 = time.perf_counter()
    result = gpt3_step(dp, pp, tp, microbatches=16)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    trace = result.trace
    events = len(trace)
    row = {
        "devices": dp * pp * tp,
        "shape": f"{dp} x {pp} x {tp}",
        "messages": len(trace.messages),
        "ops": len(trace.ops),
        "events": events,
        "wall": wall,
        "peak_mb": peak,
        "added_per_event": (peak - before) * 1e6 / events,
        "trace_per_event": trace.nbytes() / events,
        "step_ms": result.time * 1e3,
    }
    if figures:
        job = Step3D(Transformer.gpt3(), dp, pp, tp, 16)
        t1 = time.perf_counter()
        memory = peaks(trace).reshape(dp, pp, tp)
        _draw_run(result, job, memory, row)
        row["figures_s"] = time.perf_counter() - t1
        row["peak_device_gb"] = float(np.max(memory)) / 1e9
    return row


def _draw_run(result, job, memory, row) -> None:
    from simulator.views.plot.busy import plot_busy
    from simulator.views.plot.style import new_figure, save_figure

    # every replica and every tensor-parallel rank of a stage does the same work at the same times: one row per
    # stage (replica 0, tensor-parallel rank 0) shows the schedule; 4,096 rows of pixels would read as texture
    title = (
        f"One 1F1B step of GPT-3 on {row['devices']:,} simulated H100s ({row['shape']}): {row['step_ms']:.0f} ms, "
        "a row per pipeline stage"
    )
    rows = [s * job.tp for s in range(job.pp)]
    caption = (
        f"Each row stands for its stage's {job.dp * job.tp:,} devices ({job.dp} replicas x {job.tp} tensor-parallel "
        f"ranks), which do the same work at the same times. {result.world.cost.describe()}"
    )
    labels = [f"stage {s}" for s in range(job.pp)]
    fig = plot_busy(result, title=title, devices=rows, labels=labels, caption=caption, width=11, height=6.2)
    save_figure(fig, FIGURES / "whatif_gpt3_timeline", formats=("png",))
    fig = new_figure(9, 3.6)
    ax = fig.add_axes((0.08, 0.16, 0.9, 0.72))
    states = job.local_params(0) * 16 / 1e9  # weights, gradients, Adam: 2 + 2 + 12 bytes a parameter
    per_stage = memory.max(axis=(0, 2)) / 1e9
    ax.bar(range(job.pp), per_stage, color="#E69F00", label="activations held for the backward")
    ax.bar(
        range(job.pp),
        [job.local_params(s) * 16 / 1e9 for s in range(job.pp)],
        color="#0072B2",
        label="weights, gradients, Adam state",
    )
    ax.axhline(80, color="#555555", lw=0.8, ls="--")
    ax.text(-0.5, 81, "80 GB: one H100", ha="left", va="bottom", fontsize=8, color="#555555")
    ax.set_xlabel("pipeline stage")
    ax.set_ylabel("peak memory per device (GB)")
    ax.set_xticks(range(job.pp))
    ax.set_ylim(0, 95)
    ax.legend(loc="upper right", frameon=False, fontsize=8, ncol=2)
    ax.set_title(f"Peak memory of each stage's devices (1F1B: stage s holds up to {job.pp} - s microbatches); "
                 f"states {states:.1f} GB on stage 0", loc="left", fontsize=9)  # fmt: skip
    save_figure(fig, FIGURES / "whatif_gpt3_memory", formats=("png",))


def draw_table(rows: list[dict]) -> None:
    """The scaling figure: the simulation's wall time, and the host memory per event, against the devices."""
    from simulator.views.plot.style import new_figure, save_figure

    devices = [r["devices"] for r in rows]
    fig = new_figure(11, 6.2)
    left = fig.add_axes((0.07, 0.14, 0.40, 0.68))
    right = fig.add_axes((0.57, 0.14, 0.40, 0.68))
    left.plot(devices, [r["wall"] for r in rows], "o-", color="#0072B2")
    left.set_ylabel("simulation wall time (s)")
    right.plot(devices, [r["added_per_event"] for r in rows], "o-", color="#E69F00", label="host memory added")
    right.plot(devices, [r["trace_per_event"] for r in rows], "s-", color="#009E73", label="the trace's own")
    right.set_ylabel("bytes per event")
    right.set_ylim(bottom=0)
    right.legend(frameon=False, loc="upper right")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(devices, [f"{r['devices']:,}\n{r['events'] / 1e6:.1f}M" for r in rows], fontsize=8)
        ax.set_xlabel("simulated devices, and the events they make (millions)")
        ax.grid(color="#e4e4e4", linewidth=0.6)
    fig.suptitle(
        "GPT-3 what-if: one 1F1B step simulated from 64 to 4,096 devices (metadata only, dgx-h100 preset); "
        f"the largest: {rows[-1]['step_ms']:.0f} ms simulated",
        x=0.01,
        ha="left",
        fontsize=11,
    )
    save_figure(fig, FIGURES / "whatif_gpt3_scaling", formats=("png",))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="up to 512 devices")
    parser.add_argument("--figures", action="store_true", help="draw the largest run and the scaling table")
    parser.add_argument("--only", type=int, help="just this many devices (one of the sizes)")
    parser.add_argument("--side", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        dp, pp, tp, figures = (int(v) for v in args.side.split(","))
        print(json.dumps(run_size(dp, pp, tp, bool(figures))))
        return
    sizes = SIZES[:4] if args.quick else SIZES
    if args.only:
        sizes = [size for size in SIZES if size[0] * size[1] * size[2] == args.only]
    print(f"{'devices':>8} {'dp x pp x tp':>13} {'messages':>12} {'events':>12} {'wall s':>7} {'peak MB':>8} "
          f"{'added B/event':>14} {'trace B/event':>14} {'step ms':>8}")  # fmt: skip
    rows = []
    for k, (dp, pp, tp) in enumerate(sizes):
        figures = int(args.figures and k == len(sizes) - 1)
        cmd = [sys.executable, __file__, "--side", f"{dp},{pp},{tp},{figures}"]
        done = subprocess.run(
            cmd, capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
        )
        r = json.loads(done.stdout.strip().splitlines()[-1])
        rows.append(r)
        print(f"{r['devices']:>8,} {r['shape']:>13} {r['messages']:>12,} {r['events']:>12,} {r['wall']:>7.1f} "
              f"{r['peak_mb']:>8.0f} {r['added_per_event']:>14.0f} {r['trace_per_event']:>14.0f} {r['step_ms']:>8.1f}",
              flush=True)  # fmt: skip
    last = rows[-1]
    if "figures_s" in last and len(rows) == len(SIZES):
        print(f"figures of the {last['devices']:,}-device run drawn in {last['figures_s']:.1f} s; "
              f"fullest device {last['peak_device_gb']:.1f} GB")  # fmt: skip
        draw_table(rows)
    print(f"target: 4,096 devices in under 60 s and 4 GB: {last['wall']:.1f} s, {last['peak_mb'] / 1e3:.2f} GB")


if __name__ == "__main__":
    main()
