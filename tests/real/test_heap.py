"""Rank processes keep the memory they free (simulator.real.heap): a freed large buffer stays with
the process, ready to be reused without page faults, where by default glibc gives it back at once."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc, on Linux")

RESIDENT_AFTER_FREE = """
import sys
import numpy as np
from simulator.real.heap import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
x = np.ones(64 << 17)  # 64 MiB, touched
del x
pages = int(open("/proc/self/statm").read().split()[1])
print(kept, pages * 4096 >> 20)
"""


def resident_mib_after_freeing_64_mib(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", RESIDENT_AFTER_FREE, mode], capture_output=True, text=True, check=True)
    kept, mib = out.stdout.split()
    return kept, int(mib)


def test_a_freed_buffer_stays_with_the_process_only_when_asked():
    kept, kept_mib = resident_mib_after_freeing_64_mib("keep")
    if kept != "True":
        pytest.skip("the C library is not glibc: mallopt is not there")
    _, default_mib = resident_mib_after_freeing_64_mib("default")
    assert kept_mib >= default_mib + 60  # the 64 MiB stayed resident, ready for the next buffer
