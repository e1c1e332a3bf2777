"""Text views a class reads: values in full or summarised, parts in words, filters, lines within a width."""

import numpy as np
import pytest

from simulator.cli.main import main
from simulator.cli.show import EventFilter, parse_devices, parse_steps
from simulator.core.values import ValueStyle, part_text, summary, value_lines, value_text
from simulator.teach.examples import get
from simulator.tensors import FlatSlice
from simulator.views.stepper import Stepper


def test_small_arrays_in_full_large_ones_summarised_with_a_norm():
    a = np.arange(16.0).reshape(4, 4)
    assert value_lines(a) == ["[[0., 1., 2., 3.], [4., 5., 6., 7.], [8., 9., 10., 11.], [12., 13., 14., 15.]]"]
    assert value_lines(a, matrix=True) == [
        "[[ 0.,  1.,  2.,  3.],",
        " [ 4.,  5.,  6.,  7.],",
        " [ 8.,  9., 10., 11.],",
        " [12., 13., 14., 15.]]",
    ]
    big = np.ones((10, 10))
    assert value_text(big) == "(10, 10) float64 [1., 1., 1., 1., ...] norm 10"
    assert value_text(big, 1000, ValueStyle(max_elements=100)).startswith("[[1., 1.")
    assert summary(np.zeros(0)) == "(0,) float64 (empty)"


def test_value_text_stays_within_its_width():
    a = np.linspace(0, 1, 40)
    for width in (20, 50, 120):
        assert len(value_text(a, width)) <= width
        assert all(len(line) <= width for line in value_lines(a.reshape(5, 8), width, matrix=True))


def test_parts_in_words():
    assert part_text(FlatSlice(6, 12)) == "elements 6-11 (flattened)"
    assert part_text(FlatSlice(3, 4)) == "element 3 (flattened)"
    assert part_text(np.s_[:, 0:3]) == "[:, 0:3]"
    assert part_text(None) is None


def test_megatron_steps_show_every_matrix_as_numbers_on_each_device(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    assert main(["run", "tp-megatron-mlp", "--step"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 120
    for rank, (a_part, b_part) in enumerate([("[0:4, 0:4]", "[0:4, 0:4]"), ("[0:4, 4:8]", "[4:8, 0:4]")]):
        block = [s for s in out.split("\nstep ") if f"device {rank} " in s.split("\n")[0]]
        text = "\n".join(block)
        assert "X [0:2, 0:4]=[[ 0.  ,  0.  ,  0.5 ,  1.  ]," in text  # X, on both devices
        assert f"A {a_part}=[[" in text and f"B {b_part}=[[" in text
        assert f"Z.partial[{rank}]=[[" in text  # each device's partial sum, as numbers
    assert "Z.partial[0]=[[-0.0141, -0.0673,  0.0361,  0.0673]," in out
    assert "all_reduce#0 ring step 0 chunk 1" in out and "tag 10737" not in out  # named, not a raw tag


def test_step_filters_by_device_steps_and_kind(capsys):
    assert main(["run", "tp-megatron-mlp", "--step", "--devices", "1", "--steps", "11:13", "--kinds", "recv"]) == 0
    out = capsys.readouterr().out
    assert "showing 3 of 29 events (devices 1; steps 11 to 13; kinds recv)" in out
    assert out.count("\nstep ") == 3 and "device 0 |" not in out


def test_bad_filters_are_refused_with_the_reason(capsys):
    with pytest.raises(SystemExit):
        main(["run", "split", "--kinds", "bogus"])
    assert "no event kind 'bogus': choose from send, recv, op, hold, free" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["run", "split", "--steps", "5:2"])
    assert "the last step comes before the first" in capsys.readouterr().err
    with pytest.raises(ValueError, match="write ranks like 0,2"):
        parse_devices("zero")
    assert parse_devices("0,2-3") == {0, 2, 3} and parse_steps("10:") == (10, None) and parse_steps("7") == (7, 7)


def test_run_log_fits_120_columns_and_shows_microbatches(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # even in a wide terminal, lines stay readable
    assert main(["run", "pipeline-1f1b"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(map(len, lines)) <= 120
    assert "device 3  ...............F0===B0========F1===B1========F2===B2========F3===B3====" in out
    assert "Fn = forward, Bn = backward of microbatch n" in out
    assert any("h1.mb3" in line for line in lines)


def test_width_option_and_filtered_log(capsys):
    assert main(["run", "pipeline-1f1b", "--width", "80", "--devices", "3", "--kinds", "op"]) == 0
    out = capsys.readouterr().out
    assert max(map(len, out.splitlines())) <= 80
    events = [line for line in out.splitlines() if "t=" in line and "us  " in line]
    assert events and all(" op    device 3 " in line for line in events)


def test_snapshot_modes_and_errors():
    stepper = Stepper(get("tp-row").run().result.trace)
    snap = stepper.goto(8)
    every, new, names = (snap.render(values=v) for v in ("all", "new", "names"))
    assert every.count("=[") > new.count("=[") >= names.count("=[")
    with pytest.raises(ValueError, match="choose one of"):
        snap.render(values="some")
    only1 = snap.render(devices=[1])
    assert "device 0 |" not in only1 and "device 1 |" in only1


def test_event_filter_matches_messages_on_both_ends():
    split = get("split").run().result.trace
    f = EventFilter(devices=frozenset({1}))
    chosen = [k for i, (k, rec) in enumerate(split.events, 1) if f.matches(i, k, rec)]
    assert chosen == ["send", "recv", "op"]
    with pytest.raises(ValueError, match="no event kind"):
        EventFilter(kinds=frozenset({"message"}))


def test_demo_shows_every_small_value_at_every_step(capsys):
    assert main(["demo", "--width", "100"]) == 0
    out = capsys.readouterr().out
    assert "  device 0 | x=[3.]  A=[7.]\n  device 1 | A=[7.]  B=[49.]" in out
    assert max(map(len, out.splitlines())) <= 100


def test_timeline_command_fits_its_columns_and_filters(capsys):
    assert main(["timeline", "pipeline-1f1b", "--columns", "60", "--devices", "0,1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line[:8] for line in out[1:3]] == ["device 0", "device 1"] and not any("device 2" in x for x in out)
    assert max(len(line) for line in out[:3]) <= 60
    assert main(["timeline", "pipeline-1f1b", "--window", "8:12", "--columns", "70"]) == 0
    grid = capsys.readouterr().out.splitlines()
    assert grid[0].startswith("time (us) 8")


def test_a_students_pipeline_keeps_its_microbatch_numbers_in_the_grid():
    from simulator import World
    from simulator.parallel.schedules.labels import fit
    from simulator.views.textgrid import text_timeline

    def student(dev):  # stage r of a 4-stage pipeline, ops named after the stage and the microbatch
        for i in range(4):
            h = np.full(2, float(i)) if dev.rank == 0 else dev.recv(dev.rank - 1, tag=i, shape=(2,), dtype=np.float64)
            y = dev.compute(f"S{dev.rank}.mb{i}", lambda h: h + 1, h)
            if dev.rank < dev.world_size - 1:
                dev.send(y, dev.rank + 1, tag=i)

    grid = text_timeline(World(4).run(student)).splitlines()
    assert grid[1].startswith("device 0  S0.0=S0.1=S0.2=S0.3=")  # not S, S, S, S
    assert "S3.3=" in grid[4] and "-" in grid[4]  # every op visible, and the message's latency
    assert [fit("S0.mb12", n) for n in (7, 5, 3, 2, 1)] == ["S0.mb12", "S0.12", "S12", "12", "S"]
    assert fit("h2.mb3", 2) == "h3" and fit("loss", 2) == "lo"


def _fits(text: str, width: int) -> bool:
    return all(len(line) <= width for line in text.splitlines())


def test_a_long_schedule_grid_comes_in_bands_of_time_that_fit_and_lose_no_cell():
    from simulator.parallel.schedules import make_schedule

    zbv = make_schedule("zbv", 4, 8)
    wide, banded = zbv.grid(width=1000), zbv.grid()
    assert "time units" not in wide and _fits(banded, 110) and not _fits(wide, 120)
    assert banded.count("time units") == 3  # 51 units, 17 to a band: no band of one unit at the end
    for r in range(4):
        cells = [line.split("|")[1].split() for line in banded.splitlines() if line.startswith(f"rank {r} |")]
        assert sum(cells, []) == wide.splitlines()[r].split("|")[1].split()


def test_a_schedules_actions_wrap_within_110_columns():
    from simulator.parallel.schedules import add_comms, make_schedule

    text = str(add_comms(make_schedule("1f1b", 3, 4)))
    assert _fits(text, 110) and text.count("rank ") == 3
    assert text.split().count("1SEND_B3") == 1 and "2SEND_B3" in text.split()


def test_a_step_view_fits_its_width_and_keeps_every_word():
    from simulator import view

    v = view.show("tp-row", step=12)
    unbounded, fitted = v.state().render(width=10_000), v.state().render()
    assert _fits(fitted, 110) and not _fits(unbounded, 120)
    assert fitted.split() == unbounded.split()
    assert fitted.splitlines()[4].startswith(" " * len("  device 1 | ")) and "Y.partial[0] elements 6-11" in fitted
    assert "(all_reduce#0 ring step 0 chunk 0)" in fitted  # an aside in parentheses stays on one line


def test_a_message_table_puts_a_payload_that_does_not_fit_on_the_line_below():
    from simulator.checker.comm_summary import message_table

    trace = get("tp-row").run().result.trace
    table, wide = message_table(trace, "all_reduce"), message_table(trace, "all_reduce", width=200)
    assert _fits(table, 110) and len(table.splitlines()) == 2 * len(wide.splitlines()) == 8
    assert table.split() == wide.split()
    assert table.splitlines()[1].strip() == "[-0.75, 1.25, 1.1875, 0.3125, -0.3125, -1.125]"


def test_a_failed_checks_count_of_later_differences_does_not_claim_a_cause():
    report = get("wrong-input").run().report
    assert "3 more values differ after it: fix this one first, the others often follow from it" in report.text(None)
    assert "downstream" not in str(report)


def test_wrapping_never_splits_a_short_call_written_in_the_text():
    from simulator.core.values import fit_lines

    text = 'device 1 received an unnamed message: write dev.recv(0, name="A") to say which value it is, then rerun'
    for width in range(40, 100):
        fitted = fit_lines(text, width)
        assert any('dev.recv(0, name="A")' in line for line in fitted.splitlines()), width
        assert fitted.split() == text.split() and _fits(fitted, width)


def test_found_and_expected_values_print_in_one_number_format():
    from simulator.checker.compare import show_pair

    assert show_pair(np.array([1e-9, 2.0]), np.array([0.0, 2.0])) == ("[1.e-09, 2.e+00]", "[0.e+00, 2.e+00]")
    assert show_pair(np.array([3.0]), np.array([7.0])) == ("[3.]", "[7.]")  # as NumPy writes them
    assert show_pair(np.array([1, 2]), np.array([1.0, 2.0])) == ("[1, 2]", "[1., 2.]")  # a dtype shows as it is

    def program(dev):  # a student's stage that adds a tiny error
        return dev.compute("y", lambda: np.array([1e-3, 2.0]))

    def model(ref):
        return ref.hold("y", np.array([0.0, 2.0]))

    from simulator import World
    from simulator.checker import Reference, check

    report = check(World(1).run(program), Reference.of(model))
    assert "computed [1.e-03, 2.e+00], but y is [0.e+00, 2.e+00] on one device" in report.text(None)


def test_wrapping_keeps_a_number_with_its_unit():
    from simulator.core.values import fit_lines

    text = "device 1 computes the attention scores of its own half of every sequence, taking 0.5032 us and 64 bytes"
    for width in range(30, 100):
        lines = fit_lines(text, width).splitlines()
        assert any("0.5032 us" in line for line in lines) and any("64 bytes" in line for line in lines), width


def test_a_schedule_in_a_notebook_is_one_short_line_or_its_wrapped_actions():
    from simulator.parallel.schedules import make_schedule

    zbv = make_schedule("zbv", 4, 8)
    assert repr(zbv) == "<Schedule ZB-V: 4 ranks, 8 stages, 8 microbatches>"
    printed = []
    zbv._repr_pretty_(type("P", (), {"text": lambda self, t: printed.append(t)})(), False)
    assert printed == [str(zbv)] and _fits(printed[0], 110)


def test_the_command_lines_help_and_list_stay_within_120_columns(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    for argv in (["--help"], ["run", "--help"], ["calibrate", "--help"], ["timeline", "--help"], ["html", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        out = capsys.readouterr().out
        assert _fits(out, 120), argv
    monkeypatch.setenv("COLUMNS", "80")
    with pytest.raises(SystemExit):
        main(["--help"])
    narrow = capsys.readouterr().out
    assert _fits(narrow, 80) and narrow.count("wrong-input") == 2  # a scenario's name is not broken at its hyphen
    main(["list"])
    listed = capsys.readouterr().out
    assert _fits(listed, 110) and "every sequence outside attention" in " ".join(listed.split())


def test_chosen_positions_print_as_a_list():
    assert part_text((slice(None), np.array([0, 1, 2, 3, 28, 29]), slice(None))) == "[:, [0, 1, 2, 3, 28, 29], :]"
