"""torchrun compatibility: env:// initialisation, one process per rank started by torchrun itself."""

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch.distributed")

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.gloo]


def test_torchrun_runs_a_scenario_and_checks_it(tmp_path):
    saved = tmp_path / "trace.pkl"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += ["-m", "simulator.cli.torchrun", "wrong-input", "--timeout", "20", "--save", str(saved)]
    done = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrong-input on 2 gloo processes (measured times)" in done.stdout
    assert (
        "check FAILED at the first divergence: message #0 from device 0 to device 1 (tag 0) carried [3.]" in done.stdout
    )
    run = pickle.loads(saved.read_bytes())
    np.testing.assert_array_equal(run["outputs"][1], [9.0])
    (msg,) = run["trace"].messages
    assert msg.name == "A" and msg.t_send <= msg.t_recv
