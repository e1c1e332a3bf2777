"""Writing files: whole or not at all, and every bad --out / bound refused by the parser with a clear message."""

import json
import os
import sys

import pytest

from simulator.cli.main import build_parser, main
from simulator.teach.examples import get
from simulator.views.plot import chrome_trace


def usage_error(argv, capsys) -> str:
    """Run the command line, expect a usage error (exit 2, no traceback); return what it printed."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_a_failed_export_leaves_the_old_file_intact(tmp_path, monkeypatch):
    path = tmp_path / "split.trace.json"
    run = get("split").run().result
    chrome_trace.write_chrome_trace(run, path)
    before = path.read_bytes()

    real_export = chrome_trace._export

    def failing_export(*args):
        events, info, other = real_export(*args)

        def some_then_fail():
            yield next(iter(events))
            raise KeyboardInterrupt  # Ctrl-C half-way through writing

        return some_then_fail(), info, other

    monkeypatch.setattr(chrome_trace, "_export", failing_export)
    with pytest.raises(KeyboardInterrupt):
        chrome_trace.write_chrome_trace(run, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["split.trace.json"]  # the temporary file is gone too


def test_a_window_that_ends_before_it_starts_is_named_in_microseconds(capsys):
    err = usage_error(["timeline", "split", "--window", "5:2"], capsys)
    assert "5:2: the end (2 us) must come after the start (5 us), e.g. 2:5" in err
    assert "the end (3 us) must come after the start (3 us)" in usage_error(
        ["timeline", "split", "--window", "3:3"], capsys
    )


def test_export_out_must_be_a_writable_file(tmp_path, capsys):
    assert "an empty file name" in usage_error(["export", "split", "--out", ""], capsys)
    assert f"{tmp_path} is a folder; give a file name inside it, e.g. {tmp_path / 'run.trace.json'}" in usage_error(
        ["export", "split", "--out", str(tmp_path)], capsys
    )
    assert f"e.g. {tmp_path / 'page.html'}" in usage_error(["html", "split", "-o", str(tmp_path)], capsys)
    a_file = tmp_path / "a.txt"
    a_file.write_text("x")
    assert f"{a_file} is a file, not a folder" in usage_error(
        ["export", "split", "--out", str(a_file / "x.json")], capsys
    )
    assert "--out: an empty folder name" in usage_error(["figures", "--out", ""], capsys)
    assert f"{a_file} is a file, not a folder; give a folder name" in usage_error(
        ["figures", "--out", str(a_file)], capsys
    )
    # a missing folder is made, as before
    assert main(["export", "split", "--out", str(tmp_path / "new" / "split.json")]) == 0


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root may write anywhere")
def test_a_folder_without_write_permission_is_refused(tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert "no permission to write into" in usage_error(
            ["export", "split", "--out", str(locked / "x.json")], capsys
        )
    finally:
        locked.chmod(0o700)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_write_that_fails_after_the_checks_is_a_message_not_a_traceback(capsys):
    # /proc passes the permission check as root but refuses every new file
    assert main(["export", "split", "--out", "/proc/simulator-test/split.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cannot write /proc/simulator-test") and "choose another --out" in err


@pytest.mark.parametrize("width", ["0", "-3", "10001", "1000000000", str(10**26), "1e26", "wide"])
def test_timeline_width_is_bounded(width, capsys):
    err = usage_error(["timeline", "split", "--width", width], capsys)
    assert "--width" in err and (
        "out of range: give a whole number from 1 to 10,000" in err or "not a whole number" in err
    )


def test_timeline_width_at_the_bound_works(capsys):
    assert main(["timeline", "split", "--width", "10000"]) == 0
    assert "device 1" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, words",
    [
        (["export", "split", "--max-events", "0"], "--max-events: 0 is out of range: give a whole number from 1"),
        (["calibrate", "--ranks", "1"], "--ranks: 1 is out of range: give a whole number from 2 to 64"),
        (["calibrate", "--repeats", "0"], "--repeats: 0 is out of range"),
        (["calibrate", "--out", ""], "--out: an empty file name"),
    ],
)
def test_other_bounds_are_usage_errors(argv, words, capsys):
    assert words in usage_error(argv, capsys)


def test_text_timeline_refuses_a_grid_too_wide():
    from simulator.views.textgrid import text_timeline

    run = get("split").run().result
    with pytest.raises(ValueError, match="give at least one column and at most 10,000"):
        text_timeline(run, 10**9)
    with pytest.raises(ValueError, match="at most 10,000 fit. Give a longer dt"):
        text_timeline(run, dt=run.trace.end_time / 10**7)


@pytest.mark.parametrize(
    "argv",
    [
        ["export", "split", "--out"],
        ["html", "split", "-o"],
        ["figures", "--out"],
        ["calibrate", "--out"],
    ],
)
@pytest.mark.parametrize("where", ["{long}", "{tmp}/{long}/x.json"])
def test_a_file_name_too_long_is_a_usage_error_naming_it(argv, where, tmp_path, capsys):
    out = where.format(long="a" * 300, tmp=tmp_path)
    err = usage_error([*argv, out], capsys)
    assert "File name too long" in err and f"({len(out)} characters)" in err and "Traceback" not in err


@pytest.mark.parametrize("window", ["1e308:1e309", "inf:", ":nan", "-inf:2", "1e301:"])
def test_a_window_past_finite_times_is_a_usage_error(window, capsys):
    err = usage_error(["timeline", "split", f"--window={window}"], capsys)
    assert f"{window}: give finite times in microseconds, e.g. 2:10" in err


def test_text_timeline_refuses_an_infinite_window():
    from simulator.views.textgrid import text_timeline

    run = get("split").run().result
    with pytest.raises(ValueError, match="give finite times in seconds"):
        text_timeline(run, 40, window=(1e302, float("inf")))
    with pytest.raises(ValueError, match="a window this long cannot be drawn"):
        text_timeline(run, 40, window=(-1e308, 1e308))


def test_a_lone_surrogate_in_a_title_is_named_not_a_unicode_traceback(tmp_path):
    from simulator.teach.view import write_html

    with pytest.raises(ValueError, match=r"holds '\\udc80', a lone surrogate that UTF-8 cannot encode") as info:
        write_html("split", tmp_path / "x.html", title="loss \udc80 curve")
    assert not isinstance(info.value, UnicodeError) and "loss" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_every_command_that_writes_a_file_takes_dash_o(tmp_path):
    # `html wrong-input -o bug.html` is in the top-level help: a teacher then types -o for the trace too
    trace = tmp_path / "bug.trace.json"
    assert main(["export", "wrong-input", "-o", str(trace)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    assert {e["ph"] for e in events} >= {"M", "X", "s", "f"}
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    writers = [name for name, p in commands.items() if any("--out" in a.option_strings for a in p._actions)]
    assert {"html", "export", "figures", "explore", "memory", "calibrate"} <= set(writers)
    for name in writers:
        (out,) = [a for a in commands[name]._actions if "--out" in a.option_strings]
        assert "-o" in out.option_strings, name


def test_a_page_step_out_of_range_is_said_with_its_flag(tmp_path, capsys):
    assert main(["html", "wrong-input", "-o", str(tmp_path / "bug.html"), "--step", "99"]) == 2
    assert capsys.readouterr().err.strip() == "cannot write the page: --step 99: this run has steps 0 to 5"
    assert main(["html", "wrong-input", "-o", str(tmp_path / "bug.html"), "--first-event", "99"]) == 2
    assert "--first-event 99: the run has events 0 to 4" in capsys.readouterr().err
