"""A line longer than LINE_CAP (8 KiB) is matched on its first LINE_CAP bytes, else on its last
LINE_CAP (NULs dropped), in both engines (gpualert_slurm/classify/scan/). A NUL run (a sparse or
preallocated log, a log truncated under a writer that keeps its offset) has no newline, so the
crash line written right after it ends a very long line: before this, 1 GiB, 64 MiB or 100 KiB
of NULs then `torch.OutOfMemoryError ...` was classified `unknown`. The same for any long
newline-free run (a base64 blob, a progress bar without CR).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
OOM = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB)"


def classify(log: Path, native: bool) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUALERT_SCAN_NATIVE="1" if native else "0")
    p = subprocess.run([sys.executable, "-m", "gpualert_slurm", "classify", "--json",
                        "--exit-code", "1", str(log)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize("native", [True, False], ids=["grep", "python"])
@pytest.mark.parametrize("prefix", [
    b"step 1 loss=0.31\n" + b"\0" * (2 << 20),   # a NUL hole, then the crash on the same line
    b"\0" * (100 << 10),                           # a small one (one chunk)
    b"step 1\n" + b"x" * (20 << 10) + b" ",        # any long newline-free run
], ids=["nul-2MiB", "nul-100KiB", "long-text-line"])
def test_the_line_after_a_long_newline_free_run_is_seen(tmp_path, prefix, native):
    log = tmp_path / "0.0.log"
    log.write_bytes(prefix + OOM + b"\n")
    v = classify(log, native)
    assert v["class"] == "cuda_oom", v["detail"]
    assert v["evidence"][0]["line"] == prefix.count(b"\n") + 1


def test_a_newline_after_the_nul_run_makes_it_visible(tmp_path):
    """The control: the same bytes with a newline after the NULs are found (engines agree)."""
    log = tmp_path / "0.0.log"
    log.write_bytes(b"\0" * (2 << 20) + b"\n" + OOM + b"\n")
    for native in (True, False):
        v = classify(log, native)
        assert v["class"] == "cuda_oom" and v["evidence"][0]["line"] == 2, v
