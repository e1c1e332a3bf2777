"""Bad input at the API's boundary gets a clear error naming what is wrong and the fix, never a result."""

import warnings

import numpy as np
import pytest

from simulator import RankError, SimulationError, World
from simulator.collectives import TAG_BASE
from simulator.core.errors import CollectiveMismatchError, EventLimitError, OpError, UnreceivedMessagesWarning


# ---- members of a group calling different collectives -------------------------------------------
@pytest.mark.parametrize(
    ("call0", "call1", "words"),
    [
        (lambda d, x: d.all_reduce(x), lambda d, x: d.all_gather(x), ("all_reduce(", "all_gather(")),
        (
            lambda d, x: d.reduce_scatter(x),
            lambda d, x: d.all_to_all([x[:1], x[1:]]),
            ("reduce_scatter(", "all_to_all("),
        ),
        (lambda d, x: d.all_reduce(x), lambda d, x: d.all_reduce(x, algorithm="tree"), ("'ring'", "'tree'")),
        (lambda d, x: d.all_reduce(x), lambda d, x: d.all_reduce(x, op="max"), ("op='sum'", "op='max'")),
        (lambda d, x: d.broadcast(x, src=0), lambda d, x: d.broadcast(x, src=1), ("src=0", "src=1")),
        (lambda d, x: d.all_reduce(x, group=(0, 1)), lambda d, x: d.all_reduce(x, group=(1, 0)), ("(0, 1)", "(1, 0)")),
    ],
)
@pytest.mark.parametrize("algorithm_order", ["rank 0 first", "rank 1 first"])
def test_different_collective_calls_are_named_on_both_devices(call0, call1, words, algorithm_order):
    first, second = (call0, call1) if algorithm_order == "rank 0 first" else (call1, call0)

    def program(dev):
        x = np.arange(2.0) + dev.rank
        return (first if dev.rank == 0 else second)(dev, x)

    with pytest.raises(CollectiveMismatchError) as err:
        World(2).run(program)
    text = str(err.value)
    a, b = words if algorithm_order == "rank 0 first" else words[::-1]
    assert "device 0 calls" in text and "device 1 calls" in text
    first_call, second_call = text.index("device 0 calls"), text.index("device 1 calls")
    assert first_call < text.index(a, first_call) < second_call < text.index(b, second_call)
    assert "same collective calls, in the same order" in text


def test_the_tree_all_reduce_against_an_all_gather_never_returns_a_result():
    def program(dev):
        x = np.array([1.0, 2.0])
        return dev.all_reduce(x, algorithm="tree") if dev.rank == 0 else dev.all_gather(x, algorithm="ring")

    with pytest.raises(CollectiveMismatchError, match="device 0 calls all_reduce"):
        World(2).run(program)


def test_a_later_mismatch_names_the_call_number():
    def program(dev):
        dev.barrier()
        return dev.all_reduce(np.ones(2)) if dev.rank else dev.reduce(np.ones(2), dst=0)

    with pytest.raises(CollectiveMismatchError, match=r"call #1 among them"):
        World(2).run(program)


# ---- tags and peers ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("tag", "error", "words"),
    [
        (-1, ValueError, "tags are >= 0"),
        (1.0, TypeError, "a tag is an int"),
        ("1", TypeError, "a tag is an int"),
        (True, TypeError, "a tag is an int"),
        (("a", 1), TypeError, "a tag is an int"),
        (TAG_BASE, ValueError, "reserved for the collectives"),
        (TAG_BASE + 7, ValueError, "use a tag below 1,073,741,824"),
    ],
)
@pytest.mark.parametrize("side", ["send", "recv"])
def test_bad_tags_are_refused_with_the_fix(tag, error, words, side):
    def program(dev):
        if dev.rank == 0:
            dev.send(np.ones(1), dst=1, tag=tag if side == "send" else 0)
        else:
            dev.recv(src=0, tag=tag if side == "recv" else 0)

    with pytest.raises(RankError) as err, warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreceivedMessagesWarning)
        World(2).run(program)
    assert isinstance(err.value.__cause__, error)
    assert words in str(err.value) and f"{side}(tag=" in str(err.value)


def test_a_user_tag_in_the_reserved_range_cannot_corrupt_a_later_all_reduce():
    def program(dev):
        if dev.rank == 0:
            dev.send(np.array([100.0]), dst=1, tag=TAG_BASE + 1)
        return dev.all_reduce(np.array([1.0 + dev.rank]))

    with pytest.raises(RankError, match="reserved for the collectives"):
        World(4).run(program)


def test_numpy_integers_work_as_ranks_and_tags():
    def program(dev):
        if dev.rank == 0:
            dev.send(np.ones(1), dst=np.int64(1), tag=np.int32(3))
        else:
            return dev.recv(src=np.int64(0), tag=np.int64(3))

    np.testing.assert_array_equal(World(np.int64(2)).run(program).outputs[1], [1.0])


@pytest.mark.parametrize("peer", ["1", 1.0, True, None])
def test_a_peer_that_is_not_a_rank_is_named(peer):
    with pytest.raises(RankError, match=r"send\(dst=.*must name a device by its rank, an int in 0\.\.1"):
        World(2).run(lambda dev: dev.send(np.ones(1), dst=peer) if dev.rank == 0 else None)


# ---- what a message can carry -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("hello", "not strings, bytes or objects"),
        (b"bytes", "not strings, bytes or objects"),
        (np.array(["a", "b"]), "not strings, bytes or objects"),
        ({"a": 1}, "not strings, bytes or objects"),
        (np.ma.masked_array([1.0, 2.0], mask=[0, 1]), "masked array; a message would drop its mask"),
    ],
)
def test_messages_carry_numbers_only(value, words):
    with pytest.raises(RankError, match=words):
        World(2).run(lambda dev: dev.send(value, dst=1) if dev.rank == 0 else None)


def test_a_receiver_cannot_make_a_payload_writable_and_change_the_trace():
    def program(dev):
        if dev.rank == 0:
            dev.send(np.arange(3.0), dst=1)
            return None
        got = dev.recv(src=0)
        with pytest.raises(ValueError, match="cannot set WRITEABLE flag"):
            got.setflags(write=True)
        return got

    result = World(2).run(program)
    np.testing.assert_array_equal(result.trace.messages[0].payload, [0.0, 1.0, 2.0])


def test_writing_into_a_value_a_device_was_given_says_what_to_do_instead():
    def in_op(dev):
        x = dev.hold("x", np.ones(3))

        def bump(v):
            v += 1
            return v

        return dev.compute("y", bump, x)

    def in_program(dev):
        if dev.rank == 0:
            dev.send(np.ones(3), 1)
        else:
            dev.recv(0)[0] = 5

    with pytest.raises(OpError, match=r"read-only.*\n.*\n.*read-only .*\n  make a new array instead \(y = x \+ 1"):
        World(1).run(in_op)
    with pytest.raises(RankError, match=r"device 1 raised ValueError: .*read-only\n.*\n  make a new array instead"):
        World(2).run(in_program)


def test_op_outputs_and_held_values_stay_read_only_for_good():
    def program(dev):
        y = dev.compute("y", lambda: np.arange(3.0))
        w = dev.hold("w", [1.0, 2.0])
        for arr in (y, w):
            with pytest.raises(ValueError, match="cannot set WRITEABLE flag"):
                arr.setflags(write=True)

    World(1).run(program)


# ---- ops ---------------------------------------------------------------------------------------
def test_an_op_that_raises_is_named_with_its_inputs():
    def program(dev):
        return dev.compute("Y", np.matmul, np.ones((2, 4)), np.ones((3, 6)))

    with pytest.raises(OpError) as err:
        World(2).run(program)
    text = str(err.value)
    assert "op 'Y' on device 0 raised ValueError: matmul" in text
    assert "its inputs: (2, 4) float64, (3, 6) float64" in text
    assert isinstance(err.value.__cause__, ValueError)


@pytest.mark.parametrize("seconds", [float("inf"), float("nan"), -1.0])
def test_an_op_duration_must_be_finite_and_not_negative(seconds):
    with pytest.raises(RankError, match=r"seconds=.*give a finite duration >= 0"):
        World(1).run(lambda dev: dev.compute("A", lambda: 1.0, seconds=seconds))


@pytest.mark.parametrize("flops", [float("inf"), float("nan"), -5])
def test_an_op_flop_count_must_be_finite_and_not_negative(flops):
    with pytest.raises(RankError, match=r"flops=.*give a finite count >= 0"):
        World(1).run(lambda dev: dev.compute("A", lambda: 1.0, flops=flops))


# ---- programs that never stop, and programs that are not plain functions -------------------------
def test_a_program_that_sends_forever_ends_with_the_device_named():
    def program(dev):
        if dev.rank == 0:
            while True:
                dev.send(np.ones(1), dst=1)

    with pytest.raises(EventLimitError, match=r"limit: device 0 sent 1,000 of the 1,000 messages"):
        World(2, max_events=1_000).run(program)


def test_a_program_that_computes_forever_ends_too():
    def program(dev):
        while True:
            dev.compute("spin", lambda: 0.0, seconds=1e-9)

    with pytest.raises(EventLimitError, match=r"max_events=") as err:
        World(2, max_events=500).run(program)
    assert "recorded 500 events" in str(err.value)


def test_the_default_event_limit_is_generous_and_depends_on_payloads():
    assert World(2).max_events == 2_000_000
    assert World(2, keep_payloads=False).max_events == 50_000_000
    with pytest.raises(ValueError, match="max_events"):
        World(2, max_events=0)


def _gen_program(dev):
    yield dev.send(np.ones(1), dst=1)


async def _async_program(dev):
    return dev.rank


@pytest.mark.parametrize("program", [_gen_program, _async_program])
def test_generator_and_async_programs_are_refused(program):
    with pytest.raises(TypeError, match="write it as a plain function"):
        World(2).run(program)


def test_ctrl_c_in_a_program_is_not_wrapped():
    def program(dev):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        World(2).run(program)
    try:
        World(2).run(program)
    except Exception:  # noqa: BLE001 - the point: `except Exception` must not swallow Ctrl-C
        pytest.fail("KeyboardInterrupt was caught by except Exception")
    except KeyboardInterrupt:
        pass


def test_an_irecv_that_got_its_message_but_was_never_waited_on_is_reported():
    def program(dev):
        if dev.rank == 0:
            dev.send(np.ones(2), dst=1, tag=5)
        else:
            dev.irecv(src=0, tag=5)

    with pytest.warns(UnreceivedMessagesWarning, match=r"never waited on:\n  device 1: irecv\(src=0, tag=5\)"):
        World(2).run(program)


# ---- the world ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("size", "error"), [(True, TypeError), (2.0, TypeError), ("2", TypeError), (0, ValueError)])
def test_world_sizes_are_counted_in_whole_devices(size, error):
    with pytest.raises(error, match="World\\(size="):
        World(size)


def test_world_size_has_a_bound():
    with pytest.raises(ValueError, match="from 1 to 65,536 devices"):
        World(10**7)


def test_every_error_here_is_a_simulation_error_or_a_plain_type_or_value_error():
    assert issubclass(CollectiveMismatchError, SimulationError)
    assert issubclass(OpError, SimulationError) and issubclass(EventLimitError, SimulationError)


@pytest.mark.parametrize("call", ["all_reduce", "reduce_scatter"])
def test_an_average_of_integers_is_refused_with_the_fix(call):
    with pytest.raises(RankError, match=r"op='avg'\) needs floating-point values .* got int64: pass x.astype\(float\)"):
        World(2).run(lambda dev: getattr(dev, call)(np.arange(4), op="avg"))
