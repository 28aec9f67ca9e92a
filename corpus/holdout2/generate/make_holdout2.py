#!/usr/bin/env python3
"""Rebuild corpus/holdout2 from scratch (root; the test cluster must be up; ~6 min).

Runs the Slurm cases (slurm_cases.py), the local cases (make_local.py), then merges the labels
(merge_labels.py). Pass case-id prefixes to rerun only some cases (e.g. `make_holdout2.py dl-`).
"""

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    only = sys.argv[1:]
    slurm_ids = ("tl-", "cx-", "pre-", "oom-", "mr-", "ok-slurm", "un-slurm")
    slurm = [p for p in only if p.startswith(slurm_ids)]
    local = [p for p in only if p not in slurm]
    if not only or slurm:
        subprocess.run([sys.executable, HERE / "slurm_cases.py", *slurm], check=True)
    if not only or local:
        subprocess.run([sys.executable, HERE / "make_local.py", *local], check=True)
    return subprocess.run([sys.executable, HERE / "merge_labels.py"]).returncode


if __name__ == "__main__":
    sys.exit(main())
