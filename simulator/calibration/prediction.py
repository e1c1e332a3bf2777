"""Predicted against measured: one rank program simulated under a calibrated cost model and run on real ranks.

Both sides time the same thing the same way. The rank program repeats its work, each time after a
barrier, and every rank notes when it started and ended (``dev.clock``: simulated seconds in a
simulation, seconds since a common start on real ranks on one machine). A repeat lasts from the moment
the last rank started to the moment the last rank ended: the collective cannot move before every
member has joined it, and the simulation starts every rank together, so a rank that the operating
system wakes late is not counted against the model. The first repeat warms buffers and connections
up and is left out.

The figure compared is the mean over the repeats, far-out ones left out on both sides alike (a repeat
over twice the median plus 10 ms, see ``probes.usual_mean``; the table counts them). Calibration gives
each message size the mean of its repeats, and means add up: the mean time of an all-reduce is the sum
of its steps' mean times, stalls included, and a training run of many steps lasts their number times
the mean. A median does not add up: where one repeat in three meets a scheduler stall of a few
milliseconds, the median of a single message leaves the stall out while the median of six messages in
a row keeps one. The median is shown beside it.

The rank programs live here (not in a script) so that rank processes can import them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.device import Device
from ..core.world import World
from ..cost.model import CostModel
from .probes import far_out, repeat_seconds, round_order, usual_mean

# simulated repeats per prediction: under a measured spread each draws its own message times, and the mean
# of many predicts the measured mean (without one they all take the same time, and cost little)
SIMULATED_REPEATS = 41


def timed_repeats(dev: Device, work: Callable[[], Any], repeats: int) -> list[tuple[float, float]]:
    """Run ``work()`` ``repeats`` times, each after a barrier; this rank's (start, end) of each."""
    spans = []
    for _ in range(repeats):
        dev.barrier()
        t0 = dev.clock
        work()
        spans.append((t0, dev.clock))
    return spans


def ring_all_reduces(dev: Device, nbytes: int, repeats: int) -> list[tuple[float, float]]:
    """Rank program: ``repeats`` ring all-reduces of ``nbytes`` of float64, message by message."""
    x = np.ones(nbytes // 8)
    return timed_repeats(dev, lambda: dev.all_reduce(x, algorithm="ring"), repeats)


def ring_all_reduces_by_size(dev: Device, sizes: tuple[int, ...], repeats: int) -> dict[int, list[tuple[float, float]]]:
    """Rank program: ``repeats`` rounds, each a ring all-reduce of every size in turn, each after a barrier.

    Taking the sizes in turn spreads each size's repeats over the whole measurement, as calibration
    spreads its sizes (``probes``): every size meets the same machine. Each round takes them in its own
    order, as calibration does (``probes.round_order``)."""
    xs = {n: np.ones(n // 8) for n in sizes}
    spans: dict[int, list[tuple[float, float]]] = {n: [] for n in sizes}
    for i in range(repeats):
        for n in round_order(sizes, i):
            spans[n] += timed_repeats(dev, lambda x=xs[n]: dev.all_reduce(x, algorithm="ring"), 1)
    return spans


def measured_seconds_by_size(world: Any, sizes: Sequence[int], repeats: int) -> dict[int, list[float]]:
    """Per size, the durations of its ring all-reduces on real ranks, sizes interleaved, the first round left out."""
    outputs = world.run(ring_all_reduces_by_size, tuple(sizes), repeats + 1).outputs
    return {n: repeat_seconds([o[n] for o in outputs])[1:] for n in sizes}


def training_steps(dev: Device, step: Callable[..., Any], args: tuple, repeats: int) -> list[tuple[float, float]]:
    """Rank program: ``repeats`` training steps ``step(dev, *args)`` (a ``Pipeline`` or ``DataParallel``)."""
    return timed_repeats(dev, lambda: step(dev, *args), repeats)


def measured_seconds(world: Any, program: Callable[..., Any], *args: Any, repeats: int) -> list[float]:
    """The durations of ``repeats`` runs of ``program`` on real ranks (``world``: a ``TorchWorld``), after a
    first one left out."""
    outputs = world.run(program, *args, repeats + 1).outputs
    return repeat_seconds(outputs)[1:]


def predicted_seconds(
    size: int,
    cost: CostModel,
    program: Callable[..., Any],
    *args: Any,
    repeats: int = 1,
    send_mode: str = "rendezvous",
    program_time: bool = True,
) -> float:
    """The same program simulated under ``cost``: the mean over ``repeats`` after a warm-up one.

    Under a cost model with a measured spread of message times (``CostModel.spread``) each repeat draws
    its own message times, so the mean over many simulated repeats predicts the mean over the measured
    ones; without one every repeat takes the same time.

    send_mode: "rendezvous" by default, because that is how gloo moves a message: its bytes travel only
    once the receiver has posted the matching receive, so a message sent early still costs its receiver
    the whole message time when it asks for it. The program itself does not change: its eager ``isend``
    returns at once on both sides, only the transfer waits for the receive.

    program_time: each device also pays its program's own Python between its calls, timed as the
    simulation runs it (``World(program_time=True)``), as real ranks pay it: 3 to 4 ms of a 35 ms
    data-parallel step, which the cost model's ops and messages do not hold.
    """
    world = World(size, cost=cost, keep_payloads=False, send_mode=send_mode, program_time=program_time)
    outputs = world.run(program, *args, repeats + 1).outputs
    return float(np.mean(repeat_seconds(outputs)[1:]))


@dataclass(frozen=True)
class Row:
    """One prediction against one measurement: seconds predicted, and the measured mean (and median)."""

    what: str
    ranks: int
    predicted: float
    measured: float
    measured_median: float | None = None
    left_out: int = 0  # far-out measured repeats, not in the mean (``probes.far_out``)

    @classmethod
    def of(cls, what: str, ranks: int, predicted: float, durations: Sequence[float]) -> Row:
        """The row of a prediction and the measured durations of its repeats: their mean, far-out repeats
        left out as calibration leaves them out (``probes.usual_mean``), and their median."""
        mean, median, out = usual_mean(durations), float(np.median(durations)), int(np.sum(far_out(durations)))
        return cls(what, ranks, predicted, mean, median, out)

    @property
    def ratio(self) -> float:
        return self.predicted / self.measured


def spread_table(runs: Sequence[Sequence[Row]], low: float = 0.7, high: float = 1.3) -> str:
    """Each row's predicted / measured mean over the runs: min-max, and whether every run is within [low, high].

    Times are the median over the runs of each run's figure; "median" is the measured median; "out" is how
    many far-out measured repeats the runs left out of their means."""
    width = max(len(row.what) for row in runs[0])
    lines = [
        f"  {'what':{width}} {'ranks':>5}  {'predicted':>10}  {'measured':>10}  {'median':>10}  {'out':>3}  "
        f"{'ratio, each run':>15}  {'spread':>9}  in {low}-{high}",
    ]
    for k, row in enumerate(runs[0]):
        ratios = [run[k].ratio for run in runs]
        pred, meas = (np.median([getattr(run[k], f) for run in runs]) for f in ("predicted", "measured"))
        medians = [run[k].measured_median for run in runs if run[k].measured_median is not None]
        median = f"{np.median(medians) * 1e3:7.2f} ms" if medians else "-"
        each = " ".join(f"{r:.2f}" for r in ratios)
        ok = "ok" if all(low <= r <= high for r in ratios) else "OUT"
        out = sum(run[k].left_out for run in runs)
        lines.append(
            f"  {row.what:{width}} {row.ranks:>5}  {pred * 1e3:7.2f} ms  {meas * 1e3:7.2f} ms  {median:>10}  {out:>3}  "
            f"{each:>15}  {min(ratios):.2f}-{max(ratios):.2f}  {ok}"
        )
    return "\n".join(lines)


def load_average() -> float:
    """The 1-minute load average of this machine (what else is running)."""
    return os.getloadavg()[0]


def wait_for_quiet(limit: float = 0.8, max_wait: float = 600.0, poll: float = 30.0) -> float:
    """Wait (up to ``max_wait`` seconds) until the 1-minute load is at most ``limit``; the load then measured."""
    waited = 0.0
    load = load_average()
    while load > limit and waited < max_wait:
        print(f"  load {load:.2f} > {limit}: waiting {poll:g} s for the machine to be quiet", flush=True)
        time.sleep(poll)
        waited += poll
        load = load_average()
    return load


def machine_line(load_before: float) -> str:
    """The machine and its load, for the benchmark's output and the README."""
    one, five, fifteen = os.getloadavg()
    return (
        f"machine: {os.cpu_count()} cores; load average before {load_before:.2f}, "
        f"after {one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min); {time.strftime('%Y-%m-%d %H:%M')}"
    )


def add_prediction_options(parser: argparse.ArgumentParser, repeats: int, what: str) -> None:
    """The options both prediction benchmarks take: how often, how to calibrate, what to print."""
    parser.add_argument("--runs", type=int, default=3, help="calibrate-predict-measure runs (default: 3)")
    parser.add_argument("--repeats", type=int, default=repeats, help=f"measured {what} per run (default: {repeats})")
    parser.add_argument("--max-wait", type=float, default=600, help="seconds to wait for a quiet machine")
    # where one message in six or seven meets a 4 ms scheduler stall, the mean of 15 repeats is uncertain by
    # about 0.4 ms, as much as a small message takes; as many repeats as the measurement takes, about 0.2 ms
    parser.add_argument(
        "--calibration-repeats", type=int, default=41, help="repeats of each calibrated size (default: 41)"
    )
    parser.add_argument(
        "--statistic",
        choices=("median", "mean"),
        default="mean",
        help="of each calibrated size (mean: far-out repeats left out)",
    )
    parser.add_argument(
        "--spread", action="store_true", help="each simulated message draws its time from the measured ones"
    )
    parser.add_argument("--headers", action="store_true", help="send a shape header before each message")
    parser.add_argument(
        "--free-program",
        action="store_true",
        help="simulate without charging the program's own time between its calls (World(program_time=False))",
    )
    parser.add_argument("--verbose", action="store_true", help="print each calibration's fit")


@contextlib.contextmanager
def calibrated_world(
    args: argparse.Namespace, ranks: int, sizes: Sequence[int], pattern: str, add_sizes: Sequence[int] | None = None
) -> Iterator[tuple]:
    """``ranks`` gloo ranks running collectives message by message, calibrated as ``args`` (the options
    above) say, with additions of ``add_sizes`` bytes (default: calibration's): yields (the ``TorchWorld``,
    its ``Calibration``). Needs torch."""
    from ..real.launch import TorchWorld
    from .calibrate import ADD_SIZES, calibrate

    with TorchWorld(ranks, "gloo", timeout=120, keep_payloads=False, collectives="messages", headers=args.headers) as w:
        cal = calibrate(
            world=w,
            sizes=tuple(sizes),
            repeats=args.calibration_repeats,
            statistic=args.statistic,
            spread=args.spread,
            pattern=pattern,
            add_sizes=tuple(add_sizes or ADD_SIZES),
        )
        if args.verbose:
            print(cal.summary(), flush=True)
        yield w, cal
