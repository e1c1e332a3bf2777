"""Execute a notebook headless, top to bottom; any cell error fails the test.

``python -m tests.notebooks [NAME ...]`` re-executes notebooks (all of them, or those named, e.g.
``exercises/01_split_the_seed.ipynb``) and stores them with fresh outputs (``make notebooks``).
"""

import re
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tests.report_words import words

ROOT = Path(__file__).resolve().parent.parent
PLOTTING = re.compile(r"^[^#\n]*\b(plot_\w+|plot_timelines)\(", re.M)  # a cell that draws a figure


def execute_notebook(name: str, timeout: int = 300) -> nbformat.NotebookNode:
    """Run notebooks/<name> in a fresh kernel started in the repository root; return it executed."""
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(ROOT)}},
        record_timing=False,  # stored notebooks change only when their outputs do
    )
    client.execute()
    assert_lines_fit(nb, name)
    return nb


def assert_lines_fit(nb: nbformat.NotebookNode, name: str, width: int = 120) -> None:
    """Every line the notebook printed is within ``width`` columns (what a classroom screen shows whole)."""
    for k, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            for text in (out.get("text", ""), out.get("data", {}).get("text/plain", "")):
                for line in text.splitlines():
                    assert len(line) <= width, f"{name}, cell {k}: a line of {len(line)} columns:\n{line}"


def outputs_text(nb: nbformat.NotebookNode) -> str:
    """Everything the notebook printed or displayed, as one string."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def outputs_words(nb: nbformat.NotebookNode) -> str:
    """``outputs_text`` with every run of whitespace as one space: a check report wraps its lines, and a test
    looks for a phrase wherever the line breaks fall."""
    return words(outputs_text(nb))


def widget_texts(nb: nbformat.NotebookNode) -> list[str]:
    """The text form of every widget the notebook displayed (what a stored notebook shows without a browser)."""
    return [
        out["data"]["text/plain"]
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in out.get("data", {})
    ]


def images(cell: nbformat.NotebookNode) -> int:
    """How many images a cell's outputs hold."""
    return sum(1 for out in cell.get("outputs", []) if {"image/png", "image/gif"} & set(out.get("data", {})))


def assert_every_plot_shows(nb: nbformat.NotebookNode) -> int:
    """Every cell that calls a plotting function has an image output (exactly one per figure it makes);
    returns how many such cells there are."""
    cells = [c for c in nb.cells if c.cell_type == "code" and PLOTTING.search(c.source)]
    for cell in cells:
        assert images(cell) >= 1, f"this cell draws a figure, but no image is in its output:\n{cell.source}"
    return len(cells)


def store(name: str) -> None:
    """Execute notebooks/<name> and write it back with its fresh outputs."""
    nb = execute_notebook(name, timeout=600)
    nbformat.write(nb, ROOT / "notebooks" / name)


if __name__ == "__main__":
    names = sys.argv[1:] or sorted(
        str(p.relative_to(ROOT / "notebooks")) for p in (ROOT / "notebooks").rglob("*.ipynb")
    )
    for n in names:
        print(f"executing and storing notebooks/{n}", flush=True)
        store(n)
