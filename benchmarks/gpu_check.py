"""On a machine with a CUDA GPU: the nccl tests that can run there, and matrix-product throughput beside the
figure the ``dgx-h100`` preset assumes. Without a GPU it says so and exits cleanly, measuring nothing.

Matrix products: dense bf16 (and TF32-free float32) products of n x n matrices, timed with CUDA events
after a warm-up, as TFLOP/s (2 n^3 FLOPs each) and as a fraction of the preset's FLOP/s (the H100
datasheet's dense BF16 peak, which real kernels reach only in part). The nccl tests are those marked
``gpu`` in ``tests/``; the ones that need more GPUs than the machine has skip themselves, saying why,
and their reasons are reported. The figures go to stdout and to a Markdown file for the README.

    python benchmarks/gpu_check.py [--n 8192] [--iters 50] [--out benchmarks/results/gpu_check.md]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def gpu_or_reason() -> str | None:
    """None when a CUDA GPU is usable here, else why not."""
    try:
        import torch
    except ImportError as exc:
        return f"torch is not installed ({exc})"
    if not torch.cuda.is_available():
        return "torch sees no CUDA GPU"
    return None


def matmul_tflops(n: int, iters: int, dtype_name: str) -> float:
    """Measured TFLOP/s of n x n @ n x n products of ``dtype_name`` on GPU 0."""
    import torch

    dtype = getattr(torch, dtype_name)
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 arithmetic here
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        a @ b
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1e3 / iters
    return 2 * n**3 / seconds / 1e12


def nccl_tests() -> tuple[int, str]:
    """Run the tests marked ``gpu``; their exit code and the summary lines pytest printed (skip reasons included)."""
    cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-rs", "-p", "no:cacheprovider", "tests/"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(("SKIPPED", "FAILED", "ERROR")) or " passed" in ln]
    lines += [ln for ln in done.stdout.splitlines() if ln.startswith("=") and ("passed" in ln or "skipped" in ln)]
    return done.returncode, "\n".join(dict.fromkeys(lines)) or done.stdout[-2000:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=8192, help="matrix size (default: 8192)")
    parser.add_argument("--iters", type=int, default=50, help="timed products per dtype (default: 50)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu_check.md")
    parser.add_argument("--skip-tests", action="store_true", help="measure throughput only")
    args = parser.parse_args()
    why = gpu_or_reason()
    if why is not None:
        print(f"no GPU: {why}; nothing measured, no file written")
        return 0

    import torch

    from simulator.cost.presets import dgx_h100

    preset = dgx_h100().flops / 1e12
    name = torch.cuda.get_device_name(0)
    rows = []
    for dtype in ("bfloat16", "float32"):
        tflops = matmul_tflops(args.n, args.iters, dtype)
        rows.append((dtype, tflops))
        print(
            f"{name}: {dtype} {args.n}^3 products: {tflops:.1f} TFLOP/s ({tflops / preset:.0%} of dgx-h100's {preset:g})"
        )
    code, summary = (0, "not run (--skip-tests)") if args.skip_tests else nccl_tests()
    print(f"nccl tests (pytest -m gpu), exit code {code}:\n{summary}")
    when = time.strftime("%Y-%m-%d %H:%M")
    text = [
        f"GPU check, {when}, {name} ({torch.cuda.device_count()} visible), torch {torch.__version__}, "
        f"load average {os.getloadavg()[0]:.2f}",
        "",
        "| matrix product | measured | dgx-h100 preset (dense BF16 peak) | measured / preset |",
        "| --- | ---: | ---: | ---: |",
    ]
    text += [
        f"| {dtype}, {args.n} x {args.n} | {t:.1f} TFLOP/s | {preset:g} TFLOP/s | {t / preset:.2f} |"
        for dtype, t in rows
    ]
    text += ["", f"nccl tests (`pytest -m gpu`), exit code {code}:", "", "```", summary, "```", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(text))
    print(f"wrote {args.out}")
    return 0 if code in (0, 5) else 1  # 5: pytest collected nothing to run


if __name__ == "__main__":
    sys.exit(main())
