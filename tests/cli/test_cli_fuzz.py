"""The command line under fuzzing: every subcommand, with bad, huge, negative and unicode arguments, ends with
an exit status and a message, never a traceback.

The arguments are drawn from the parser itself (every option of every subcommand, so a new command or option
is fuzzed too) and from pools of hostile values: numbers past every bound, NaN and infinities, negative
numbers, digits of other scripts, lone surrogates (what a non-UTF-8 file name becomes), empty strings,
names too long for the file system, devices, folders and standard output as output paths. A fixed table of
cases runs first, then hypothesis draws more (derandomized: the same cases on every run, fast enough for CI).
Commands that would measure real processes (``calibrate``) or draw every figure (``figures``) run with their
work replaced by a small write to the output they were given, and ``validate`` predicts two rows a set: their
argument handling is what is fuzzed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.core.files import write_text

cli = importlib.import_module("simulator.cli.main")  # (the package's name ``main`` is the function)

SCENARIOS = ["split", "wrong-input", "send-send-deadlock", "nope", "", "Split", "splït", "s\udcff", "x" * 5000]
NUMBERS = ["0", "-1", "-0", "1", "7", "1e309", "-1e309", "nan", "inf", "1e-320", "9" * 40, "1_000", "1,000", "٣", "3.5",
           "0x10", " 5 ", "\u00a0", "abc", ""]  # fmt: skip
TEXTS = ["", " ", "-", "--", "0-3", "3-0", "0,,2", "-5:3", "1e308:1e309", ":", "::", "a:b", "send,recv", "op,nope",
         "ü", "\udcff", "\x00", "x" * 10_000, "0-99999999999999999999", "2:", ":40", "10:1"]  # fmt: skip


def out_paths(tmp) -> list[str]:
    return ["-", "/dev/null", "/dev/full", "", " ", str(tmp), str(tmp / "x.json"), str(tmp / "new" / "d" / "ü.json"),
            "a" * 300, str(tmp / ("b" * 300) / "x"), str(tmp / "\udcff.html"), "/proc/nope/x.json",
            str(tmp / "x.json" / "y")]  # fmt: skip


def subcommands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in parser._actions if a.dest != "help"]


def values_for(action: argparse.Action, tmp) -> list[str]:
    if action.dest == "out":
        return out_paths(tmp)
    if action.dest == "scenario":
        return SCENARIOS
    if action.dest == "only":
        return ["nope", "ü", "\udcff", ""]  # never a real figure: building one is not what is fuzzed
    return [*(action.choices or ()), *NUMBERS, *TEXTS]


def argv_of(name: str, parser: argparse.ArgumentParser, picks: list[tuple[argparse.Action, str]]) -> list[str]:
    argv = [name]
    for action, value in picks:
        if not action.option_strings:
            argv.append(value)
        elif action.nargs == 0:
            argv.append(action.option_strings[0])
        else:
            argv.append(f"{action.option_strings[-1]}={value}")  # (= keeps a value that starts with "-" a value)
    return argv


@pytest.fixture
def light_work(monkeypatch):
    """calibrate and figures write to their output at once instead of measuring processes or drawing, and validate
    predicts two rows of each set instead of all 58 (tests/parallel/test_whatif_validate.py checks them all)."""
    from simulator.calibration import calibrate
    from simulator.teach import figures

    checks = importlib.import_module("simulator.parallel.whatif.validate")
    every_row = checks.validate
    monkeypatch.setattr(
        checks, "validate", lambda rows=None: every_row((checks.published_rows() if rows is None else rows)[:2])
    )

    def calibrated(ranks, backend, out, *rest):
        write_text(out, "{}\n")

    def built(out_dir, only=None, style="slide"):
        names = list(only or ())
        if any(n not in figures.registry() for n in names):
            raise KeyError(f"no figure named {names[0]!r}")
        return [write_text(f"{out_dir}/one.txt", "figure\n")]

    monkeypatch.setattr(calibrate, "main_calibrate", calibrated)
    monkeypatch.setattr(figures, "build_figures", built)


def run_cli(argv: list[str], capsys) -> None:
    """main(argv) ends with a status (returned, or a usage error's SystemExit), and says no traceback."""
    code = None
    try:
        code = cli.main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert code in (0, 1, 2), (argv, code, err[-2000:])
    assert "Traceback" not in err and "Traceback" not in out, (argv, err[-2000:])
    if code == 2:
        assert err.strip(), (argv, "an error with no message")


FIXED = [
    ["demo", "--width=1e309"], ["demo", "--width=-40"], ["list", "--nope"], [], ["nope"], ["\udcff"],
    ["run", "split", "--steps=3:1"], ["run", "split", "--devices=99"], ["run", "split", "--kinds=\udcff"],
    ["run", "split", "--max-elements=" + "9" * 50], ["run", "x" * 5000], ["run", "split", "--step", "--values=names"],
    ["html", "split", "--step=-1"], ["html", "split", "--step=" + "9" * 40, "-o", "-"], ["html", "split", "-o-"],
    ["html", "split", "--first-event=-99999999999999999999", "-o=/dev/null"], ["html", "split", "-o", "/dev/full"],
    ["export", "split", "--out=" + "a" * 300], ["export", "split", "--out=-"], ["export", "split", "--out=/dev/full"],
    ["export", "split", "--max-events=0"], ["timeline", "split", "--window=1e308:1e309"],
    ["timeline", "split", "--window=-1e299:1e299"], ["timeline", "split", "--width=0"],
    ["timeline", "split", "--devices=0-99999999999999999999"], ["figures", "--out=" + "a" * 300],
    ["figures", "nope", "--out=/dev/null"], ["figures", "--list", "--style=\udcff"],
    ["calibrate", "--ranks=1e309"], ["calibrate", "--out=/dev/full"], ["calibrate", "--out=-"],
    ["html", "split", "--max-events=--"], ["export", "split", "--max-events=--"],  # argparse reads "--" as no value
]  # fmt: skip


@pytest.mark.parametrize("argv", FIXED, ids=range(len(FIXED)))
def test_fixed_hostile_command_lines(argv, light_work, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # defaults such as split.trace.json land here
    run_cli(argv, capsys)


def test_every_subcommand_is_in_the_fuzz():
    # the fuzz draws from the parser: a command added later is fuzzed without touching this file
    assert {"demo", "list", "run", "html", "figures", "export", "timeline", "calibrate"} <= set(subcommands())


@pytest.mark.slow  # 150 drawn command lines
@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_fuzzed_command_lines(data, light_work, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    commands = subcommands()
    name = data.draw(st.sampled_from(sorted(commands)), label="command")
    parser = commands[name]
    every = options(parser)
    chosen = data.draw(st.lists(st.sampled_from(every), max_size=4, unique_by=id), label="options") if every else []
    positionals = [a for a in options(parser) if not a.option_strings and a.nargs != "*"]
    picks = [(a, data.draw(st.sampled_from(values_for(a, tmp_path)))) for a in positionals]
    picks += [(a, data.draw(st.sampled_from(values_for(a, tmp_path)))) for a in chosen if a not in positionals]
    if name == "figures" and not any(a.dest == "only" for a, _ in picks):
        picks.append((next(a for a in options(parser) if a.dest == "only"), "nope"))  # never build every figure
    argv = argv_of(name, parser, picks) + data.draw(st.lists(st.sampled_from(["--nope", *TEXTS]), max_size=1))
    with contextlib.suppress(FileNotFoundError):  # a previous example may have left the folder
        tmp_path.mkdir(exist_ok=True)
    run_cli(argv, capsys)
