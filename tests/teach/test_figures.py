"""The figures registry and command: every figure builds, with content, from a clean checkout."""

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread
from matplotlib.text import Text

from simulator.cli.main import main
from simulator.teach.figures import _REGISTRY, build_figures, figure, registry
from simulator.views.plot import animation
from simulator.views.plot.style import LEGIBLE_PX, SHOWN_WIDTH

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    lines: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        smallest = record_smallest_text(mp, lines)
        files = build_figures(out, progress=lines.append)
    return out, files, lines, smallest


def record_smallest_text(mp: pytest.MonkeyPatch, lines: list[str]) -> dict[str, tuple[float, str]]:
    """Have every figure saved (each PNG, SVG and GIF frame) note its smallest text, as pixels of font size when
    the image is shown SHOWN_WIDTH (1280) pixels wide, under the figure being built (the last progress line)."""
    smallest: dict[str, tuple[float, str]] = {}
    save, write_gif = Figure.savefig, animation.write_gif

    def note(fig):
        name = lines[-1].split("] ", 1)[1].split(":", 1)[0]
        for t in fig.findobj(Text):
            if t.get_visible() and t.get_text().strip():
                px = t.get_fontsize() * SHOWN_WIDTH / (72 * fig.get_figwidth())
                smallest[name] = min(smallest.get(name, (px, "")), (px, t.get_text()))

    def noting_savefig(fig, *args, **kwargs):
        fig.canvas.draw()  # the drawing code sizes some labels as it lays them out
        note(fig)
        return save(fig, *args, **kwargs)

    def noting_write_gif(fig, draw, *args, **kwargs):  # a GIF's frames set their texts' sizes when drawn
        return write_gif(fig, lambda i: (draw(i), note(fig)), *args, **kwargs)

    mp.setattr(Figure, "savefig", noting_savefig)
    mp.setattr(animation, "write_gif", noting_write_gif)
    return smallest


def test_registry_names_files_and_docs():
    figs = registry()
    assert {"gpipe-two-stages", "overlap", "pipeline-64", "two-level", "ring-routing"} <= set(figs)
    outputs = [o for spec in figs.values() for o in spec.outputs]
    assert len(outputs) == len(set(outputs)), "two figures write the same file"
    assert all(spec.doc for spec in figs.values())


def buildable():
    """The figures this machine can build (the page screenshots need a browser)."""
    return [spec for spec in registry().values() if spec.unavailable() is None]


def test_every_figure_is_built_with_content(built):
    out, files, lines, _ = built
    expected = {out / o for spec in buildable() for o in spec.outputs}
    assert set(files) == expected
    for f in files:
        assert f.stat().st_size > 100, f
        check_content(f)
    n = len(registry())
    assert lines[0].startswith(f"[1/{n}] ") and any(line.startswith(f"[{n}/{n}] ") for line in lines)
    assert sum("wrote" in line for line in lines) == len(buildable())
    assert sum("skipped: " in line for line in lines) == n - len(buildable())


PAGE_FIGURES = ("view-pages", "present-pages", "explorer-pages", "memory-pages")  # screenshots of the HTML pages


def test_every_drawn_figure_has_text_of_14_px_when_shown_1280_wide(built):
    """A slide shown on a 1280-pixel projector: no label, tick or caption under 14 px (the page screenshots are
    held to it by test_the_page_screenshots_are_16_9_slides_with_legible_text)."""
    *_, smallest = built
    drawn = {
        name for name, spec in registry().items() if name not in PAGE_FIGURES and not spec.outputs[0].endswith(".txt")
    }
    assert set(smallest) == drawn  # every picture in figures/ measured
    small = {name: f"{px:.1f} px ({text!r})" for name, (px, text) in smallest.items() if px < LEGIBLE_PX - 1e-9}
    assert not small, f"text under {LEGIBLE_PX} px at {SHOWN_WIDTH} wide: {small}"


def test_a_figure_whose_needs_are_not_met_is_skipped_saying_why(tmp_path):
    @figure("needs_test.png", needs=lambda: "no such tool here")
    def needs_test(out, style):
        """A figure that cannot be built on this machine."""
        raise AssertionError("a skipped figure must not be built")

    try:
        lines: list[str] = []
        assert build_figures(tmp_path, only=["needs-test"], progress=lines.append) == []
        assert lines[1].strip() == "skipped: no such tool here" and not list(tmp_path.iterdir())
    finally:
        _REGISTRY.pop("needs-test")


def check_content(f: Path) -> None:
    """Non-trivial content: pictures that are not blank, SVG that parses and names devices, GIFs that move."""
    if f.suffix == ".png":
        img = imread(f)
        assert img.shape[0] > 200 and img.shape[1] >= 1600 and img[..., :3].std() > 0.05, f  # slide-size
    elif f.suffix == ".svg":
        root = ET.parse(f).getroot()
        assert root.tag.endswith("svg")
        text = f.read_text()
        assert "device" in text or "memory" in text, f
    elif f.suffix == ".gif":
        from PIL import Image

        with Image.open(f) as im:
            assert im.n_frames > 10 and im.width >= 1600, f
    elif f.suffix == ".txt":  # a text figure a class reads whole: within 120 columns
        text = f.read_text()
        assert "device 0" in text and max(map(len, text.splitlines())) <= 120, f
    else:
        raise AssertionError(f"unexpected figure type {f}")


def test_the_committed_figures_are_the_registered_ones():
    committed = ROOT / "figures"
    for spec in registry().values():
        for o in spec.outputs:
            assert (committed / o).is_file(), f"figures/{o} is not committed: run `python -m simulator figures`"


def test_registering_mistakes_are_refused():
    registry()  # load the real figures first, whatever order the tests run in
    with pytest.raises(ValueError, match="needs the file names"):
        figure()
    with pytest.raises(ValueError, match="would overwrite 'timeline_overlap.png'"):

        @figure("timeline_overlap.png")
        def another_overlap(out):
            """Clashes with the built-in overlap figure."""

    assert "another-overlap" not in registry()


def test_unknown_figure_is_named(tmp_path, capsys):
    with pytest.raises(KeyError, match="choose from: "):
        build_figures(tmp_path, only=["nope"])
    assert main(["figures", "nope", "--out", str(tmp_path)]) == 2
    assert "no figure named 'nope'" in capsys.readouterr().err


def test_figures_list(capsys):
    assert main(["figures", "--list"]) == 0
    out = capsys.readouterr().out
    assert "timeline_gpipe_two_stages.png" in out and "two-level" in out


def clean_checkout(dest: Path) -> Path:
    """Copy the files git knows about (tracked, or new and not ignored), as a fresh clone would have them."""
    listing = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True
    )
    if listing.returncode != 0:  # not a git checkout (e.g. an unpacked archive): take the package itself
        names = [str(p.relative_to(ROOT)) for p in (ROOT / "simulator").rglob("*.py")]
    else:
        names = listing.stdout.split()
    for name in names:
        src = ROOT / name
        if src.is_file() and not name.startswith("figures/"):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def run_figures(checkout: Path, *names: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MPLBACKEND"] = "Agg"
    return subprocess.run(
        [sys.executable, "-m", "simulator", "figures", *names],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_figures_command_from_a_clean_checkout(tmp_path):
    checkout = clean_checkout(tmp_path)
    assert not (checkout / "figures").exists()
    done = run_figures(checkout, "gpipe-two-stages", "gpipe-two-stages-text")
    assert done.returncode == 0, done.stderr
    assert "[1/2] gpipe-two-stages" in done.stdout and "3 files in figures/" in done.stdout
    assert sorted(p.name for p in (checkout / "figures").iterdir()) == [
        "timeline_gpipe_two_stages.png",
        "timeline_gpipe_two_stages.svg",
        "timeline_gpipe_two_stages.txt",
    ]


@pytest.mark.slow
def test_all_figures_from_a_clean_checkout(tmp_path):
    checkout = clean_checkout(tmp_path)
    done = run_figures(checkout)
    assert done.returncode == 0, done.stderr
    made = sorted(p.name for p in (checkout / "figures").iterdir())
    assert made == sorted(o for spec in buildable() for o in spec.outputs)


def test_every_file_in_figures_is_made_by_the_figures_command():
    """figures/ holds what `python -m simulator figures` makes, nothing else (benchmarks draw into benchmarks/figures/)."""
    made = {o for spec in registry().values() for o in spec.outputs}
    stray = sorted(p.name for p in (ROOT / "figures").iterdir() if p.name not in made)
    assert not stray, f"not made by `python -m simulator figures`: {stray}"


def test_every_committed_picture_fits_a_16_9_slide():
    """Slide figures are 16:9 or cropped to their content (a little wider): none is taller than a slide, and none
    is a strip that leaves most of one empty (the two-device GPipe timeline was 2.96:1)."""
    from PIL import Image

    for spec in registry().values():
        for o in spec.outputs:
            if o.endswith((".png", ".gif")):
                width, height = Image.open(ROOT / "figures" / o).size
                assert width / height >= 16 / 9 - 0.01, f"figures/{o} is {width} x {height}, taller than 16:9"
                assert width / height <= 2.2, f"figures/{o} is {width} x {height}, a strip on a 16:9 slide"


def test_the_page_screenshots_are_16_9_slides_with_legible_text():
    """Every page figure is one 1920 x 1080 screen, laid out at 1280 x 720 x 12/14 CSS pixels: the pages' smallest
    text (12 px, held by the browser tests) reads as 14 px on a slide shown 1280 pixels wide."""
    from PIL import Image

    from simulator.teach.figures.pages import SLIDE_SCREEN

    width, height = SLIDE_SCREEN
    assert width / height == pytest.approx(16 / 9, rel=0.01) and 12 * 1280 / width >= 14
    pages = [o for name in PAGE_FIGURES for o in registry()[name].outputs]
    assert {"view_split.png", "view_wrong_input.png", "view_tp_row.png", "memory_calculator.png"} <= set(pages)
    for o in pages:
        assert Image.open(ROOT / "figures" / o).size == (1920, 1080), o


def test_one_figure_file_is_counted_as_one(tmp_path, capsys):
    assert main(["figures", "gpipe-two-stages-text", "--out", str(tmp_path)]) == 0
    assert f"1 file in {tmp_path}/" in capsys.readouterr().out
