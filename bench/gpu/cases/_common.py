"""What the case programs share: the --cpu-half switch and a look at what is installed.

A case program runs its GPU failure by default. With --cpu-half it does what it can without a
GPU (parse its arguments, find its framework, run a CPU variant where one exists) and exits 0,
so that a machine without a GPU still checks that every program starts."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys


def parser(doc: str | None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    p.add_argument("--cpu-half", action="store_true",
                   help="no GPU: check the program and run its CPU variant, if any; exit 0")
    return p


def present(module: str) -> bool:
    """Whether a module can be found, without importing it (torch's import costs seconds)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def say(text: str) -> None:
    print(text, flush=True)


def cpu_half_banner(case: str, modules: tuple[str, ...]) -> dict[str, bool]:
    """Print and return which of the case's modules are here."""
    found = {m: present(m) for m in modules}
    say(f"[{case}] cpu half on {os.uname().nodename}, python {sys.version.split()[0]}: "
        + ", ".join(f"{m} {'present' if ok else 'absent'}" for m, ok in found.items()))
    return found


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
