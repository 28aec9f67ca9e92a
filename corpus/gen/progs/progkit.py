"""What the really-run scenario programs share (`PROG.py SCENARIO [ARG ...]`, run with this
directory on sys.path): the arguments after the scenario's name, unbuffered printing, and a few
steps of ordinary work printed before the failure. Each program keeps its own step figures."""

from __future__ import annotations

import os
import sys
import time

ARGS = sys.argv[2:]
ARG = ARGS[0] if ARGS else ""


def say(*a: object) -> None:
    print(*a, flush=True)


def steps(name: str, n: int = 3, *, loss: float = 1.9, rate: int = 180, more: int = 9,
          unit: str = "samples/s", node: bool = False, pause: float = 0.02) -> None:
    """`n` steps of ordinary work: step s prints loss `loss` / s and rate `rate` + `more` *
    (s - 1) `unit`; `node`: the first line names the host too."""
    say(f"-- {name}: pid={os.getpid()}" + (f" node={os.uname().nodename}" if node else ""))
    for s in range(n):
        say(f"{name} step {s + 1}/{n}: loss {loss / (s + 1):.4f} {rate + more * s} {unit}")
        time.sleep(pause)
