"""Every module of the package can be the first one imported: no import cycle depends on import order."""

import subprocess
import sys

# In one fresh interpreter, each module is imported with no simulator module loaded before it (numpy,
# matplotlib and torch stay loaded: only the order of the package's own modules matters here).
SCRIPT = """
import importlib, pkgutil, sys, traceback
import simulator
names = sorted(m.name for m in pkgutil.walk_packages(simulator.__path__, "simulator."))
failed = []
for name in names:
    for loaded in [m for m in sys.modules if m == "simulator" or m.startswith("simulator.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failed.append(name + ":\\n" + traceback.format_exc(limit=-3))
print(len(names))
sys.exit("\\n".join(failed) or None)
"""


def test_each_module_imports_first():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"modules that fail when imported first:\n{done.stderr[-4000:]}"
    assert int(done.stdout) > 100  # every module was tried


def test_the_names_people_use_are_at_the_top():
    import simulator
    from simulator import Reference, World, check, view
    from simulator.checker import check as check_in_its_layer

    assert check is check_in_its_layer
    assert World(2).run(lambda dev: dev.rank).outputs == [0, 1] and Reference is simulator.checker.Reference
    assert view.show is simulator.teach.view.show
    for name in simulator.__all__:  # every listed name resolves, the lazy ones included
        assert getattr(simulator, name) is not None
