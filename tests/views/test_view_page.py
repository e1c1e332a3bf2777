"""The self-contained page: everything inline, nothing fetched, written whole or not at all; and its command."""

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from simulator.cli.main import main
from simulator.core import files as files_module
from simulator.core.trace import Op, Trace
from simulator.teach.view import build_document, html_page, write_html
from simulator.views.web.assets import VIEW, module
from simulator.views.web.page import CSP, asset

ROOT = Path(__file__).resolve().parents[2]


def embedded_document(html: str) -> dict:
    data = re.search(r'<script type="application/json" id="view-data">(.*?)</script>', html, re.S)[1]
    return json.loads(data)


def test_the_page_inlines_the_module_the_styles_and_the_document(tmp_path):
    path = write_html("wrong-input", tmp_path / "bug.html")
    html = path.read_text()
    assert module() in html and asset("view.css") in html  # the widget's own module, unchanged
    assert embedded_document(html) == build_document("wrong-input")
    assert f'content="{CSP}"' in html and "default-src 'none'" in CSP  # the browser refuses any fetch
    tags = re.findall(r"<(?:script|link|img|iframe)\b[^>]*>", html)
    assert not [t for t in tags if re.search(r"\b(?:src|href)=\"(?!data:)", t)], tags  # nothing to load
    assert html.count("<script") == 2 and html.count("</script>") == 2
    assert "<title>wrong-input: Bug: the raw input crosses the boundary</title>" in html


def test_names_that_look_like_markup_stay_data():
    trace = Trace(1)
    op = Op(0, 0, "</script><script>alert(1)</script>", 0.0, 1e-6, 0, None, 1.0, None, None)
    trace.ops.append(op)
    trace.events.append(("op", op))
    html = html_page(build_document(trace, title="<b>&</b>"))
    assert html.count("</script>") == 2
    assert embedded_document(html)["events"][0]["n"] == op.name
    assert "<title>&lt;b&gt;&amp;&lt;/b&gt;</title>" in html


def test_bad_paths_get_clear_errors_and_leave_nothing_behind(tmp_path):
    with pytest.raises(IsADirectoryError, match="is a folder; give a file name inside it"):
        write_html("split", tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        write_html("split", tmp_path / "file" / "x.html")
    with pytest.raises(ValueError, match="step=6: this run has steps 0 to 5"):
        write_html("split", tmp_path / "x.html", step=6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_missing_folders_are_made_as_every_writer_makes_them(tmp_path):
    # one rule for every writer (export, save_cost, figures and the page): missing folders are created
    assert write_html("split", tmp_path / "new" / "x.html").read_text().startswith("<!DOCTYPE html>")


def test_a_failed_write_keeps_the_old_page(tmp_path, monkeypatch):
    path = tmp_path / "run.html"
    path.write_text("the old page")

    def broken_rename(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(files_module.os, "replace", broken_rename)
    with pytest.raises(OSError, match="disk full"):
        write_html("split", path)
    assert path.read_text() == "the old page" and [p.name for p in tmp_path.iterdir()] == ["run.html"]
    monkeypatch.undo()
    write_html("split", path, step=4)
    assert '"step": 4' in path.read_text() and path.stat().st_mode & 0o044  # readable by others: it is for sharing


def test_html_command_writes_the_page(tmp_path, capsys):
    out = tmp_path / "split.html"
    assert main(["html", "split", "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert said.startswith(f"wrote {out} (") and "5 steps): open it in any browser" in said
    assert embedded_document(out.read_text())["title"].startswith("split:")
    assert main(["html", "pipeline-1f1b", "-o", str(tmp_path / "p.html"), "--max-events", "50"]) == 0
    assert "thinned: this run has 289 events" in capsys.readouterr().out


def test_html_command_errors(tmp_path, capsys):
    assert main(["html", "wrong_input"]) == 2
    assert "did you mean 'wrong-input'?" in capsys.readouterr().err
    assert main(["html", "wrong-shape", "-o", str(tmp_path / "d.html")]) == 2
    assert "stops with ContractError, so there is no run to show" in capsys.readouterr().err
    assert main(["html", "split", "-o", str(tmp_path / "s.html"), "--step", "9"]) == 2
    assert "this run has steps 0 to 5" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_help_lists_the_html_command():
    out = subprocess.run([sys.executable, "-m", "simulator", "--help"], capture_output=True, text=True, check=True)
    assert "html" in out.stdout and "self-contained web page" in out.stdout


@pytest.mark.slow
def test_an_installed_package_has_the_module_and_styles(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {f"simulator/views/web/{name}" for name in (*VIEW, "explorer.js", "view.css")} <= set(names)


def test_the_page_of_a_deadlocked_scenario_steps_through_the_run_up_to_it(tmp_path, capsys):
    out = tmp_path / "deadlock.html"
    assert main(["html", "1f1b-blocking-deadlock", "-o", str(out)]) == 0
    assert "the page shows the run up to there" in capsys.readouterr().err
    doc = embedded_document(out.read_text())
    assert "It stops here, with deadlock" in doc["story"] and "wait-for cycle: device 0 -> device 1" in doc["story"]
    sends = [e for e in doc["events"] if e["k"] == "send"]
    assert doc["events"][-1]["k"] == "send" and len(sends) == 3  # the last two, each waiting for its receiver
