"""Execute a notebook headless, top to bottom; any cell error fails the test."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def execute_notebook(name: str, timeout: int = 300) -> nbformat.NotebookNode:
    """Run notebooks/<name> in a fresh kernel started in the repository root; return it executed."""
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    return nb


def outputs_text(nb: nbformat.NotebookNode) -> str:
    """Everything the notebook printed or displayed, as one string."""
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def widget_texts(nb: nbformat.NotebookNode) -> list[str]:
    """The text form of every widget the notebook displayed (what a stored notebook shows without a browser)."""
    return [
        out["data"]["text/plain"]
        for cell in nb.cells
        for out in cell.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in out.get("data", {})
    ]
