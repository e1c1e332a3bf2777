"""The step-through page at scale: page size, time to open, and time per step, in headless Chromium.

Three runs:
- the 1F1B scenario (4 devices, 289 events): the classroom case, which must step without lag;
- one 1F1B training step on a dp x pp x tp = 4 x 8 x 2 mesh (64 devices, about 10,000 events, payloads
  kept): the page must stay under 5 MB and open in under 2 s;
- the same step on 8 x 8 x 4 = 256 devices (64,672 events, metadata only): thinned to a window of
  ``MAX_EVENTS`` events, with a notice.

Printed per run: events, page size, the time to build the document and write the page (Python), the time
from the start of navigation to the first frame after the view is drawn (browser clock), and the mean
time of a step forward (keydown handled, cards, arrows and cursor redrawn; browser clock).

Run: python benchmarks/view_page_scale.py [--quick]   (--quick: skip the 256-device run)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from simulator.parallel.compose import Parallel3D
from simulator.parallel.mlp import MLP
from simulator.teach.examples import get
from simulator.tensors.mesh import DeviceMesh
from simulator.views.web import build_document, write_page
from simulator.views.web.browser import find_chromium, headless

STEP_FORWARD = """
const root = document.querySelector(".psv");
const n = Math.min(arguments[0], Number(root.dataset.steps));
const t0 = performance.now();
for (let i = 0; i < n; i++) root.dispatchEvent(new KeyboardEvent("keydown", {key: "ArrowRight", bubbles: true}));
return (performance.now() - t0) / n;
"""
PAINTED = (
    "const done = arguments[0]; requestAnimationFrame(() => requestAnimationFrame(() => done(performance.now())));"
)


def three_d_step(dp: int, pp: int, tp: int, keep_payloads: bool = True):
    mlp = MLP((8,) * (2 * pp + 1))
    x, t = mlp.data(dp * 2 * 2, seed=1)
    job = Parallel3D(mlp, DeviceMesh.grid((dp, pp, tp), ("dp", "pp", "tp")), "1f1b", microbatches=2)
    return job.world(keep_payloads=keep_payloads).run(job, mlp.init(seed=0), x, t)


def measure(driver, name: str, run, out: Path) -> None:
    t0 = time.perf_counter()
    doc = build_document(run)
    page = write_page(doc, out / f"{name}.html")
    built = time.perf_counter() - t0
    driver.get(page.resolve().as_uri())
    opened = driver.execute_async_script(PAINTED) / 1e3
    per_step = driver.execute_script(STEP_FORWARD, 2000)
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    shown = len(doc["events"]) - doc["base"]
    print(
        f"{name:<22} {doc['devices']:>4} devices {doc['total']:>8,} events ({shown:,} shown)  "
        f"page {page.stat().st_size / 1e6:5.2f} MB  built {built:5.2f} s  opened {opened:5.2f} s  "
        f"step {per_step:6.2f} ms{'  CONSOLE ERRORS: ' + str(errors) if errors else ''}"
    )
    if doc["notice"]:
        print(f"{'':<22} {doc['notice']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 256-device run")
    args = parser.parse_args()
    found = find_chromium()
    if isinstance(found, str):
        raise SystemExit(f"this benchmark needs a headless browser: {found}")
    runs = [("pipeline-1f1b", lambda: get("pipeline-1f1b").run()), ("3d-step 4x8x2", lambda: three_d_step(4, 8, 2))]
    if not args.quick:
        runs.append(("3d-step 8x8x4 (meta)", lambda: three_d_step(8, 8, 4, keep_payloads=False)))
    with tempfile.TemporaryDirectory() as tmp, headless() as driver:
        for name, make in runs:
            measure(driver, name, make(), Path(tmp))


if __name__ == "__main__":
    main()
