"""Isolation checked, not assumed: ``check(run, reference, isolation=True)`` runs the program again with each
device's own inputs changed; data that reaches another device outside a message FAILS, in the seed's words, and
right programs (students' own names, unnamed receives, integer data, 0-byte syncs, replicated work) pass."""

import itertools

import numpy as np
import pytest

from simulator import PerDevice, World
from simulator.checker import ALL, Differential, Reference, Split, check
from simulator.checker.isolation import plan
from simulator.teach.examples import seeds

X3 = np.array([3.0])
SEED_WORDS = (
    "device 1's B depends on x, which only device 0 holds, but no message carried it: the program shares it outside "
    "messages (a global, a class attribute, another device's frame?). Real processes cannot do that."
)


def words(text: str) -> str:
    return " ".join(text.split())


def seed_check(program, x=X3, **options):
    run = World(2).run(program, PerDevice({0: x}))
    return check(run, Reference.of(seeds.model, x), isolation=True, **options)


# ---- the seed, as a student writes it ------------------------------------------------------------------------
def student_split(dev, x):  # own names, no name= on the receive, batch of one float
    if dev.rank == 0:
        a = dev.compute("A", lambda v: 2 * v + 1, dev.hold("x", x))
        dev.send(a, dst=1)
        return None
    got = dev.recv(src=0, shape=(1,), dtype=np.float64)
    return dev.compute("B", lambda v: v**2, got)


def test_a_right_split_passes_with_one_rerun_per_device_that_holds_data_of_its_own():
    report = seed_check(student_split)
    assert report.ok, report.text()
    assert report.isolation_runs == 1  # only device 0 is given anything: N+1 = 3 runs at most, 2 here
    assert "nothing reaches a device outside messages" in words(report.text())


def _seed_through(store):
    def program(dev, x):
        if dev.rank == 0:
            store["A"] = dev.compute("A", seeds.stage_a, dev.hold("x", x))
            dev.send(np.zeros(0), dst=1)  # a 0-byte token: it carries nothing
            return None
        dev.recv(src=0, shape=(0,), dtype=np.float64)
        return dev.compute("B", seeds.stage_b, store["A"])

    return program


class Shared:
    value: dict = {}


MODULE_DICT: dict = {}


@pytest.mark.parametrize("store", [MODULE_DICT, Shared.value, {}], ids=["module dict", "class attribute", "closure"])
@pytest.mark.parametrize("x", [X3, np.array([-1.25]), np.array([0.0])])
def test_a_shared_dict_class_attribute_or_closure_fails_in_the_seed_s_words(store, x):
    report = seed_check(_seed_through(store), x)
    assert report.verdict == "FAILED"
    assert report.text(width=None).startswith("check FAILED: data reached a device outside messages: " + SEED_WORDS)
    assert report.leaks[0].rank == 1 and report.leaks[0].record.name == "B"


def test_another_device_s_frame_is_outside_messages_too():
    def peeks(dev, x):
        if dev.rank == 0:
            mine = dev.hold("x", x)
            dev.recv(src=1, shape=(0,), dtype=np.float64)  # suspended here, ``mine`` in its frame
            return mine
        frame = dev._engine._greenlets[0].gr_frame
        while "mine" not in frame.f_locals:
            frame = frame.f_back
        b = seeds.stage_b(seeds.stage_a(frame.f_locals["mine"]))  # plain NumPy: no op records it
        dev.send(np.zeros(0), dst=0)
        return b

    report = check(World(2).run(peeks, PerDevice({0: X3})), Reference.of(seeds.model, X3), isolation=True)
    assert report.verdict == "FAILED"
    assert "device 1's result depends on x, which only device 0 holds" in words(report.text())


def test_a_device_that_receives_a_changed_message_and_then_reads_a_shared_dict_is_still_found():
    store = {}

    def honest_then_smuggles(dev, x):
        if dev.rank == 0:
            a = dev.compute("A", seeds.stage_a, dev.hold("x", x))
            store["x"] = x
            dev.send(a, dst=1)
            return None
        a = dev.recv(src=0, shape=(1,), dtype=np.float64, name="A")  # changes when x does: not the culprit
        return dev.compute("B", lambda v: v**2 + store["x"], a)  # x itself, read from the dict

    report = seed_check(honest_then_smuggles)
    assert report.verdict == "FAILED" and report.leaks[0].rank == 1
    assert "device 1's B depends on x" in words(report.text())


# ---- right programs that must not be accused ----------------------------------------------------------------
def _ring_sum(dev, x):
    """Every device ends with the sum of all the vectors, by a ring written with send and recv (own names)."""
    p, r = dev.world_size, dev.rank
    total = dev.hold(f"x[{r}]", x)
    passing = total
    for _ in range(p - 1):
        dev.send(passing, dst=(r + 1) % p)
        passing = dev.recv(src=(r - 1) % p, shape=x.shape, dtype=x.dtype)
        total = dev.compute("acc", np.add, total, passing)
    return total


def _ring_model(xs):
    def model(dev):
        for r, x in enumerate(xs):
            dev.hold(f"x[{r}]", x)
        return dev.compute("acc", lambda *v: np.sum(v, axis=0), *xs)

    return model


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.int32])
def test_a_hand_written_ring_passes_on_float_and_integer_data(dtype):
    rng = np.random.default_rng(5)
    xs = [rng.integers(-3, 4, size=4).astype(dtype) for _ in range(4)]  # integer-valued, some equal, some zero
    run = World(4).run(_ring_sum, PerDevice(xs))
    report = check(run, Reference.of(_ring_model(xs)), isolation=True, own_names=True)
    assert not report.leaks, report.text()
    assert report.isolation_runs == 4


def test_replicated_work_from_everyone_s_inputs_and_zero_byte_syncs_are_not_accused():
    w = np.arange(6.0).reshape(2, 3)  # given to every device: not changed between runs

    def replicated(dev, x, w):
        y = dev.compute("y", np.matmul, dev.hold("x", x), dev.hold("w", w))
        for k in range(1, dev.world_size):  # a barrier of 0-byte messages
            dev.send(np.zeros(0), dst=(dev.rank + k) % dev.world_size)
        for k in range(1, dev.world_size):
            dev.recv(src=(dev.rank - k) % dev.world_size, shape=(0,), dtype=np.float64)
        dev.compute("w2", lambda v: v * 2, w)  # the same on every device, from what every device is given
        return y

    xs = [np.full((1, 2), float(r)) for r in range(3)]
    run = World(3).run(replicated, PerDevice(xs), w)
    refs = {r: Reference.of(_one, xs[r], w) for r in range(3)}
    report = check(run, refs, isolation=True)
    assert not report.leaks and report.isolation_runs == 3, report.text()


def _one(dev, x, w):
    y = dev.compute("y", np.matmul, dev.hold("x", x), dev.hold("w", w))
    dev.compute("w2", lambda v: v * 2, w)
    return y


def test_draws_from_numpy_s_global_generator_are_the_same_in_every_rerun():
    def noisy(dev, x):  # the same draw on every device, from a generator seeded before the run
        noise = np.random.normal(size=1)
        if dev.rank == 0:
            dev.send(dev.compute("A", seeds.stage_a, dev.hold("x", x)) + 0 * noise, dst=1)
            return None
        return dev.compute("B", seeds.stage_b, dev.recv(src=0, shape=(1,), dtype=np.float64)) + 0 * noise

    np.random.seed(1)
    run = World(2).run(noisy, PerDevice({0: X3}))
    after_run = np.random.get_state()
    report = check(run, Reference.of(seeds.model, X3), isolation=True)
    assert not report.leaks, report.text()
    now = np.random.get_state()  # the caller's generator is put back as it was
    assert np.array_equal(now[1], after_run[1]) and now[2] == after_run[2]


def test_a_program_whose_values_change_by_themselves_is_said_to_be_that_not_accused():
    ticks = iter(range(10**6))

    def clocked(dev, x):  # device 1 returns a counter: different in every run, whatever device 0 holds
        if dev.rank == 0:
            dev.hold("x", x)
            return None
        return np.array([float(next(ticks))])

    report = check(World(2).run(clocked, PerDevice({0: X3})), Reference.of(seeds.model, X3), isolation=True)
    assert any("change from run to run with nothing changed" in n for n in report.notes), report.notes
    assert report.isolation_runs == 2  # the rerun, and the control that found the counter


def test_a_rerun_that_stops_is_not_verified_with_the_reason():
    def picky(dev, x):
        if dev.rank == 0:
            if float(x[0]) != 3.0:
                raise ValueError("only 3 will do")
            dev.send(dev.compute("A", seeds.stage_a, dev.hold("x", x)), dst=1)
            return None
        return dev.compute("B", seeds.stage_b, dev.recv(src=0, shape=(1,), dtype=np.float64))

    report = seed_check(picky)
    assert report.verdict == "not verified"
    text = words(report.text())
    assert "run again with x of device 0 changed, the program stopped (" in text and "only 3 will do" in text


def test_with_nothing_given_per_device_there_is_nothing_to_change_and_it_says_so():
    run = World(2).run(lambda dev: dev.hold("x", X3) if dev.rank == 0 else None)
    report = check(run, Reference.of(lambda dev: dev.hold("x", X3)), isolation=True)
    assert report.isolation_runs == 0 and any("isolation not checked" in n for n in report.notes)


def test_isolation_needs_a_simulated_run_and_says_so():
    run = World(2).run(student_split, PerDevice({0: X3}))
    with pytest.raises(TypeError, match="give it the RunResult of World"):
        check(run.trace, Reference.of(seeds.model, X3), isolation=True)


# ---- large worlds: groups of devices, at most N+1 runs ----------------------------------------------------------
@pytest.mark.parametrize("n", [2, 3, 4, 5, 7, 8, 16, 32, 100])
def test_the_plan_splits_every_ordered_pair_of_devices_in_at_most_n_runs(n):
    groups = plan(n, list(range(n)))
    assert len(groups) <= n
    for i, j in itertools.permutations(range(n), 2):
        assert any(i in g and j not in g for g in groups), (i, j)
    if n >= 8:
        assert len(groups) == 2 * (n - 1).bit_length()


def test_a_32_device_ring_passes_in_eleven_runs_and_one_smuggler_among_32_is_named():
    xs = [np.full(4, float(r + 1)) for r in range(32)]
    report = check(
        World(32).run(_ring_sum, PerDevice(xs)), Reference.of(_ring_model(xs)), isolation=True, own_names=True
    )
    assert not report.leaks and report.isolation_runs == 10, report.text()

    store = {}

    def ring_and_a_peek(dev, x):
        if dev.rank == 5:
            store[5] = x
        total = _ring_sum(dev, x)
        return total + store[5] if dev.rank == 17 else total  # x itself, from the dict

    report = check(World(32).run(ring_and_a_peek, PerDevice(xs)), Reference.of(_ring_model(xs)), isolation=True)
    assert [v.rank for v in report.leaks] == [17]
    assert "device 17's result depends on x, which only device 5 holds" in words(report.text())


def test_a_differential_of_named_inputs_changes_only_what_one_device_is_given_alone():
    x = np.arange(8.0).reshape(2, 4)
    split = Split(given={"X": {0: np.s_[:, 0:3], 1: np.s_[:, 2:4]}})  # column 2 is given to both

    seen = []

    def start_with(inputs):
        seen.append(inputs["X"].copy())
        return World(2).start(lambda dev: None)

    diff = Differential.of_inputs(2, {"X": x}, split, start_with)
    assert diff.own == {0: ("X (columns 0:3)",), 1: ("X (columns 2:4)",)}
    with diff.started(frozenset([0])) as engine:
        engine.finish()
    changed = seen[0] != np.arange(8.0).reshape(2, 4)
    assert changed[:, 0:2].all() and not changed[:, 2:].any()  # column 2 is not device 0's alone
    assert np.array_equal(x, np.arange(8.0).reshape(2, 4))  # put back after the run


# ---- every collective and every way to receive: what crosses in messages is never accused -----------------------
def _collective(kind, algorithm):
    def program(dev, x):
        p = dev.world_size
        if kind == "all_reduce":
            out = dev.all_reduce(x, algorithm=algorithm)
        elif kind == "reduce_scatter":
            out = dev.reduce_scatter(x, algorithm=algorithm)
        elif kind == "all_gather":
            out = dev.all_gather(x, algorithm=algorithm)
        elif kind == "broadcast":
            out = dev.broadcast(x, src=1, algorithm=algorithm)
        elif kind == "reduce":
            out = dev.reduce(x, dst=2, algorithm=algorithm)
        elif kind == "scatter":
            out = dev.scatter(list(np.split(x, p)) if dev.rank == 0 else None, src=0, algorithm=algorithm)
        elif kind == "gather":
            out = dev.gather(x, dst=3, algorithm=algorithm)
        else:
            out = dev.all_to_all(list(np.split(x, p)), algorithm=algorithm)
        return dev.compute("out", lambda *v: np.concatenate([np.ravel(a) for a in v]) if v else None, *_arrays(out))

    return program


def _arrays(out):
    if out is None:
        return []
    return list(out) if isinstance(out, (list, tuple)) else [out]


COLLECTIVES = [
    ("all_reduce", "ring"), ("all_reduce", "halving_doubling"), ("all_reduce", "tree"), ("all_reduce", "direct"),
    ("reduce_scatter", "ring"), ("reduce_scatter", "halving_doubling"), ("reduce_scatter", "direct"),
    ("all_gather", "ring"), ("all_gather", "halving_doubling"), ("all_gather", "direct"),
    ("broadcast", "tree"), ("broadcast", "direct"), ("reduce", "tree"), ("reduce", "direct"),
    ("scatter", "tree"), ("scatter", "direct"), ("gather", "tree"), ("gather", "direct"),
    ("all_to_all", "direct"), ("all_to_all", "pairwise"),
]  # fmt: skip


@pytest.mark.parametrize("kind, algorithm", COLLECTIVES)
def test_no_collective_is_taken_for_data_outside_messages(kind, algorithm):
    rng = np.random.default_rng(3)
    xs = [rng.normal(size=8) for _ in range(4)]
    run = World(4).run(_collective(kind, algorithm), PerDevice(xs))
    report = check(run, Reference.of(lambda dev: None), isolation=True, own_names=True)
    assert not report.leaks and report.isolation_runs == 4, report.text()


@pytest.mark.parametrize("send_mode", ["eager", "rendezvous"])
def test_irecv_and_wait_and_rendezvous_sends_are_not_accused(send_mode):
    def exchange(dev, x):
        other = 1 - dev.rank
        req = dev.irecv(src=other, shape=x.shape, dtype=x.dtype)
        if dev.rank == 0:
            dev.send(x, dst=other)
            got = dev.wait(req)
        else:
            got = dev.wait(req)
            dev.send(x, dst=other)
        return dev.compute("sum", np.add, x, got)

    run = World(2, send_mode=send_mode).run(exchange, PerDevice([np.arange(3.0), np.ones(3)]))
    report = check(run, Reference.of(lambda dev: None), isolation=True, own_names=True)
    assert not report.leaks and report.isolation_runs == 2, report.text()


def test_a_path_that_a_shared_value_decides_is_outside_messages_too():
    store = {}

    def branches_on_a_dict(dev, x):  # device 1 takes another branch when device 0's x is negative
        if dev.rank == 0:
            store["sign"] = float(np.sign(x[0]))
            dev.send(dev.compute("A", seeds.stage_a, dev.hold("x", x)), dst=1)
            return None
        a = dev.recv(src=0, shape=(1,), dtype=np.float64, name="A")
        if store["sign"] < 0:
            a = dev.compute("flipped", np.negative, a)
        return dev.compute("B", seeds.stage_b, a)

    x = np.array([3.0])
    report = check(World(2).run(branches_on_a_dict, PerDevice({0: x})), Reference.of(seeds.model, x), isolation=True)
    assert report.verdict == "FAILED", report.text()
    assert "the steps device 1 takes (from its B on) depends on x, which only device 0 holds" in words(report.text())


def test_an_input_that_shares_memory_with_another_is_changed_in_a_copy():
    whole = np.arange(8.0)
    inputs = {"X": whole[:4], "Y": whole[4:], "Z": whole}  # Z is every device's, and X's memory too
    split = Split(given={"X": {0: np.s_[0:4]}, "Z": ALL})
    seen = []

    def start_with(new):
        seen.append({k: np.array(v) for k, v in new.items()})
        return World(2).start(lambda dev: None)

    diff = Differential.of_inputs(2, inputs, split, start_with)
    with diff.started(frozenset([0])) as engine:
        engine.finish()
    assert np.array_equal(whole, np.arange(8.0))  # Z (and so X's memory) untouched
    assert not np.array_equal(seen[0]["X"], np.arange(4.0)) and np.array_equal(seen[0]["Z"], np.arange(8.0))


def test_the_reruns_and_the_comparison_work_apart_as_a_grader_in_another_process_would_use_them():
    from simulator.checker.isolation import check_isolation, compared, control_run, reruns

    program = _seed_through({})
    run = World(2).run(program, PerDevice({0: X3}))
    diff = Differential.of_run(run)
    made = list(reruns(run, diff))  # where the program may run: the runs, nothing decided
    assert [group for group, _ in made] == [frozenset([0])]
    apart = compared(run, made, diff, control_run(diff))  # where the verdict is made: traces read, nothing run
    together = check_isolation(run, diff)
    assert [v.text for v in apart.leaks] == [v.text for v in together.leaks] and apart.leaks
    assert apart.runs == together.runs == 2  # the rerun, and the control asked for once something was found
