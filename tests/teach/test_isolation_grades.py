"""A class graded through ``python -m simulator grade FOLDER --csv``, and in-process as a notebook grades: answers
that move data outside messages (a module-level dict behind a 0-byte sync, a ring of 0-byte tokens, a class
attribute, the scheduler's frame) are FAILED with the reason; right answers under students' own names pass."""

import csv
import inspect
import textwrap

import numpy as np
import pytest

from simulator.cli.main import main
from simulator.teach.exercises import grade
from simulator.teach.grading import grade_file

CHEATS = {
    "ann_row_dict.py": """
        EXERCISE = "row-split"
        import numpy as np

        PARTS = {}

        def rows(dev, x_part, w_part):
            r = dev.rank
            mine = dev.compute("Y", np.matmul, dev.hold("X", x_part, index=np.s_[:, 2 * r : 2 * r + 2]),
                               dev.hold("W", w_part, index=np.s_[2 * r : 2 * r + 2]), partial=True)
            PARTS[r] = mine
            dev.send(np.zeros(0), dst=1 - r)  # a 0-byte sync
            dev.recv(src=1 - r, shape=(0,), dtype=np.float64)
            return PARTS[0] + PARTS[1]
    """,
    "ben_ring_tokens.py": """
        EXERCISE = "ring-all-reduce"
        import numpy as np

        SEEN = {}

        def ring(dev, mine):
            p, r = dev.world_size, dev.rank
            SEEN[r] = dev.hold(f"x[{r}]", mine)
            for _ in range(2 * (p - 1)):  # tokens of 0 bytes: within any budget
                dev.send(np.zeros(0), dst=(r + 1) % p)
                dev.recv(src=(r - 1) % p, shape=(0,), dtype=np.float64)
            v = sum(SEEN[k] for k in range(p))
            return dev.compute("v", lambda: v)
    """,
    "cat_class_attribute.py": """
        EXERCISE = "data-parallel-average"
        import numpy as np


        class Store:
            batch = {}


        def replica(dev, xb, yb, w):
            r = dev.rank
            Store.batch[r] = (xb, yb)
            dev.all_reduce(np.zeros(3))
            x = np.concatenate([Store.batch[0][0], Store.batch[1][0]])
            y = np.concatenate([Store.batch[0][1], Store.batch[1][1]])
            return dev.compute("g", lambda: 2 * x.T @ (x @ w - y) / len(y))
    """,
    "dan_frame.py": """
        EXERCISE = "ring-all-reduce"
        import numpy as np

        def ring(dev, x):  # the inputs of every device, from a frame up the stack: the grader's in a notebook,
            frame = dev._engine._sched.gr_frame  # the request's in the process that runs a file's answer
            while "inputs" not in frame.f_locals and "request" not in frame.f_locals:
                frame = frame.f_back
            if "inputs" in frame.f_locals:
                xs = frame.f_locals["inputs"]["xs"]
            else:
                xs = np.stack(frame.f_locals["request"]["args"][0][1])
            p, r = dev.world_size, dev.rank
            dev.hold(f"x[{r}]", x)
            dev.send(np.zeros(0), dst=(r + 1) % p)
            dev.recv(src=(r - 1) % p, shape=(0,), dtype=np.float64)
            return dev.compute("v", lambda: np.sum(xs, axis=0))
    """,
}
RIGHT = {
    "eve_ring.py": """
        EXERCISE = "ring-all-reduce"
        import numpy as np

        def ring(dev, vec):
            p, me = dev.world_size, dev.rank
            nxt, prv = (me + 1) % p, (me - 1) % p
            parts = np.split(dev.hold(f"x[{me}]", vec), p)
            for step in range(p - 1):
                dev.send(parts[(me - step) % p], nxt)
                incoming = dev.recv(prv, shape=(2,), dtype=np.float64)
                k = (me - step - 1) % p
                parts[k] = dev.compute(f"partial{step}", np.add, incoming, parts[k])
            for step in range(p - 1):
                dev.send(parts[(me + 1 - step) % p], nxt)
                parts[(me - step) % p] = dev.recv(prv, shape=(2,), dtype=np.float64)
            return dev.compute("v", np.concatenate, parts)
    """,
    "fay_rows.py": """
        EXERCISE = "row-split"
        import numpy as np

        def rows(dev, xs, ws):
            r = dev.rank
            a = dev.hold("X", xs, index=np.s_[:, 2 * r : 2 * r + 2])
            b = dev.hold("W", ws, index=np.s_[2 * r : 2 * r + 2])
            return dev.all_reduce(dev.compute("Y", lambda u, v: u @ v, a, b, partial=True))
    """,
}
REASONS = {
    "ann_row_dict.py": "device 0's result depends on X (columns 2:4) and W (rows 2:4), which only device 1 holds",
    "ben_ring_tokens.py": "device 0's v depends on xs[1], xs[2] and xs[3], which only devices 1, 2 and 3 hold",
    "cat_class_attribute.py": "device 0's g depends on X (rows 4:8) and y (elements 4:8), which only device 1 holds",
    "dan_frame.py": "device 0's v depends on xs[1], xs[2] and xs[3], which only devices 1, 2 and 3 hold",
}


def words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def folder(tmp_path):
    for name, text in {**CHEATS, **RIGHT}.items():
        (tmp_path / "class").mkdir(exist_ok=True)
        (tmp_path / "class" / name).write_text(textwrap.dedent(text))
    return tmp_path / "class"


def test_a_class_graded_to_a_csv_fails_every_answer_that_moves_data_outside_messages(folder, tmp_path):
    out = tmp_path / "grades.csv"
    assert main(["grade", str(folder), "--csv", str(out), "--timeout", "60", "--jobs", "2"]) == 0
    with out.open() as f:
        rows = {row["file"]: row for row in csv.DictReader(f)}
    for name in CHEATS:
        assert rows[name]["verdict"] == "FAILED", (name, rows[name]["detail"])
        assert REASONS[name] in words(rows[name]["detail"]), (name, rows[name]["detail"])
        assert "but no message carried it" in rows[name]["detail"]
        assert rows[name]["first_divergence"].startswith("outside messages: device ")
    for name in RIGHT:
        assert rows[name]["verdict"] == "passed", (name, rows[name]["detail"])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_in_process_as_a_notebook_grades_the_same_verdicts(folder, seed):
    for name in {**CHEATS, **RIGHT}:
        namespace: dict = {}
        exec(compile((folder / name).read_text(), name, "exec"), namespace)
        program = next(v for v in namespace.values() if inspect.isfunction(v))
        result = grade(namespace["EXERCISE"], program, seed=seed)
        if name in CHEATS:
            assert result.verdict == "FAILED" and REASONS[name] in words(result.text()), (name, result.text())
        else:
            assert result.ok, (name, result.text())


def test_one_file_graded_in_process_says_where_data_came_outside_messages(folder):
    row = grade_file(folder / "ann_row_dict.py")
    assert row["verdict"] == "FAILED" and row["first_divergence"] == "outside messages: device 0"


RUNS: list = []


def patches_the_isolation_check_on_its_second_run(dev, x):
    """The seed's split through a dict, and from its second run on, the isolation check's comparison replaced."""
    import simulator.checker.isolation as iso

    if dev.rank == 0:
        RUNS.append(1)
        if len(RUNS) > 1:
            iso._same = lambda a, b: True
        PATCHED_A[:] = [dev.compute("A", lambda v: 2 * v + 1, dev.hold("x", x))]
        dev.send(np.zeros(0), dst=1)
        return None
    dev.recv(src=0, shape=(0,), dtype=np.float64)
    return dev.compute("B", lambda: PATCHED_A[0] ** 2)


PATCHED_A: list = []


def test_a_program_that_patches_the_isolation_check_while_it_reruns_is_refused():
    import simulator.checker.isolation as iso

    same = iso._same
    try:
        result = grade("split-the-seed", patches_the_isolation_check_on_its_second_run, seed=1)
    finally:
        iso._same = same
    assert result.verdict == "FAILED" and result.diagnosis == "grader", result.text()
    assert "simulator.checker.isolation._same" in result.text()
