"""Every published row predicted: published, predicted and their ratio (``python -m simulator validate``).

The what-if has no per-row constants: each row runs its table's configuration (``tables.py``) on the
``dgx-a100`` system, whose rates are all measured elsewhere (``simulator.cost.systems``). A ratio within
0.85 .. 1.15 is the project's bar (issue 27).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .memory import GIB, chunk_activations, peak_activations
from .report import Report
from .run import whatif
from .step import schedule_for
from .tables import FIGURE_1, KORTHIKANTI, KORTHIKANTI_FIGURE_1, Row, published_rows

BAND = (0.85, 1.15)


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
        return BAND[0] <= self.ratio <= BAND[1]


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


def table(checked: list[Checked]) -> str:
    """The comparison as text, one line per row, grouped by table."""
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
    lines += ["", f"{KORTHIKANTI_FIGURE_1} (activation memory of the first pipeline rank, GiB)"]
    for label, published, predicted in activation_checks():
        lines.append(f"  {label:<34} {published:>10.4g} {predicted:>10.4g} {predicted / published:>7.2f}")
    inside = sum(c.within for c in checked)
    ratios = [c.ratio for c in checked]
    lines += [
        "",
        f"{inside} of {len(checked)} rows within {BAND[0]}-{BAND[1]}; ratios {min(ratios):.2f} to {max(ratios):.2f}",
    ]
    return "\n".join(line for line in lines if line is not None)
