"""What the out-of-sample rows would say if every step paid Python's automatic garbage collection.

A collection that CPython's thresholds start pauses one rank at a time, and the others wait for it at the next
collective. The one measurement of what that costs a step that was found is torchtitan's (pytorch/torchtitan pull
request 148, March 2024): collecting on a schedule instead "gave a perf boost of ~1.5% per iter" on a 512-GPU
FSDP job. What it costs another run depends on how many Python objects its step makes and how far each rank's CPU
runs ahead of its GPU, so the what-if does not price it (docs/whatif.md, MegaScale's rows). This lengthens the
predicted step by a share on every row whose framework collected automatically (all but Llama 3's, whose
trainer is not public; a Meta engineer quoted on that pull request says collecting in step across ranks "is
used in internal production") and prints the summary: a sensitivity, nothing fed back.

Run: python benchmarks/whatif_gc_pause.py  (under a minute)
"""

from __future__ import annotations

from simulator.parallel.whatif.validate import Summary, outside, speed_ratio

SHARES = (0.015, 0.03)  # torchtitan's measured 1.5%, and twice it
SCHEDULED = "Llama 3"  # rows whose framework collected on a schedule


def main() -> None:
    checked = outside()
    ratios = [speed_ratio(c) for c in checked]
    print(f"as priced:   {Summary.of(ratios).text()}")
    for share in SHARES:
        paused = [r if SCHEDULED in c.row.table else r / (1 + share) for c, r in zip(checked, ratios)]
        print(f"+{share:.1%} a step: {Summary.of(paused).text()}")
        for c, r in zip(checked, paused):
            print(f"    {c.row.label:<45} {r:.3f}")


if __name__ == "__main__":
    main()
