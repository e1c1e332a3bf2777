"""The package alone (``pip install -e .``, no torch) works: help, the star import, and a clear word where torch is
needed. Each check runs in a fresh interpreter whose imports of torch fail, as in an environment without it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTRA = 'pip install -e ".[torch]"'

BLOCKER = """
import sys


class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, NoTorch())
"""


def without_torch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_help_and_the_star_import_work_without_torch(tmp_path):
    program = textwrap.dedent(
        """
        import pydoc

        import simulator
        from simulator import *

        assert "World" in pydoc.render_doc(simulator)
        try:
            import torch
        except ModuleNotFoundError:
            pass
        else:
            raise AssertionError("torch was importable: the blocker did not hold")
        world = World(2)
        print(world.run(lambda dev: dev.rank + 1).outputs)
        """
    )
    done = without_torch(tmp_path, "-c", program)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1, 2]"


def test_a_torch_name_used_without_torch_names_the_extra(tmp_path):
    program = textwrap.dedent(
        """
        from simulator import Reference, simulate_torch

        for call in (lambda: simulate_torch(None), lambda: Reference.of_torch(None)):
            try:
                call()
            except ModuleNotFoundError as exc:
                print(exc)
            else:
                raise AssertionError("ran without torch")
        """
    )
    done = without_torch(tmp_path, "-c", program)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and all(EXTRA in line for line in lines), lines
    assert lines[0].startswith("simulator.simulate_torch") and lines[1].startswith("Reference.of_torch")


def test_a_figure_that_needs_torch_fails_naming_the_extra(tmp_path):
    done = without_torch(tmp_path, "-m", "simulator", "figures", "--out", str(tmp_path / "out"), "redistribute-volumes")
    assert done.returncode == 1
    assert "figure 'redistribute-volumes' was not built" in done.stderr and ".[torch]" in done.stderr
    assert not list((tmp_path / "out").iterdir())


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_docs_installs_the_docs_extra_only():
    done = subprocess.run(["make", "-n", "-B", "docs"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert '-e ".[docs]"' in done.stdout
    assert "torch" not in done.stdout and "[dev" not in done.stdout
