"""Test-suite configuration shared by every test module."""


def pytest_configure(config):
    # Real-process tests on CPU; select them with `-m gloo` (pyproject.toml registers slow and gpu).
    config.addinivalue_line("markers", "gloo: runs rank programs on real gloo (CPU) processes via torch.distributed")
