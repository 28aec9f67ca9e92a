"""Launcher of the f8b- tuning cases: a batch step that runs a script or program of another
runtime (Perl, Rust, Node.js, Go; sources progs/native/f8_jobs.*) the way an HPC job script
does - a line of its own, then the program in its place (exec: its output, exit status and
signal are the job's, as under `srun prog`) - and a Python training loop's finite check.

Usage: f8_scripts.py RUNTIME NATIVE_DIR MODE [ARG]
  RUNTIME perl | rust | node | go | python (MODE: assert_finite)
"""

from __future__ import annotations

import math
import os
import socket
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent / "native"


def command(runtime: str, native: str, mode: str, rest: list[str]) -> list[str]:
    if runtime == "perl":
        return ["perl", str(SRC / "f8_jobs.pl"), mode, *rest]
    if runtime == "rust":
        return [f"{native}/f8rs", mode, *rest]
    if runtime == "node":
        return ["node", str(SRC / "f8_jobs.js"), mode, *rest]
    if runtime == "go":
        return [f"{native}/f8go", mode, *rest]
    raise SystemExit(f"f8_scripts.py: unknown runtime {runtime!r}")


def assert_finite(lr: float = 0.9) -> None:
    """Gradient descent on a quartic with too large a step: the loop's guard is an assert on
    the loss (the traceback shows the assert's source line, the AssertionError the step)."""
    w = 3.0
    for step in range(200):
        print(f"step {step:3d} w {w:.4e}", flush=True)
        loss = (w * w - 1.0) ** 2
        assert math.isfinite(loss), f"step {step}"
        w -= lr * 4.0 * w * (w * w - 1.0)


def main() -> None:
    runtime, native, mode, *rest = sys.argv[1:]
    if runtime == "python":
        assert mode == "assert_finite", mode
        assert_finite()
        return
    argv = command(runtime, native, mode, rest)
    print(f"job step on {socket.gethostname()}: {runtime} {mode}", flush=True)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
