"""Programs for the split catalogue: cheats that get the numbers right in the wrong place (or by the wrong
means), and correct programs under names of their own. Module-level, so real rank processes can import them
(tests/real/test_split_gloo.py runs the bug catalogue on gloo)."""

import numpy as np

from simulator.teach.examples.seeds import stage_a, stage_b
from simulator.teach.exercises import data, ring, tensor

F64 = {"shape": (1,), "dtype": np.float64}


# ---- the seed: A on device 0, B on device 1 ----------------------------------------------------------------
def recompute_on_receiver(dev, x):
    """raw-input-bug's bug, 'fixed' on the wrong side: device 0 still sends x, device 1 recomputes A from it."""
    if dev.rank == 0:
        dev.hold("x", x)
        dev.compute("A", stage_a, x)
        dev.send(x, dst=1)
        return None
    h = dev.recv(src=0, **F64)
    return dev.compute("B", stage_b, dev.compute("A", stage_a, h))


def x_crosses_and_b_does_both(dev, x):
    """x crosses unnamed, and device 1's op "B" computes (2v + 1)**2 in one go."""
    if dev.rank == 0:
        dev.hold("x", x)
        dev.compute("A", stage_a, x)
        dev.send(x, dst=1)
        return None
    v = dev.recv(src=0, **F64)
    return dev.compute("B", lambda v: (2 * v + 1) ** 2, v)


def whole_model_on_device_1(dev, x):
    """Device 1 runs the whole model from the notebook's x (it is given none)."""
    from simulator.teach.exercises.seeds import X

    if dev.rank == 0:
        return None
    h = dev.compute("A", stage_a, dev.hold("x", X))
    return dev.compute("B", stage_b, h)


def constant_b(dev, x):
    """B returns the answer for x = 3, whatever it is given."""
    if dev.rank == 0:
        dev.hold("x", x)
        dev.send(dev.compute("A", stage_a, x), dst=1)
        return None
    dev.recv(src=0, name="A", **F64)
    return dev.compute("B", lambda: np.array([49.0]))


def _shared_object_program():
    shared = []  # one Python list both simulated devices see; real rank processes each have their own

    def a_through_a_shared_list(dev, x):
        """Device 0 puts A in a list device 1 reads after a barrier: nothing carrying A crosses."""
        if dev.rank == 0:
            dev.hold("x", x)
            shared.append(dev.compute("A", stage_a, x))
            dev.barrier()
            return None
        dev.barrier()
        return dev.compute("B", stage_b, shared[-1])

    return a_through_a_shared_list


a_through_a_shared_list = _shared_object_program()


def b_returned_by_device_0_too(dev, x):
    """The seed's split, and device 0 also squares A itself and returns it: B where the split does not put it."""
    if dev.rank == 0:
        h = dev.compute("A", stage_a, dev.hold("x", x))
        dev.send(h, dst=1)
        return h**2
    return dev.compute("B", stage_b, dev.recv(src=0, **F64))


def _numpy_b_program():
    shared = []  # as above: a list both simulated devices see

    def b_in_numpy_from_a_shared_list(dev, x):
        """Device 0 leaves A in a list; device 1 squares it in plain NumPy: no message, no op named B."""
        if dev.rank == 0:
            shared.append(dev.compute("A", stage_a, dev.hold("x", x)))
            return None
        return stage_b(shared[-1])

    return b_in_numpy_from_a_shared_list


b_in_numpy_from_a_shared_list = _numpy_b_program()


def b_broadcast_by_device_0(dev, x):
    """Device 0 computes B in plain NumPy and broadcasts it: a collective's message, not held to crosses."""
    if dev.rank == 0:
        h = dev.compute("A", stage_a, dev.hold("x", x))
        dev.broadcast(stage_b(h), src=0)
        return None
    return dev.broadcast(np.zeros(1), src=0)


def b_sent_under_a_collective_label(dev, x):
    """Device 0 computes B in plain NumPy and sends it labelled as a collective's step would be."""
    if dev.rank == 0:
        h = dev.compute("A", stage_a, dev.hold("x", x))
        dev.send(stage_b(h), dst=1, label="broadcast#0 step 0")
        return None
    return dev.recv(src=0, **F64)


def split_with_own_intermediate(dev, x):
    """Correct: A made in two steps, the first under a name of the program's own."""
    if dev.rank == 0:
        twice = dev.compute("twice", lambda v: 2 * v, dev.hold("x", x))
        dev.send(dev.compute("A", lambda t: t + 1, twice), dst=1)
        return None
    h = dev.recv(src=0, **F64)
    return dev.compute("B", stage_b, h)


def seed_split_unnamed(dev, x):
    """Correct: the seed's split, with the message received under no name (placed by its value)."""
    if dev.rank == 0:
        dev.send(dev.compute("A", stage_a, dev.hold("x", x)), dst=1)
        return None
    return dev.compute("B", stage_b, dev.recv(src=0, **F64))


# ---- the ring all-reduce by hand ---------------------------------------------------------------------------
def ring_by_library(dev, x):
    """The built-in all-reduce, plus one junk send to look hand-written."""
    dev.hold(f"x[{dev.rank}]", x)
    p = dev.world_size
    dev.send(np.zeros(1), (dev.rank + 1) % p, label="my ring")
    dev.recv((dev.rank - 1) % p, shape=(1,), dtype=np.float64)
    return dev.compute("v", lambda s: s, dev.all_reduce(x))


def ring_everyone_to_everyone(dev, x):
    """Every device sends its whole vector to every other and sums locally: the right sum, 2x a ring's bytes."""
    p, r = dev.world_size, dev.rank
    x = dev.hold(f"x[{r}]", x)
    for k in range(1, p):
        dev.send(x, (r + k) % p, label="gather")
    others = [dev.recv((r - k) % p, shape=(8,), dtype=np.float64) for k in range(1, p)]
    return dev.compute("v", lambda *vs: np.sum(vs, axis=0), x, *others)


def ring_local_sum(dev, x):
    """A local sum of the package's XS: every device 'has' the whole input."""
    dev.hold(f"x[{dev.rank}]", x)
    return dev.compute("v", lambda: ring.XS.sum(axis=0))


def _ring_through_a_shared_dict():
    shared: dict[int, np.ndarray] = {}

    def ring_through_a_shared_dict(dev, x):
        """Each device leaves its vector in a dict they all see, sends a ring's worth of zeros, and sums the dict."""
        p, r = dev.world_size, dev.rank
        shared[r] = dev.hold(f"x[{r}]", x)
        for s in range(2 * (p - 1)):
            dev.send(np.zeros(2), (r + 1) % p, label=f"my ring step {s}")
            dev.recv((r - 1) % p, shape=(2,), dtype=np.float64)
        return dev.compute("v", lambda: sum(shared[k] for k in range(p)))

    return ring_through_a_shared_dict


ring_through_a_shared_dict = _ring_through_a_shared_dict()


def ring_own_names(dev, x):
    """Correct: the ring with unlabelled messages and running sums under names of its own."""
    p, r = dev.world_size, dev.rank
    right, left = (r + 1) % p, (r - 1) % p
    chunks = list(np.split(dev.hold(f"x[{r}]", x), p))
    for s in range(p - 1):
        dev.send(chunks[(r - s) % p], right)
        got = dev.recv(left, shape=(2,), dtype=np.float64)
        c = (r - s - 1) % p
        chunks[c] = dev.compute(f"acc{s}", np.add, got, chunks[c])
    for s in range(p - 1):
        dev.send(chunks[(r + 1 - s) % p], right)
        chunks[(r - s) % p] = dev.recv(left, shape=(2,), dtype=np.float64)
    return dev.compute("v", np.concatenate, chunks)


# ---- tensor parallelism --------------------------------------------------------------------------------------
def column_by_swapping_weights(dev, x, w):
    """Each device sends its W columns to the other and computes all of Y: the right Y, twice an all-gather's bytes."""
    cols = np.s_[:, 3 * dev.rank : 3 * dev.rank + 3]
    x = dev.hold("X", x)
    w = dev.hold("W", w, index=cols)
    dev.send(w, 1 - dev.rank)
    other = dev.recv(1 - dev.rank, shape=(4, 3), dtype=np.float64)
    whole = np.concatenate([w, other] if dev.rank == 0 else [other, w], axis=1)
    return dev.compute("Y", np.matmul, x, whole)


def row_by_gather(dev, x, w):
    """The partial sums gathered whole and added on every device: an all-gather where an all-reduce is asked."""
    rows = slice(2 * dev.rank, 2 * dev.rank + 2)
    x = dev.hold("X", x, index=np.s_[:, rows])
    w = dev.hold("W", w, index=np.s_[rows, :])
    y = dev.compute("Y", np.matmul, x, w, partial=True)
    return dev.compute("Y.sum", lambda parts: parts[0] + parts[1], dev.all_gather(y))


def row_on_the_whole_input(dev, x, w):
    """Every device computes all of Y from the package's X and W."""
    dev.hold("X", tensor.X)
    dev.hold("W", tensor.W)
    return dev.compute("Y", np.matmul, tensor.X, tensor.W)


def _column_through_a_shared_dict():
    shared: dict[int, np.ndarray] = {}

    def column_through_a_shared_dict(dev, x, w):
        """Each device leaves its W columns in a dict they all see, all-gathers zeros, and multiplies by both."""
        cols = np.s_[:, 3 * dev.rank : 3 * dev.rank + 3]
        shared[dev.rank] = dev.hold("W", w, index=cols)
        dev.all_gather(np.zeros((2, 3)), axis=1)
        return dev.compute("Y", lambda a: a @ np.concatenate([shared[0], shared[1]], axis=1), dev.hold("X", x))

    return column_through_a_shared_dict


column_through_a_shared_dict = _column_through_a_shared_dict()


def _row_through_a_shared_dict():
    shared: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def row_through_a_shared_dict(dev, x, w):
        """Each device leaves its parts of X and W in a dict they all see, all-reduces zeros, and multiplies all."""
        rows = slice(2 * dev.rank, 2 * dev.rank + 2)
        shared[dev.rank] = (dev.hold("X", x, index=np.s_[:, rows]), dev.hold("W", w, index=np.s_[rows, :]))
        dev.all_reduce(np.zeros((2, 6)))
        return dev.compute("Y", lambda: sum(a @ b for a, b in (shared[0], shared[1])))

    return row_through_a_shared_dict


row_through_a_shared_dict = _row_through_a_shared_dict()


def column_unnamed_gather(dev, x, w):
    """Correct: the column split, the all-gather unnamed."""
    cols = np.s_[:, 3 * dev.rank : 3 * dev.rank + 3]
    y = dev.compute("Y", np.matmul, dev.hold("X", x), dev.hold("W", w, index=cols), index=cols)
    return dev.all_gather(y, axis=1)


def row_unnamed_all_reduce(dev, x, w):
    """Correct: the row split, the all-reduce unnamed (as the README writes it)."""
    rows = slice(2 * dev.rank, 2 * dev.rank + 2)
    x = dev.hold("X", x, index=np.s_[:, rows])
    w = dev.hold("W", w, index=np.s_[rows, :])
    return dev.all_reduce(dev.compute("Y", np.matmul, x, w, partial=True))


# ---- data parallelism ----------------------------------------------------------------------------------------
def replica_on_the_whole_batch(dev, x, y, w):
    """Each replica computes the whole batch's gradient from the package's data: no all-reduce needed."""
    dev.hold("X", data.X)
    dev.hold("y", data.Y)
    dev.hold("w", w)
    return dev.compute("g", data.mean_gradient, data.X, data.Y, w)


def _average_through_a_shared_dict():
    shared: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def average_through_a_shared_dict(dev, x, y, w):
        """Each replica leaves its rows in a dict they all see, all-reduces zeros, and takes the whole batch's gradient."""
        rows = np.s_[4 * dev.rank : 4 * dev.rank + 4]
        shared[dev.rank] = (dev.hold("X", x, index=rows), dev.hold("y", y, index=rows))
        dev.all_reduce(np.zeros(3))
        whole_x = np.concatenate([shared[0][0], shared[1][0]])
        whole_y = np.concatenate([shared[0][1], shared[1][1]])
        return dev.compute("g", lambda: data.mean_gradient(whole_x, whole_y, w))

    return average_through_a_shared_dict


average_through_a_shared_dict = _average_through_a_shared_dict()


def sum_then_divide(dev, x, y, w):
    """Correct: summed by an all-reduce under a name of its own (g.sum), then divided."""
    rows = np.s_[4 * dev.rank : 4 * dev.rank + 4]
    x, y = dev.hold("X", x, index=rows), dev.hold("y", y, index=rows)
    g_local = dev.compute("g.local", data.mean_gradient, x, y, dev.hold("w", w))
    total = dev.all_reduce(g_local, name="g.sum")
    return dev.compute("g", lambda s: s / dev.world_size, total)


def replica_term_own_name(dev, x, y, w):
    """Correct: a replica's term named as the program likes, averaged by the all-reduce."""
    rows = np.s_[4 * dev.rank : 4 * dev.rank + 4]
    x, y = dev.hold("X", x, index=rows), dev.hold("y", y, index=rows)
    mine = dev.compute("grad_mine", data.mean_gradient, x, y, dev.hold("w", w))
    return dev.all_reduce(mine, op="avg", name="g")


def average_unnamed(dev, x, y, w):
    """Correct: averaged by an all-reduce given no name=; what it returns is g, compared as the result."""
    rows = np.s_[4 * dev.rank : 4 * dev.rank + 4]
    x, y = dev.hold("X", x, index=rows), dev.hold("y", y, index=rows)
    return dev.all_reduce(dev.compute("g.local", data.mean_gradient, x, y, dev.hold("w", w)), op="avg")


# ---- ZeRO-1 --------------------------------------------------------------------------------------------------
def zero_state_under_own_name(dev, p, g, m):
    """All of m kept, under a name of the program's own, and only half of it used: still not sharded."""
    half = np.s_[4 * dev.rank : 4 * dev.rank + 4]
    p, g = dev.hold("p", p), dev.hold("g", g)
    whole = dev.hold("momentum", m)
    m_new = dev.compute("m.new", lambda m, g: data.BETA * m + g, whole[half], g[half], index=half)
    p_new = dev.compute("p.new", lambda p, m: p - data.LR * m, p[half], m_new, index=half)
    return dev.all_gather(p_new, axis=0, name="p.new")


def zero_own_names(dev, p, g, m):
    """Correct: ZeRO-1 with the shard of m under a name of its own."""
    half = np.s_[4 * dev.rank : 4 * dev.rank + 4]
    p, g = dev.hold("p", p), dev.hold("g", g)
    mine = dev.hold("m_mine", m[half])
    m_new = dev.compute("m.new", lambda m, g: data.BETA * m + g, mine, g[half], index=half)
    p_new = dev.compute("p.new", lambda p, m: p - data.LR * m, p[half], m_new, index=half)
    return dev.all_gather(p_new, axis=0)


def zero_whole_update_in_numpy(dev, p, g, m):
    """Shards on paper (half of m held, half of p updated), but returns all of p.new made from all of m in plain
    NumPy: no all-gather, and the other half never crossed."""
    half = np.s_[4 * dev.rank : 4 * dev.rank + 4]
    dev.hold("p", p), dev.hold("g", g)
    mine = dev.hold("m", m[half], index=half)
    m_new = dev.compute("m.new", lambda a, b: data.BETA * a + b, mine, g[half], index=half)
    dev.compute("p.new", lambda a, b: a - data.LR * b, p[half], m_new, index=half)
    return p - data.LR * (data.BETA * m + g)


# ---- 1F1B ----------------------------------------------------------------------------------------------------
def schedule_from_the_library(p, m):
    from simulator.parallel.schedules import one_f_one_b

    sched = one_f_one_b(p, m)
    return [" ".join(str(a) for a in sched.actions[r]) for r in range(p)]


def schedule_hard_coded(p, m):
    return ["0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3", "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3"]


def schedule_own(p, m):
    """Correct: 1F1B from the rule, written another way (warm-up, steady pairs, cool-down)."""
    out = []
    for r in range(p):
        w = min(p - 1 - r, m)
        seq = [f"{r}F{i}" for i in range(w)]
        f, b = w, 0
        while f < m:
            seq += [f"{r}F{f}", f"{r}B{b}"]
            f, b = f + 1, b + 1
        seq += [f"{r}B{i}" for i in range(b, m)]
        out.append(" ".join(seq))
    return out


# ---- the bug catalogue on real processes (tests/real/test_split_gloo.py) ------------------------------------------
XR, WR = np.arange(8.0).reshape(2, 4), np.arange(24.0).reshape(4, 6)


def readme_linear(dev):
    return dev.compute("Y", np.matmul, dev.hold("X", XR), dev.hold("W", WR))


def readme_row_parallel(dev):
    """The README's row-parallel example: the all-reduce unnamed."""
    rows = np.s_[2 * dev.rank : 2 * dev.rank + 2]
    x = dev.hold("X", XR[:, rows], index=np.s_[:, rows])
    w = dev.hold("W", WR[rows], index=rows)
    return dev.all_reduce(dev.compute("Y", np.matmul, x, w, partial=True))


def mlp_reference(dev, x, a, b):
    h = dev.compute("H", lambda v: np.maximum(v, 0), dev.compute("XA", np.matmul, dev.hold("X", x), dev.hold("W1", a)))
    dev.hold("W2", b)
    return dev.compute("Z", np.matmul, h, b)


def mlp_wrong_w2_on_device_1(dev, x, a, b):
    """The Megatron MLP by hand, where device 1 takes device 0's rows of W2 (a wrong shard, its own index)."""
    cols, rows = np.s_[:, 3 * dev.rank : 3 * dev.rank + 3], np.s_[3 * dev.rank : 3 * dev.rank + 3]
    x = dev.hold("X", x)
    xa = dev.compute("XA", np.matmul, x, dev.hold("W1", a[cols], index=cols), index=cols)
    h = dev.compute("H", lambda v: np.maximum(v, 0), xa, index=cols)
    w2 = dev.hold("W2", b[0:3] if dev.rank == 1 else b[rows], index=rows)  # BUG on device 1
    z = dev.compute("Z", np.matmul, h, w2, partial=True)
    return dev.all_reduce(z, name="Z")


# ---- data moved outside messages (issue 38): each FAILED by the isolation check ---------------------------------
# Module-level, as a student's file has them: a dict, a class attribute, the engine's frames. On real processes
# each rank has its own module, so these programs stop (KeyError) or compute from their own data only.
ROW_PARTS: dict = {}


def row_total_from_a_module_dict(dev, x, w):
    """Each device leaves its partial product in a module-level dict, syncs with a 0-byte message, and adds both
    partial sums from the dict in plain NumPy."""
    rows = slice(2 * dev.rank, 2 * dev.rank + 2)
    x = dev.hold("X", x, index=np.s_[:, rows])
    w = dev.hold("W", w, index=np.s_[rows, :])
    ROW_PARTS[dev.rank] = dev.compute("Y", np.matmul, x, w, partial=True)
    other = 1 - dev.rank
    dev.send(np.zeros(0), dst=other)
    dev.recv(src=other, shape=(0,), dtype=np.float64)
    return ROW_PARTS[0] + ROW_PARTS[1]


RING_VECTORS: dict = {}


def ring_tokens_and_a_module_dict(dev, x):
    """A ring of 0-byte tokens (within any budget), the vectors read from a module-level dict, and the sum handed
    to an op with no inputs: ``dev.compute("v", lambda: v)``."""
    p, r = dev.world_size, dev.rank
    RING_VECTORS[r] = dev.hold(f"x[{r}]", x)
    for _ in range(2 * (p - 1)):
        dev.send(np.zeros(0), dst=(r + 1) % p)
        dev.recv(src=(r - 1) % p, shape=(0,), dtype=np.float64)
    v = sum(RING_VECTORS[k] for k in range(p))
    return dev.compute("v", lambda: v)


class Batch:
    """A class attribute: one object for every simulated device of the process."""

    rows: dict = {}


def average_through_a_class_attribute(dev, x, y, w):
    """Each replica leaves its rows on a class attribute, all-reduces zeros, and takes the whole batch's gradient."""
    rows = np.s_[4 * dev.rank : 4 * dev.rank + 4]
    Batch.rows[dev.rank] = (dev.hold("X", x, index=rows), dev.hold("y", y, index=rows))
    dev.all_reduce(np.zeros(3))
    whole_x = np.concatenate([Batch.rows[0][0], Batch.rows[1][0]])
    whole_y = np.concatenate([Batch.rows[0][1], Batch.rows[1][1]])
    return dev.compute("g", lambda: data.mean_gradient(whole_x, whole_y, w))


def _frames_of(dev, name):
    """Every value called ``name`` in the frames above the engine's scheduler (the caller's, the grader's)."""
    frame = dev._engine._sched.gr_frame
    while frame is not None:
        if name in frame.f_locals:
            yield frame.f_locals[name]
        frame = frame.f_back


def _inputs_from_the_frames(dev):
    return next(v for v in _frames_of(dev, "inputs") if isinstance(v, dict) and "xs" in v or "X" in v)


def ring_read_from_the_scheduler_frame(dev, x):
    """Every device reads all the vectors from the grader's frame, above the scheduler's, and returns their sum
    (tokens sent round the ring for show)."""
    p, r = dev.world_size, dev.rank
    dev.hold(f"x[{r}]", x)
    dev.send(np.zeros(0), dst=(r + 1) % p)
    dev.recv(src=(r - 1) % p, shape=(0,), dtype=np.float64)
    return dev.compute("v", lambda: np.asarray(_inputs_from_the_frames(dev)["xs"]).sum(axis=0))


def row_sent_from_the_scheduler_frame(dev, x, w):
    """Device 1 reads all of X and W from the grader's frame, computes Y in plain NumPy and sends it to device 0."""
    rows = slice(2 * dev.rank, 2 * dev.rank + 2)
    x = dev.hold("X", x, index=np.s_[:, rows])
    w = dev.hold("W", w, index=np.s_[rows, :])
    dev.compute("Y", np.matmul, x, w, partial=True)
    if dev.rank == 1:
        inputs = _inputs_from_the_frames(dev)
        y = inputs["X"] @ inputs["W"]
        dev.send(y, dst=0)
        return y
    return dev.recv(src=1, shape=(2, 6), dtype=np.float64)


def average_returned_from_the_scheduler_frame(dev, x, y, w):
    """Each replica computes its own term, then returns the whole batch's gradient computed from the grader's frame."""
    rows = np.s_[4 * dev.rank : 4 * dev.rank + 4]
    x, y = dev.hold("X", x, index=rows), dev.hold("y", y, index=rows)
    dev.all_reduce(dev.compute("g.local", data.mean_gradient, x, y, dev.hold("w", w)), op="avg", name="g")
    inputs = _inputs_from_the_frames(dev)
    return data.mean_gradient(inputs["X"], inputs["y"], w)


SEED_A: list = []


def seed_b_from_nowhere_after_a_token(dev, x):
    """Device 0 leaves A in a module-level list and sends a 0-byte token; device 1 computes B from no inputs."""
    if dev.rank == 0:
        SEED_A[:] = [dev.compute("A", stage_a, dev.hold("x", x))]
        dev.send(np.zeros(0), dst=1)
        return None
    dev.recv(src=0, shape=(0,), dtype=np.float64)
    return dev.compute("B", lambda: stage_b(SEED_A[0]))


def column_other_block_from_its_frame(dev, x, w):
    """Device 1 takes device 0's columns of W out of device 0's suspended frame and returns all of Y made from them
    (the all-gather runs, for show)."""
    cols = np.s_[:, 3 * dev.rank : 3 * dev.rank + 3]
    x = dev.hold("X", x)
    mine = dev.hold("W", w, index=cols)
    y = dev.compute("Y", np.matmul, x, mine, index=cols)
    if dev.rank == 0:
        dev.recv(src=1, shape=(0,), dtype=np.float64)  # waits here, its frame open, holding ``mine``
        return dev.all_gather(y, axis=1)
    frame = dev._engine._greenlets[0].gr_frame
    while "mine" not in frame.f_locals:
        frame = frame.f_back
    stolen = frame.f_locals["mine"]
    dev.send(np.zeros(0), dst=0)
    dev.all_gather(y, axis=1)
    return np.concatenate([x @ stolen, y], axis=1)


# ---- right answers as students write them: each passes, the isolation check included ----------------------------
def seed_reversed_and_tagged(dev, x):
    """Correct: device 1's branch first, a tagged message, A and B written the student's way."""
    if dev.rank == 1:
        got = dev.recv(0, shape=(1,), dtype=np.float64, tag=7)
        return dev.compute("B", lambda v: v * v, got)
    a = dev.compute("A", lambda v: v + v + 1, dev.hold("x", x))
    dev.send(a, dst=1, tag=7)
    return None


def row_exchange_by_hand(dev, x, w):
    """Correct: the partial sums swapped with irecv, send and wait, and added in place in a NumPy copy."""
    r, other = dev.rank, 1 - dev.rank
    cols = np.s_[:, 2 * r : 2 * r + 2]
    y = dev.compute("Y", np.matmul, dev.hold("X", x, index=cols), dev.hold("W", w, index=cols[::-1]), partial=True)
    req = dev.irecv(other, shape=y.shape, dtype=y.dtype)
    dev.send(y, dst=other)
    total = np.array(y)  # the device's own copy, written in place
    total += dev.wait(req)
    return total


def ring_accumulated_in_place(dev, x):
    """Correct: the ring with NumPy buffers of its own, added into in place, then handed to ops by name."""
    p, r = dev.world_size, dev.rank
    buf = np.array(dev.hold(f"x[{r}]", x)).reshape(p, -1)  # one row per chunk, the device's own copy
    for s in range(p - 1):
        dev.send(buf[(r - s) % p], (r + 1) % p)
        buf[(r - s - 1) % p] += dev.recv((r - 1) % p, shape=(2,), dtype=np.float64)
    for s in range(p - 1):
        dev.send(buf[(r + 1 - s) % p], (r + 1) % p)
        buf[(r - s) % p] = dev.recv((r - 1) % p, shape=(2,), dtype=np.float64)
    return dev.compute("v", np.ravel, buf)


COLUMN_BLOCKS: dict = {}


def column_y_from_no_inputs(dev, x, w):
    """Each device leaves its block of W in a module-level dict, sends a 0-byte token, and computes all of Y from no
    inputs: ``dev.compute("Y", lambda: ...)``."""
    cols = np.s_[:, 3 * dev.rank : 3 * dev.rank + 3]
    COLUMN_BLOCKS[dev.rank] = dev.hold("W", w, index=cols)
    x = dev.hold("X", x)
    dev.send(np.zeros(0), dst=1 - dev.rank)
    dev.recv(src=1 - dev.rank, shape=(0,), dtype=np.float64)
    return dev.compute("Y", lambda: x @ np.concatenate([COLUMN_BLOCKS[0], COLUMN_BLOCKS[1]], axis=1))


# ---- answers that remember what they computed in an earlier run of the same process --------------------------------
# With every other device handed what it received before, a device that answers from such a memory looks isolated
# to the reruns: the trials and the exercises' requirements (what must arrive in messages) find these.
SEED_MEMORY: dict = {}
SEED_A_SEEN: list = []


def seed_b_remembered(dev, x):
    """Device 0 leaves A in a list; device 1 squares it and remembers the answer by what it was given (nothing)."""
    if dev.rank == 0:
        SEED_A_SEEN[:] = [dev.compute("A", stage_a, dev.hold("x", x))]
        dev.send(np.zeros(0), dst=1)
        return None
    dev.recv(src=0, shape=(0,), dtype=np.float64)
    if "B" not in SEED_MEMORY:
        SEED_MEMORY["B"] = stage_b(SEED_A_SEEN[0])
    return dev.compute("B", lambda: SEED_MEMORY["B"])


RING_MEMORY: dict = {}


def ring_remembered(dev, x):
    """The module-dict ring, with each device's answer remembered by its own vector."""
    p, r = dev.world_size, dev.rank
    RING_VECTORS[r] = dev.hold(f"x[{r}]", x)
    for _ in range(2 * (p - 1)):
        dev.send(np.zeros(0), dst=(r + 1) % p)
        dev.recv(src=(r - 1) % p, shape=(0,), dtype=np.float64)
    key = (r, x.tobytes())
    if key not in RING_MEMORY:
        RING_MEMORY[key] = sum(RING_VECTORS[k] for k in range(p))
    return dev.compute("v", lambda: RING_MEMORY[key])
