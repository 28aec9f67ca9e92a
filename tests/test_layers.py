"""The package's layering (.importlinter, docs/MAP.md): core < classify < report, notify,
recovery < hooks, commands, cli, and no import cycle between the modules of any package, as
import-linter checks it on the checkout; then that the checker really fails on a breach."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess[str]:
    assert LINT.exists(), f"{LINT} missing: scripts/install.sh installs import-linter"
    env = dict(os.environ, PYTHONPATH=str(cwd))
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_the_package_keeps_its_layers_and_has_no_import_cycle() -> None:
    p = _lint(ROOT)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "3 kept, 0 broken" in p.stdout, p.stdout[-2000:]


def test_a_core_module_importing_the_classifier_breaks_the_contract(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "gpualert_slurm", copy / "gpualert_slurm",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / ".importlinter", copy / ".importlinter")
    (copy / "gpualert_slurm" / "core" / "zz_breach.py").write_text(
        "from gpualert_slurm.classify import classify  # noqa: F401\n")
    p = _lint(copy)
    assert p.returncode != 0, p.stdout[-2000:]
    assert "gpualert_slurm.core.zz_breach -> gpualert_slurm.classify" in p.stdout, \
        p.stdout[-3000:]
