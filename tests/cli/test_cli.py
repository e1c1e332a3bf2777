"""The command line: demo, list, run, help."""

import subprocess
import sys

import pytest

from simulator.cli.main import main


def test_demo_walks_through_the_seeds(capsys):
    assert main(["demo", "--width", "120"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # lines are wrapped to the width: compare the words
    assert "message #0 from device 0 to device 1 (tag 0) carried [3.]" in out
    assert "wait-for cycle: device 0 -> device 1 -> device 0" in out
    assert "devices that finish an input alone: 0" in out and "devices that finish an input alone: 2" in out
    assert out.endswith("Every scenario behaved as expected.")


def test_list_and_run(capsys):
    assert main(["list"]) == 0
    assert "wrong-input" in capsys.readouterr().out
    assert main(["run", "wrong-input", "--step"]) == 0
    assert "in flight: #0 0->1=[3.]" in capsys.readouterr().out
    assert main(["run", "no-such-thing"]) == 2
    err = capsys.readouterr().err
    assert "choose one of:\n  split, wrong-input" in err and "3d-step" in err
    assert max(map(len, err.splitlines())) <= 120  # the names wrapped, at classroom width, each whole
    assert all(name in err.replace("\n  ", " ") for name in ("dp-sum-not-average", "ep-bug-combine-wrong-order"))
    assert not any(line.endswith("-") for line in err.splitlines())


def test_help_runs_as_a_module():
    out = subprocess.run(
        [sys.executable, "-m", "simulator", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "demo" in out and "run" in out and "list" in out


def test_close_names_get_a_suggestion(capsys):
    assert main(["run", "wrong_input"]) == 2
    assert "did you mean 'wrong-input'?" in capsys.readouterr().err


def test_filters_outside_the_run_are_errors_that_name_its_range(capsys):
    # split is a 2-device run of 5 events: a filter beyond that would show nothing, so it is refused
    for argv, message in [
        (["run", "split", "--devices", "9"], "--devices 9: the run has devices 0-1"),
        (["run", "split", "--devices", "1,9"], "--devices 1,9: the run has devices 0-1 (no device 9)"),
        (["run", "split", "--steps", "50:60"], "--steps 50:60: the run has steps 1-5"),
        (["run", "split", "--steps", "6"], "--steps 6: the run has steps 1-5"),
        (["timeline", "split", "--devices", "7"], "--devices 7: the run has devices 0-1"),
    ]:
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        assert captured.err.strip() == message and captured.out == "", argv


def test_a_step_range_that_overlaps_the_run_is_shown(capsys):
    assert main(["run", "split", "--steps", "3:60", "--devices", "1"]) == 0
    assert "showing 3 of 5 events (devices 1; steps 3 to 60)" in capsys.readouterr().out


def test_a_mistyped_flag_gets_the_flag_it_meant(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["whatif", "--model", "llama3-8b", "--tpp", "2"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "python -m simulator whatif: error: unrecognized arguments: --tpp 2" in err
    assert "did you mean --tp?" in err and "usage: python -m simulator whatif" in err


def test_an_unknown_word_points_at_the_commands_help(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["demo", "extra"])
    assert stop.value.code == 2
    assert "`python -m simulator demo --help` lists its options" in capsys.readouterr().err


def test_a_range_written_high_first_gets_the_range_to_write(capsys):
    with pytest.raises(SystemExit):
        main(["timeline", "split", "--devices", "1-0"])
    assert "devices '1-0': write a range lower rank first, e.g. 0-1" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "pointer"),
    [([], "start with `python -m simulator demo`"), (["export"], "`python -m simulator list` names them")],
)
def test_a_missing_argument_says_where_to_find_one(argv, pointer, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert pointer in capsys.readouterr().err


def test_the_timelines_key_keeps_within_the_columns_asked(capsys):
    assert main(["timeline", "pipeline-1f1b", "--columns", "50"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 50, max(lines, key=len)
    assert lines[1].startswith("device 0  ") and any("receiving" in line for line in lines)


def test_the_demo_keeps_within_a_narrow_terminal(capsys):
    assert main(["demo", "--brief", "--width", "60"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 60, max(lines, key=len)
