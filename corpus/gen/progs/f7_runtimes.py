"""Launcher of the f7r- tuning cases: a batch step that runs a program of another runtime (Go,
Rust, R, Node.js, gfortran; sources progs/native/f7_jobs.*) the way an HPC job script does -
a few lines of its own, then the program in its place (exec: its output, exit status and
signal are the job's, as under `srun prog`).

Usage: f7_runtimes.py RUNTIME NATIVE_DIR MODE [ARG]
  RUNTIME go | rust | fortran | fortran-nocheck (built without -fcheck=bounds) | r | node |
          node-heap48 (V8 heap capped at 48 MB)
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parent / "native"


def command(runtime: str, native: str, mode: str, rest: list[str]) -> list[str]:
    if runtime == "go":
        return [f"{native}/f7go", mode, *rest]
    if runtime == "rust":
        return [f"{native}/f7rs", mode, *rest]
    if runtime == "fortran":
        return [f"{native}/f7f", mode, *rest]
    if runtime == "fortran-nocheck":
        return [f"{native}/f7f_nocheck", mode, *rest]
    if runtime == "r":
        return ["Rscript", "--vanilla", str(SRC / "f7_jobs.R"), mode, *rest]
    if runtime == "node":
        return ["node", str(SRC / "f7_jobs.js"), mode, *rest]
    if runtime == "node-heap48":
        return ["node", "--max-old-space-size=48", str(SRC / "f7_jobs.js"), mode, *rest]
    raise SystemExit(f"f7_runtimes.py: unknown runtime {runtime!r}")


def main() -> None:
    runtime, native, mode, *rest = sys.argv[1:]
    argv = command(runtime, native, mode, rest)
    print(f"job step on {socket.gethostname()}: {runtime} {mode}", flush=True)
    print(f"+ {' '.join(Path(argv[0]).name if i == 0 else a for i, a in enumerate(argv))}",
          flush=True)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
