"""Every published row predicted: published, predicted and their ratio (``python -m simulator validate``).

The what-if has no per-row constants: each row runs its table's configuration (``tables.py``) on the
``dgx-a100`` system, whose rates are all measured elsewhere (``simulator.cost.systems``). A ratio within
0.85 .. 1.15 is the project's bar (issue 27).

The out-of-sample rows (``outside.py``) are reported apart (``outside_table``): runs the costs were not found
with, each compared as a *speed ratio* (predicted throughput over published; above 1: the what-if is
optimistic), with how many fall within 15% and 25%, the median, and which way the errors lean.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...cost.systems import system
from .layer import layer_ops
from .memory import GIB, chunk_activations, peak_activations
from .outside import outside_rows
from .price import price, recomputed_ops, total
from .report import Report
from .run import whatif
from .step import schedule_for
from .tables import (
    FIGURE_1,
    KORTHIKANTI,
    KORTHIKANTI_FIGURE_1,
    KORTHIKANTI_TABLE_4,
    TABLE_4,
    Row,
    published_rows,
    table_4_row,
)

BAND = (0.85, 1.15)


def within(ratio: float) -> bool:
    """Whether a predicted / published ratio is inside the project's band."""
    return BAND[0] <= ratio <= BAND[1]


@dataclass(frozen=True)
class Checked:
    """A row with its prediction."""

    row: Row
    report: Report

    @property
    def predicted(self) -> float:
        if self.row.metric == "tflops_per_gpu":
            return self.report.hardware_tflops_per_gpu
        if self.row.metric == "model_tflops_per_gpu":
            return self.report.tflops_per_gpu
        if self.row.metric == "tokens_per_second_per_gpu":
            lay = self.report.layout
            return lay.global_batch * self.row.model.seq / self.report.step_seconds / lay.devices
        return self.report.step_seconds

    @property
    def ratio(self) -> float:
        return self.predicted / self.row.published

    @property
    def within(self) -> bool:
        return within(self.ratio)


def validate(rows: list[Row] | None = None) -> list[Checked]:
    """Predict every row (default: all of ``tables.published_rows()``)."""
    return [
        Checked(row, whatif(row.model, row.layout, row.system)) for row in (published_rows() if rows is None else rows)
    ]


def speed_ratio(c: Checked) -> float:
    """Predicted over published throughput (above 1: optimistic), whatever the row's metric."""
    return 1 / c.ratio if c.row.metric == "step_seconds" else c.ratio


@dataclass(frozen=True)
class Summary:
    """How a set of rows lands: counts within 15% and 25%, the median speed ratio, and the lean."""

    rows: int
    within_15: int
    within_25: int
    median: float
    optimistic: int  # rows predicted faster than published
    low: float
    high: float

    @classmethod
    def of(cls, ratios: list[float]) -> Summary:
        ordered = sorted(ratios)
        n = len(ordered)
        median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
        return cls(n, sum(abs(r - 1) <= 0.15 for r in ordered), sum(abs(r - 1) <= 0.25 for r in ordered), median,
                   sum(r > 1 for r in ordered), ordered[0], ordered[-1])  # fmt: skip

    def text(self) -> str:
        lean = (
            "optimistic"
            if self.optimistic > self.rows / 2
            else "pessimistic"
            if self.optimistic < self.rows / 2
            else "even"
        )
        return (
            f"{self.within_15} of {self.rows} within 15%, {self.within_25} within 25%; median speed ratio "
            f"{self.median:.2f} (range {self.low:.2f}-{self.high:.2f}); {self.optimistic} of {self.rows} "
            f"optimistic: the errors lean {lean}"
        )


def outside() -> list[Checked]:
    """Every out-of-sample row predicted (``outside.outside_rows``)."""
    return validate(outside_rows())


def outside_table(checked: list[Checked]) -> str:
    """The out-of-sample rows as text: source, configuration, published, predicted, speed ratio; the summary."""
    lines = ["Out of sample: published runs the what-if was not built against (speed ratio: predicted throughput "
             "over published, above 1 optimistic)"]  # fmt: skip
    current = None
    for c in checked:
        if c.row.table != current:
            current = c.row.table
            unit = {"step_seconds": "seconds per iteration", "tflops_per_gpu": "TFLOP/s per GPU with recomputation",
                    "model_tflops_per_gpu": "model TFLOP/s per GPU",
                    "tokens_per_second_per_gpu": "tokens per second per GPU"}[c.row.metric]  # fmt: skip
            lines += ["", f"{current} ({unit})"]
            lines.append(f"  {'row':<42} {'published':>10} {'predicted':>10} {'speed':>6}")
        r = speed_ratio(c)
        mark = "" if abs(r - 1) <= 0.15 else "   off by more than 15%"
        lines.append(f"  {c.row.label:<42} {_num(c.row.published):>10} {_num(c.predicted):>10} {r:>6.2f}{mark}")
    lines += ["", Summary.of([speed_ratio(c) for c in checked]).text() if checked else "no out-of-sample rows"]
    lines += memory_lines(checked)
    return "\n".join(lines)


def memory_lines(checked: list[Checked]) -> list[str]:
    """Memory against runs known to fit: every out-of-sample run trained, so its fullest device held its tensors."""
    if not checked:
        return []
    over = [c for c in checked if not c.report.fits]
    lines = ["", f"memory: every one of these runs trained; {len(checked) - len(over)} of {len(checked)} fit as "
             "predicted (weights, gradients, optimizer state, activations, the CUDA context and NCCL's buffers)"]  # fmt: skip
    for c in over:
        fullest = max(c.report.memory, key=lambda m: m.needed)
        lines.append(f"  does not fit as predicted: {c.row.label}: {fullest.needed / GIB:.1f} GiB of "
                     f"{fullest.capacity / GIB:.1f} ({fullest.total / GIB:.1f} in tensors)")  # fmt: skip
    return lines


def _num(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


def activation_checks() -> list[tuple[str, float, float]]:
    """(row, published GiB, predicted GiB): the activations the first pipeline rank keeps for its backward,
    without recomputation and with sequence parallelism + selective recomputation (Korthikanti et al. 2022,
    Figure 1), on Table 5's layouts. No simulation: the layer's kept tensors times the schedule's peak."""
    out = []
    for row in published_rows():
        if row.table != KORTHIKANTI or "selective" not in row.label:
            continue
        size = row.label.split()[0]
        plain = replace(row.layout, recompute="none", sequence_parallel=False)
        for layout, published, what in (
            (plain, FIGURE_1[size][0], "none"),
            (row.layout, FIGURE_1[size][1], "seq. par. + selective"),
        ):
            held = peak_activations(schedule_for(layout), 0, chunk_activations(row.model, layout))
            out.append((f"{size} {what}", published, held / GIB))
    return out


def layer_checks() -> list[tuple[str, float, float]]:
    """(row, published ms, predicted ms): one layer of the 22B model, its forward and its backward pass (with
    what it recomputes), as Korthikanti et al. 2022 measured them in Table 4, priced op by op on Table 5's
    layout (no pipeline, so no bubble and no step around it: the layer's own costs only)."""
    row = table_4_row()
    achieved = system(row.system).achieved
    out = []
    for recompute, sp, forward, backward in TABLE_4:
        layout = replace(row.layout, recompute=recompute, sequence_parallel=sp)
        ops = layer_ops(row.model, layout)
        fwd = [op for op in ops if op.phase == "F"]
        back = [op for op in ops if op.phase in "IW"]
        e = row.model.itemsize
        name = {"none": "no recompute", "full": "full recompute", "selective": "selective"}[recompute]
        name += " + seq. par." if sp else ""
        out.append((f"{name}, forward", forward, 1e3 * total(price(fwd, [], layout, achieved, e))))
        out.append((f"{name}, backward", backward, 1e3 * total(price(back, recomputed_ops(fwd, layout, row.model), layout, achieved, e))))  # fmt: skip
    return out


def rated(checked: list[Checked], layers: list[tuple[str, float, float]]) -> list[tuple[str, float]]:
    """(row, predicted / published) of every row the band applies to: Tables 1 and 5, and Table 4's layers."""
    return [(c.row.label, c.ratio) for c in checked] + [(label, p / q) for label, q, p in layers]


def table(checked: list[Checked], layers: list[tuple[str, float, float]] | None = None) -> str:
    """The comparison as text, one line per row, grouped by table (``layers``: ``layer_checks()``, if made)."""
    lines = []
    current = None
    for c in checked:
        if c.row.table != current:
            current = c.row.table
            unit = "TFLOP/s per GPU" if c.row.metric == "tflops_per_gpu" else "seconds per iteration"
            lines += ["" if lines else None, f"{current} ({unit}, DGX A100)"]
            lines.append(f"  {'row':<34} {'published':>10} {'predicted':>10} {'ratio':>7}")
        mark = "" if c.within else "   outside 0.85-1.15"
        lines.append(f"  {c.row.label:<34} {c.row.published:>10.4g} {c.predicted:>10.4g} {c.ratio:>7.2f}{mark}")
    lines += ["", f"{KORTHIKANTI_TABLE_4} (one layer of the 22B model, milliseconds)"]
    layers = layer_checks() if layers is None else layers
    for label, published, predicted in layers:
        ratio = predicted / published
        mark = "" if within(ratio) else "   outside 0.85-1.15"
        lines.append(f"  {label:<34} {published:>10.4g} {predicted:>10.4g} {ratio:>7.2f}{mark}")
    lines += ["", f"{KORTHIKANTI_FIGURE_1} (activation memory of the first pipeline rank, GiB)"]
    for label, published, predicted in activation_checks():
        lines.append(f"  {label:<34} {published:>10.4g} {predicted:>10.4g} {predicted / published:>7.2f}")
    rows = rated(checked, layers)
    ratios = [r for _, r in rows]
    outside = [label for label, r in rows if not within(r)]
    lines += [
        "",
        f"{len(rows) - len(outside)} of {len(rows)} rows of Tables 1, 4 and 5 within {BAND[0]}-{BAND[1]}; ratios "
        f"{min(ratios):.2f} to {max(ratios):.2f}" + (f"; outside: {', '.join(outside)}" if outside else ""),
        "(Figure 1's rows check the activation arithmetic against the paper's figure; they are not counted above)",
    ]
    return "\n".join(line for line in lines if line is not None)
