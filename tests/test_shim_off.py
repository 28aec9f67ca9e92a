"""The hook shims (epilog.d/): a job the plugin marks SPANK_GPUALERT=off starts no interpreter
(the shim exits 0 before exec'ing gpualert), every other job runs it (the epilogs niced); the
shim exits 0 either way. Real shims, run by /bin/sh as Slurm runs them, with a real program
as GPUALERT_BIN."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHIMS = ("gpualert-prolog", "gpualert-epilog", "gpualert-epilog-slurmctld")


@pytest.mark.parametrize("shim", SHIMS)
@pytest.mark.parametrize("value,runs", [("off", False), ("on", True), ("mail=a@b.org", True),
                                        (None, True), ("", True)])
def test_off_skips_the_interpreter(tmp_path: Path, shim: str, value: str | None,
                                   runs: bool) -> None:
    trace = tmp_path / "ran"
    fake = tmp_path / "gpualert"
    fake.write_text(f"#!/bin/sh\necho \"$@\" $(nice) > {trace}\nexit 3\n")
    fake.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "SPANK_GPUALERT"}
    env.update(GPUALERT_BIN=str(fake), GPUALERT_HOOK_TIMEOUT="10")
    if value is not None:
        env["SPANK_GPUALERT"] = value
    r = subprocess.run(["/bin/sh", str(REPO / "epilog.d" / shim)], env=env, timeout=30)
    assert r.returncode == 0
    if runs and shim == "gpualert-prolog":  # a Prolog nobody queued runs detached
        deadline = time.time() + 15
        while time.time() < deadline and not (trace.exists() and trace.read_text()):
            time.sleep(0.05)
    elif not runs:
        time.sleep(0.5)  # a detached run would have written by now
    assert trace.exists() == runs
    if runs:
        words = trace.read_text().split()
        assert words[0] == "hook"
        # the epilogs run niced (the Slurm daemons first in a burst); the Prolog, on the
        # job's path to its start, is not
        assert int(words[-1]) - os.nice(0) == (0 if shim == "gpualert-prolog" else 10)
