"""What H100 clocks logged during training say, and why they do not price the clock under a training step's products.

Megatron-LM's straggler detector (`--log-straggler`, `StragglerDetector` in megatron/core/utils.py) prints, every
logging interval, the lowest and highest GPU clock, power, temperature and utilization over the ranks; its README
(megatron/core/README_STRAGGLER.md) shows one such line from a training run, and Arc Institute's Evo 2 launcher
(savanna, launcher/40b/README.md) another, from its 40B model on Hopper GPUs with the detector ported. This prints
both lines' figures (power in W: NVML reports mW), each clock as a share of the H100 SXM's maximum SM clock, and
where each training loop takes the reading: once the step is done (Megatron-LM after its logging, which reads the
loss back; savanna after `train_step` returns), so at the step's end and not under a product (docs/whatif.md, Out
of sample, "The level of the clocks in a training step").

It reads the checkouts you give it (the figures in the docs are from Megatron-LM d98e8a64dd and savanna 72d883d1,
not-a-feature/savanna); nothing from them is stored here.

Run: python benchmarks/whatif_training_clocks.py /path/to/Megatron-LM [/path/to/savanna]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

H100_SXM_MAX_MHZ = 1980  # the H100 SXM's maximum SM clock, as nvidia-smi reports it
FIELD = re.compile(r"(Mn|Mx)(Pwr|Tmp|Utl|Clk)/Rnk: ([0-9.]+)")
SOURCES = (  # (name, the README with the line, the training loop, its call of the step's end, the call reading the clock)
    ("Megatron-LM", "megatron/core/README_STRAGGLER.md", "megatron/training/training.py",
     "report_memory_flag = training_log(", "= post_training_step_callbacks("),  # the latter calls stimer.report
    ("savanna", "launcher/40b/README.md", "savanna/training.py",
     "loss_dict, skipped_iter = train_step(", "hsd_timer.report("),
)  # fmt: skip


def logged(text: str) -> dict[str, tuple[float, float]]:
    """The detector's first logged line in ``text`` as {metric: (lowest, highest)} over the ranks."""
    line = next(line for line in text.splitlines() if "MnClk/Rnk" in line)
    found = {(edge, name): float(value) for edge, name, value in FIELD.findall(line)}
    return {name: (found["Mn", name], found["Mx", name]) for name in ("Pwr", "Tmp", "Utl", "Clk")}


def read_after(source: str, first: str, then: str) -> bool:
    """Whether the training loop's call ``then`` (reading the clock) comes after its call ``first`` (ending the step)."""
    return source.index(first) < source.index(then)


def main(checkouts: list[Path]) -> None:
    for (name, readme, loop, first, then), root in zip(SOURCES, checkouts):
        figures = logged((root / readme).read_text())
        (p_lo, p_hi), (t_lo, t_hi), (u_lo, u_hi), (c_lo, c_hi) = (figures[k] for k in ("Pwr", "Tmp", "Utl", "Clk"))
        after = read_after((root / loop).read_text(), first, then)
        print(f"{name} ({readme})")
        print(f"  SM clock {c_lo:,.0f}-{c_hi:,.0f} MHz: {c_lo / H100_SXM_MAX_MHZ:.1%}-{c_hi / H100_SXM_MAX_MHZ:.1%} "
              f"of the H100 SXM's {H100_SXM_MAX_MHZ:,} MHz")  # fmt: skip
        print(
            f"  power {p_lo / 1000:.0f}-{p_hi / 1000:.0f} W, {t_lo:.0f}-{t_hi:.0f} C, utilization {u_lo:.0f}-{u_hi:.0f}%"
        )
        print(f"  clock read in {loop} after `{first}...)`: {after}")
    # Llama 3 (Grattafiori et al. 2024, section 3.3.4): a day's swing in temperature moves the 405B run 1-2%; the
    # H100 rows are 7-20% slower against A100 than predicted (whatif_h100_ratio.py).
    print(
        f"heat would have to cost {7 / 2:.1f} to {20 / 1:.0f} times Llama 3's diurnal 1-2% to be the H100 rows' 7-20%"
    )


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit("usage: python benchmarks/whatif_training_clocks.py /path/to/Megatron-LM [/path/to/savanna]")
    main([Path(arg) for arg in sys.argv[1:]])
