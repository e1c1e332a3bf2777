"""Every published row predicted: published, predicted and their ratio (``python -m simulator validate``).

The what-if has no per-row constants: each row runs its table's configuration (``tables.py``) on the
``dgx-a100`` system, whose rates are all measured elsewhere (``simulator.cost.systems``). A ratio within
0.85 .. 1.15 is the project's bar (issue 27).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...cost.systems import system
from .layer import layer_ops
from .memory import GIB, chunk_activations, peak_activations
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
        return self.report.step_seconds

    @property
    def ratio(self) -> float:
        return self.predicted / self.row.published

    @property
    def within(self) -> bool:
        return within(self.ratio)


def validate(rows: list[Row] | None = None) -> list[Checked]:
    """Predict every row (default: all of ``tables.published_rows()``)."""
    return [Checked(row, whatif(row.model, row.layout, row.system)) for row in (rows or published_rows())]


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
        out.append((f"{name}, backward", backward, 1e3 * total(price(back, recomputed_ops(fwd, layout), layout, achieved, e))))  # fmt: skip
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
