"""Writing a file whole or not at all: write a temporary file next to it, then rename it into place.

Every file the package writes (Chrome traces, figures, text grids, cost models, saved runs) goes
through ``atomic_write`` or ``atomic_path``. An export that fails part-way (an error while
serialising, a full disk, Ctrl-C) then leaves the previous file exactly as it was, and no reader ever
sees half a file: ``os.replace`` within one folder swaps the name in one step.

    with atomic_write("run.trace.json") as f:
        f.write(text)
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A new, empty temporary file beside ``path`` (same suffix, so a writer picks the same format);
    renamed to ``path`` if the block succeeds, removed if it raises (KeyboardInterrupt included).

    For writers that take a file name. A new file gets the usual permissions (0o666 less the umask);
    a replaced file keeps its permissions.
    """
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path} is a folder; give a file name inside it, e.g. {path / 'out'}{path.suffix}")
    tmp = _create_beside(path)
    try:
        yield tmp
        if path.exists():
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", **open_kwargs: Any) -> Iterator[IO[Any]]:
    """``open(path, mode)`` for writing ("w" or "wb"), whole or not at all (see ``atomic_path``)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write(mode={mode!r}): use 'w' (text) or 'wb' (bytes)")
    with atomic_path(path) as tmp, open(tmp, mode, **open_kwargs) as f:
        yield f


def write_text(path: str | Path, text: str) -> Path:
    """``Path.write_text``, whole or not at all (see ``atomic_path``); returns the path."""
    with atomic_write(path) as f:
        f.write(text)
    return Path(path)


def _create_beside(path: Path) -> Path:
    """A new, empty, hidden file in ``path``'s folder, created exclusively (so never someone else's)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.stem}.{secrets.token_hex(4)}.tmp{path.suffix}")
        try:
            # mode 0o666: the kernel applies the umask, as for any new file (mkstemp would give 0o600)
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(f"could not create a temporary file beside {path}")
