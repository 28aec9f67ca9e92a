"""core/classes.py reads the class table without importing the classifier (issue 30: the
upward import the import linter could not see), and the package still ships the file."""

from __future__ import annotations

import configparser
import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path

from gpualert_slurm.core import classes

REPO = Path(__file__).resolve().parent.parent


def test_reading_the_class_table_imports_nothing_of_classify() -> None:
    code = ("import json, sys\n"
            "from gpualert_slurm.core.classes import class_domains, shipped_classes\n"
            "assert shipped_classes()['gpu_hardware'].domain == 'infrastructure'\n"
            "assert class_domains()['cuda_oom'] == 'workload'\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('gpualert_slurm'))))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=60, check=True).stdout
    loaded = json.loads(out)
    assert not [m for m in loaded if m.startswith("gpualert_slurm.classify")], loaded
    assert "gpualert_slurm.core.classes" in loaded


def test_the_table_file_is_in_the_package_data() -> None:
    path = "/".join(classes.SHIPPED)
    assert (REPO / "gpualert_slurm" / path).is_file()
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    patterns = [p.strip() for p in cfg["options.package_data"]["gpualert_slurm"].split(",")]
    assert any(fnmatch.fnmatch(path, p) for p in patterns), patterns
