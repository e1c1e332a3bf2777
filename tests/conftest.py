"""Test-wide settings: property tests explore at random locally and replay a fixed set of examples in CI.

With the CI environment variable set (``.ci/run`` sets it), hypothesis derandomizes: the same
examples every run, no example database, so CI cannot fail at random. Locally, each run explores
new examples (and replays the ones that failed before, from .hypothesis/).
"""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
