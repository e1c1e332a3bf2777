"""Cost files written by hand, as a user would get them wrong: each must be refused with the fix."""

import pytest

from simulator.calibration.costfile import load_cost


def assert_refused(tmp_path, fields: str, match: str) -> None:
    """A cost file of the three required numbers and ``fields`` (JSON text) fails to load with ``match``."""
    path = tmp_path / "bad.json"
    path.write_text('{"latency": 1e-6, "bandwidth": 1e9, "flops": 1e9, ' + fields + "}")
    with pytest.raises(ValueError, match=match):
        load_cost(path)
