"""Writing a file whole or not at all, without ever replacing what is not a plain file.

Every file the package writes (Chrome traces, pages, figures, text grids, cost models, saved runs) goes
through ``atomic_write`` or ``atomic_path``. What happens depends on what the path names
(``output_kind``):

- a regular file, or nothing yet: a temporary file is written beside it and renamed into place, so an
  export that fails part-way (an error while serialising, a full disk, Ctrl-C) leaves the previous file
  exactly as it was and no reader ever sees half a file. A replaced file keeps its permissions; missing
  folders on the way are created (every writer does the same).
- a symbolic link is followed: its target is written (as above), and the link stays a link.
- standard output (``-``), a character device (``/dev/null``, a terminal) or a pipe, and anything under
  ``/dev/`` or ``/proc/`` (``/dev/stdout`` may lead to a regular file the shell opened): written through,
  opened for appending, never replaced.
- a folder, a block device or a socket: refused with an error naming the path.

    with atomic_write("run.trace.json") as f:
        f.write(text)
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

STDOUT = "-"  # the path that means standard output
_THROUGH_ROOTS = ("/dev/", "/proc/")  # special files live here: never replace one with a regular file


def output_kind(path: str | Path) -> str:
    """How ``path`` is written: "stdout", "through" (a device, a pipe, a name under /dev/ or /proc/) or "file"
    (replaced atomically). Raises an OSError naming the path for a folder, a block device or a socket."""
    if str(path) == STDOUT:
        return "stdout"
    try:
        st = os.stat(path)  # follows symbolic links: the target is what gets written
    except (FileNotFoundError, NotADirectoryError):  # not there yet (a file on the way: check_folder says so)
        return "file"
    except OSError as exc:  # a name too long, a loop of links, a file where a folder should be
        raise type(exc)(exc.errno, exc.strerror, short_path(path)) from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(f"{path} is a folder; give a file name inside it, e.g. {Path(path) / 'out'}")
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return "through"
    if not stat.S_ISREG(mode):
        what = "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a file"
        raise OSError(f"{path} is {what}; give the name of a file, a pipe, or - for standard output")
    return "through" if os.path.abspath(path).startswith(_THROUGH_ROOTS) else "file"


def check_writable(path: str | Path) -> str:
    """Fail before any work, with the reason in words, when ``path`` cannot be written; returns its
    ``output_kind``. For a file: the nearest folder on its way that exists must be a folder we may write into
    (the missing ones are created when writing)."""
    kind = output_kind(path)
    if kind == "through" and not os.access(path, os.W_OK):
        raise PermissionError(errno.EACCES, "no permission to write to it", str(path))
    if kind != "file":
        return kind
    check_folder(Path(os.path.realpath(path)).parent, path)
    return kind


def check_folder(folder: str | Path, asked: str | Path | None = None) -> None:
    """The folder, or where it is still to be made the nearest one on its way that exists, must be a folder
    we may write into; an error names ``asked`` (default: the folder)."""
    asked = folder if asked is None else asked
    folder = Path(folder)
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"{folder} is a file, not a folder", short_path(asked))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"no permission to write into {folder}/", short_path(asked))


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A new, empty temporary file (same suffix, so a writer picks the same format) that becomes ``path``
    if the block succeeds: renamed over a regular file, copied into a device or pipe (see the module
    docstring); removed if the block raises (KeyboardInterrupt included). For writers that take a file name.
    """
    kind = output_kind(path)
    if kind != "file":
        with tempfile.TemporaryDirectory(prefix="simulator-") as folder:
            tmp = Path(folder) / f"out{Path(path).suffix}"
            tmp.touch()
            yield tmp
            with _through(path, kind, "wb") as out, open(tmp, "rb") as f:
                shutil.copyfileobj(f, out)
        return
    target = Path(os.path.realpath(path))  # a link stays a link: its target is replaced
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _create_beside(target, path)
    try:
        yield tmp
        if target.exists():
            _keep_mode(target, tmp)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if exc.filename == str(tmp):  # name the file asked for, not the temporary one
            raise type(exc)(exc.errno, exc.strerror, str(path)) from None
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", **open_kwargs: Any) -> Iterator[IO[Any]]:
    """``open(path, mode)`` for writing ("w" or "wb"), whole or not at all (see the module docstring)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write(mode={mode!r}): use 'w' (text) or 'wb' (bytes)")
    kind = output_kind(path)
    if kind != "file":
        with _through(path, kind, mode, **open_kwargs) as f:
            yield f
        return
    with atomic_path(path) as tmp, open(tmp, mode, **open_kwargs) as f:
        yield f


def write_text(path: str | Path, text: str) -> Path:
    """``Path.write_text``, whole or not at all (see the module docstring); returns the path."""
    with atomic_write(path) as f:
        f.write(text)
    return Path(path)


@contextlib.contextmanager
def _through(path: str | Path, kind: str, mode: str, **open_kwargs: Any) -> Iterator[IO[Any]]:
    """Standard output, or ``path`` opened for appending (a device or a pipe: nothing to replace)."""
    if kind == "stdout":
        sys.stdout.flush()
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None or (mode == "w" and not open_kwargs):  # text as print writes it
            out = sys.stdout if mode == "w" else buffer
            if out is None:
                raise OSError(f"standard output here ({sys.stdout!r}) takes text, not bytes; give a file name")
            yield out
            out.flush()
            return
        if mode == "wb":
            yield buffer
            buffer.flush()
            return
        text = io.TextIOWrapper(buffer, **open_kwargs)  # (an encoding= the writer asks for)
        try:
            yield text
            text.flush()
        finally:
            text.detach()  # leave standard output open
        return
    with open(path, mode.replace("w", "a"), **open_kwargs) as f:
        yield f


def _keep_mode(target: Path, tmp: Path) -> None:
    """The new file gets the old one's permissions (and, where allowed, its owner and group)."""
    shutil.copymode(target, tmp)
    st = target.stat()
    with contextlib.suppress(OSError):  # only root may give a file away; others keep their own
        os.chown(tmp, st.st_uid, st.st_gid)


def _create_beside(target: Path, asked: str | Path) -> Path:
    """A new, empty, hidden file in ``target``'s folder, created exclusively (so never someone else's).
    An error names the file asked for (``asked``), not the temporary one."""
    for _ in range(100):
        tmp = target.with_name(f".{target.stem[:64]}.{secrets.token_hex(4)}.tmp{target.suffix[:16]}")
        try:
            # mode 0o666: the kernel applies the umask, as for any new file (mkstemp would give 0o600)
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        except OSError as exc:  # a read-only file system, no permission
            raise type(exc)(exc.errno, exc.strerror, str(asked)) from None
        return tmp
    raise FileExistsError(f"could not create a temporary file beside {asked}")


def short_path(path: str | Path) -> str:
    """A path as an error shows it: a very long one cut in the middle."""
    text = str(path)
    return text if len(text) <= 120 else f"{text[:60]}...{text[-40:]} ({len(text)} characters)"
