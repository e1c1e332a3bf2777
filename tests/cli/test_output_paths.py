"""What each kind of output path gets: files replaced whole (keeping their mode), links followed, devices and
pipes written through, ``-`` as standard output, and errors that name the file asked for."""

import errno
import os
import stat
import threading

import pytest

from simulator.calibration.costfile import load_cost, save_cost
from simulator.cli.main import main
from simulator.core import files
from simulator.core.files import atomic_path, atomic_write, write_text
from simulator.cost import CostModel
from simulator.teach.examples import get
from simulator.teach.view import write_html
from simulator.views.plot.chrome_trace import write_chrome_trace


def read_fifo(path, got):
    with open(path, "rb") as f:
        got.append(f.read())


def test_a_pipe_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=read_fifo, args=(fifo, got), daemon=True)
    reader.start()
    write_chrome_trace(get("split").run().result, fifo)
    reader.join(10)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # still a pipe, not a regular file
    assert got and got[0].startswith(b'{"displayTimeUnit"') and got[0].rstrip().endswith(b"]}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary file left beside it


def test_a_character_device_is_written_through(tmp_path):
    run = get("split").run().result
    write_chrome_trace(run, "/dev/null")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    assert main(["html", "split", "-o", str(link)]) == 0
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_full_device_is_an_error_naming_it(capsys):
    assert main(["export", "split", "--out", "/dev/full"]) == 2
    err = capsys.readouterr().err
    assert "cannot write /dev/full: No space left on device; choose another --out" in err
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_symlink_is_followed_and_stays_a_link(tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target.name)
    write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == "real.json"
    assert target.read_text() == "new"
    dangling = tmp_path / "to-be.json"
    dangling.symlink_to(tmp_path / "sub" / "made.json")
    save_cost(dangling, CostModel())
    assert dangling.is_symlink() and load_cost(tmp_path / "sub" / "made.json") == CostModel()


def test_dash_is_standard_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["export", "split", "--out", "-"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith('{"displayTimeUnit"') and "wrote standard output: 21 events" in err
    assert main(["html", "split", "-o", "-"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("<!DOCTYPE html>") and out.rstrip().endswith("</html>")
    assert "wrote standard output (5 steps)" in err
    assert list(tmp_path.iterdir()) == []  # no file named "-"


def test_dash_takes_bytes_too(capfdbinary, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (before the fix, a file named "-" appeared here)
    with atomic_path("-") as tmp:
        tmp.write_bytes(b"\x89PNG")
    with atomic_write("-", "wb") as f:
        f.write(b"!")
    assert capfdbinary.readouterr().out == b"\x89PNG!"


@pytest.mark.parametrize("writer", ["page", "trace", "cost", "text"])
def test_every_writer_keeps_the_mode_of_the_file_it_replaces(tmp_path, writer):
    path = tmp_path / "private"
    path.write_text("secret")
    path.chmod(0o600)
    run = get("split").run().result
    {
        "page": lambda: write_html(run, path),
        "trace": lambda: write_chrome_trace(run, path),
        "cost": lambda: save_cost(path, CostModel()),
        "text": lambda: write_text(path, "x"),
    }[writer]()
    assert path.read_text() != "secret" and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_read_only_file_system_names_the_target_not_the_temporary_file(tmp_path, monkeypatch):
    real_open = os.open

    def read_only(path, flags, mode=0o777):
        if flags & os.O_CREAT:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, mode)

    monkeypatch.setattr(files.os, "open", read_only)
    target = tmp_path / "run.trace.json"
    with pytest.raises(OSError) as info:
        write_text(target, "x")
    assert info.value.errno == errno.EROFS and info.value.filename == str(target)


def test_export_names_the_target_on_a_read_only_file_system(tmp_path, monkeypatch, capsys):
    def read_only(path, flags, mode=0o777):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    monkeypatch.setattr(files.os, "open", read_only)
    target = tmp_path / "run.trace.json"
    assert main(["export", "split", "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {target}: Read-only file system" in err and ".tmp" not in err


def test_folders_and_block_devices_are_refused(tmp_path):
    from simulator.core.files import output_kind

    with pytest.raises(IsADirectoryError, match="is a folder"):
        output_kind(tmp_path)
    blocks = [f"/dev/{n}" for n in os.listdir("/dev") if stat.S_ISBLK(os.lstat(f"/dev/{n}").st_mode)]
    if blocks:
        with pytest.raises(OSError, match="is a block device"):
            output_kind(blocks[0])


def test_missing_folders_are_made_by_every_writer(tmp_path):
    run = get("split").run().result
    write_html(run, tmp_path / "a" / "page.html")
    write_chrome_trace(run, tmp_path / "b" / "run.json")
    save_cost(tmp_path / "c" / "cost.json", CostModel())
    assert all((tmp_path / d).is_dir() for d in "abc")
