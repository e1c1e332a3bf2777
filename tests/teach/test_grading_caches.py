"""Answers that remember what they smuggled from an earlier run: each device keeps a cache keyed on its own data,
fills it once through a variable the devices share, and from then on answers from it. The isolation check's reruns
hold a device's own data and its messages equal, so such a device answers there exactly as an honest one; and the
messages carry what the exercise's requirements look for (the total, the average, every chunk of the sum). The
grade's mixed input sets (half the devices' own data drawn again, the rest as in the notebook) find them: the
unchanged devices answer stale values. Right answers under students' own names still pass."""

import csv
import inspect
import textwrap

import pytest

from simulator.cli.main import main
from simulator.teach.exercises import grade

REMEMBERING = {
    "gus_row_total.py": """
        EXERCISE = "row-split"
        import numpy as np

        PARTS, MEMO = {}, {}

        def rows(dev, x, w):
            r = dev.rank
            dev.hold("X", x, index=np.s_[:, 2 * r : 2 * r + 2])
            dev.hold("W", w, index=np.s_[2 * r : 2 * r + 2])
            PARTS[r] = (x, w)
            dev.send(np.zeros(0), 1 - r)  # a 0-byte sync: the other's part is in PARTS now
            dev.recv(1 - r, shape=(0,), dtype=np.float64)
            key = (r, x.tobytes(), w.tobytes())  # what this device was given: equal in every rerun
            if key not in MEMO:
                MEMO[key] = sum(PARTS[k][0] @ PARTS[k][1] for k in (0, 1))
            total = MEMO[key]
            dev.send(total, 1 - r)  # so that each device 'receives the total' in a message
            dev.recv(1 - r, shape=(2, 6), dtype=np.float64)
            return dev.compute("Y", lambda: total)
    """,
    "hal_average_closure.py": """
        EXERCISE = "data-parallel-average"
        import numpy as np

        def _make():
            box, memo = {}, {}

            def dp(dev, x, y, w):
                r = dev.rank
                rows = np.s_[4 * r : 4 * r + 4]
                dev.hold("X", x, index=rows)
                dev.hold("y", y, index=rows)
                dev.hold("w", w)
                box[r] = (x, y)
                dev.send(np.zeros(0), 1 - r)
                dev.recv(1 - r, shape=(0,), dtype=np.float64)
                key = (r, x.tobytes(), y.tobytes())
                if key not in memo:
                    xs, ys = np.concatenate([box[0][0], box[1][0]]), np.concatenate([box[0][1], box[1][1]])
                    memo[key] = xs.T @ (xs @ w - ys) / len(ys)
                g = memo[key]
                dev.send(g, 1 - r)
                dev.recv(1 - r, shape=(3,), dtype=np.float64)
                return dev.compute("g", lambda: g)

            return dp

        ANSWER = _make()
    """,
    "ivy_ring_gc.py": """
        EXERCISE = "ring-all-reduce"
        import gc
        import numpy as np

        MEMO = {}

        def _everyones(p, r, x):  # the parts this run was started with, found by the garbage collector
            for obj in gc.get_objects():
                if type(obj).__name__ == "PerDevice":
                    parts = [obj.part(k) for k in range(p)]
                    if all(np.shape(v) == (8,) for v in parts) and np.array_equal(parts[r], x):
                        return parts
            raise LookupError("no parts")

        def ring(dev, x):
            p, r = dev.world_size, dev.rank
            dev.hold(f"x[{r}]", x)
            key = (r, x.tobytes())
            if key not in MEMO:
                MEMO[key] = sum(_everyones(p, r, x))
            v = MEMO[key]
            for c in range(p):  # the sum's four chunks to the right: every chunk 'arrives' in a message
                dev.send(v[2 * c : 2 * c + 2].copy(), (r + 1) % p, label="my ring chunk")
            for c in range(p):
                dev.recv((r - 1) % p, shape=(2,), dtype=np.float64)
            return dev.compute("v", lambda: v)

        ANSWER = ring
    """,
}
RIGHT = {
    "jo_rows.py": """
        EXERCISE = "row-split"
        import numpy as np

        def rows(dev, x, w):
            me, other = dev.rank, 1 - dev.rank
            sl = slice(2 * me, 2 * me + 2)
            mine = dev.compute("Y", np.matmul, dev.hold("X", x, index=np.s_[:, sl]),
                               dev.hold("W", w, index=np.s_[sl, :]), partial=True)
            req = dev.irecv(other, shape=(2, 6), dtype=np.float64)
            dev.send(mine, other)
            return dev.compute("Y.total", np.add, mine, dev.wait(req))
    """,
    "kim_average.py": """
        EXERCISE = "data-parallel-average"
        import numpy as np

        def dp(dev, xb, yb, w):
            half = np.s_[4 * dev.rank : 4 * dev.rank + 4]
            xb, yb, w = dev.hold("X", xb, index=half), dev.hold("y", yb, index=half), dev.hold("w", w)
            mine = dev.compute("grad_here", lambda a, b, c: a.T @ (a @ c - b) / len(b), xb, yb, w)
            return dev.compute("g", lambda t: t / 2, dev.all_reduce(mine))
    """,
}


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "class").mkdir()
    for name, text in {**REMEMBERING, **RIGHT}.items():
        (tmp_path / "class" / name).write_text(textwrap.dedent(text))
    return tmp_path / "class"


def _answer(namespace: dict):
    return namespace.get("ANSWER") or next(v for k, v in namespace.items() if inspect.isfunction(v))


@pytest.mark.parametrize("seed", [1, 2])
def test_in_process_an_answer_remembered_from_an_earlier_run_is_failed(folder, seed):
    for name in {**REMEMBERING, **RIGHT}:
        namespace: dict = {}
        exec(compile((folder / name).read_text(), name, "exec"), namespace)
        result = grade(namespace["EXERCISE"], _answer(namespace), seed=seed)
        if name in REMEMBERING:
            assert result.verdict == "FAILED", (name, result.text())
            # stale values, found on the notebook's inputs with half the devices' own data drawn again
            assert "this is with other inputs than the notebook's" in result.text(), (name, result.text())
        else:
            assert result.ok, (name, result.text())


@pytest.mark.slow
def test_graded_to_a_csv_an_answer_remembered_from_an_earlier_run_is_failed(folder, tmp_path):
    out = tmp_path / "grades.csv"
    assert main(["grade", str(folder), "--csv", str(out), "--timeout", "60", "--jobs", "1"]) == 0
    with out.open() as f:
        rows = {row["file"]: row for row in csv.DictReader(f)}
    for name in REMEMBERING:
        assert rows[name]["verdict"] == "FAILED", (name, rows[name]["detail"])
    for name in RIGHT:
        assert rows[name]["verdict"] == "passed", (name, rows[name]["detail"])
