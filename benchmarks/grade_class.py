"""What grading a class's folder costs: ``grade FOLDER`` against its floor, a bare Python process per file.

The class: every exercise's answer copied from its notebook (the instructor's solutions), ``--copies`` times, so
``8 x copies`` files. Each file's answer runs in a process of its own (simulator/teach/student_process.py) and the
verdict is made in the grading process from the records it sends back. The peer, side by side: the floor of any
design that grades each file in a fresh process, one ``python -I -c "import numpy, simulator.core.world"`` per
file, ``--jobs`` at once. Each figure is the median of ``--rounds`` rounds of wall-clock seconds, with the spread
and the load (benchmarks/sidebyside.py).

Run: python benchmarks/grade_class.py [--copies N] [--jobs J] [--rounds R]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sidebyside import load, loads, spread

from simulator.teach.exercises import EXERCISES
from simulator.teach.grading import grade_folder, summary

ROOT = Path(__file__).resolve().parents[1]


def make_class(folder: Path, copies: int) -> int:
    solutions = sorted((ROOT / "instructor" / "exercises").glob("0*.py"))
    for k in range(copies):
        for solution, name in zip(solutions, EXERCISES):
            text = solution.read_text()
            cell = text[text.index("# %% [starter]") :].split("\n", 1)[1].split("# %% [", 1)[0]
            (folder / f"student{k}_{name}.py").write_text(f'EXERCISE = "{name}"\n{cell}')
    return copies * len(solutions)


def floor(n: int, jobs: int) -> None:
    command = [sys.executable, "-I", "-c", "import numpy, simulator.core.world"]
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda _: subprocess.run(command, check=True), range(n)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    graded, floors, before, after = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        n = make_class(Path(tmp), args.copies)
        for _ in range(args.rounds):
            before.append(load())
            t0 = time.perf_counter()
            rows = grade_folder(tmp, jobs=args.jobs)
            graded.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            floor(n, args.jobs)
            floors.append(time.perf_counter() - t0)
            after.append(load())
    print(f"{n} files, {args.jobs} at once: {summary(rows)}")
    print(f"  grade FOLDER:                   {spread(graded)} s, {spread([g / n for g in graded])} s a file")
    print(f"  floor (a bare process a file):  {spread(floors)} s, {spread([f / n for f in floors])} s a file")
    print(f"  {loads(before, after)}")


if __name__ == "__main__":
    main()
