"""Whether a long training run on DGX H100 or DGX A100 slows as its GPUs stay hot: Megatron-LM's own logs.

Megatron-LM's release tests record the iteration time of long runs as golden values, on both GPUs
(tests/functional_tests/test_cases/gpt/gpt3_15b_8t_release: a dense 15B GPT in BF16, 50,800 iterations, averaged
every 100; its 12,700-iteration variant `_sm`; and the 7B speed tests, every other iteration over about 40 s).
This prints, for each file, the iteration time at the start of the run and at the median of its later part, with
the minutes into the run each covers, as docs/whatif.md (Out of sample, "Clocks over a long run") reads them.

It reads a Megatron-LM checkout you give it (the figures in the docs are from commit d98e8a64dd); nothing from it
is stored here.

Run: python benchmarks/whatif_release_clocks.py /path/to/Megatron-LM
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

CASES = "tests/functional_tests/test_cases/gpt"
FILES = (
    "gpt3_15b_8t_release/golden_values_dev_dgx_h100.json",
    "gpt3_15b_8t_release/golden_values_lts_dgx_a100.json",
    "gpt3_15b_8t_release_sm/golden_values_dev_dgx_h100.json",
    "gpt3_15b_8t_release_sm/golden_values_lts_dgx_a100.json",
    "gpt3_7b_tp1_pp4_memory_speed/golden_values_dev_dgx_h100.json",
    "gpt3_7b_tp4_pp1_memory_speed/golden_values_dev_dgx_h100.json",
)


def logged_times(path: Path) -> list[tuple[int, float]]:
    """(iteration, seconds an iteration averaged over the log interval ending there), skipping unlogged ones."""
    values = json.loads(path.read_text())["iteration-time"]["values"]
    pairs = sorted((int(step), float(seconds)) for step, seconds in values.items() if str(seconds) != "nan")
    return [(step, seconds) for step, seconds in pairs if seconds == seconds]


def main(checkout: Path) -> None:
    for name in FILES:
        logged = logged_times(checkout / CASES / name)
        elapsed, previous, marks = 0.0, 0, []
        for step, seconds in logged:
            elapsed += (step - previous) * seconds
            previous = step
            marks.append((step, elapsed / 60, seconds))
        first = marks[1]  # the first log averages the start-up in with the load
        later = [seconds for _, _, seconds in marks[len(marks) // 2 :]]
        print(f"{name}")
        print(f"  iteration {first[0]:>6} ({first[1]:7.1f} min in): {first[2]:.3f} s")
        print(f"  later half ({marks[len(marks) // 2][1]:7.1f} to {marks[-1][1]:7.1f} min): median "
              f"{statistics.median(later):.3f} s ({statistics.median(later) / first[2] - 1:+.1%})")  # fmt: skip


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/whatif_release_clocks.py /path/to/Megatron-LM")
    main(Path(sys.argv[1]))
