"""The type check (issue 30): mypy on core, recovery and notify, as `make lint` runs it
([tool.mypy] in pyproject.toml), passes; a wrong action or mode is caught by it; and every
`# type: ignore` left in those packages says why."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MYPY = Path(sys.executable).with_name("mypy")


def _mypy(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert MYPY.exists(), f"{MYPY} missing: scripts/install.sh installs mypy"
    return subprocess.run([str(MYPY), "--no-incremental", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_core_recovery_and_notify_type_check() -> None:
    p = _mypy(ROOT)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
    assert "Success: no issues found" in p.stdout
    n = int(re.search(r"in (\d+) source files", p.stdout).group(1))
    assert n >= 30, p.stdout


def test_a_misspelt_action_or_mode_is_a_type_error(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "gpualert_slurm", copy / "gpualert_slurm",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    (copy / "gpualert_slurm" / "recovery" / "zz_wrong.py").write_text(
        "from gpualert_slurm.core.config import RecoveryConfig\n"
        "from gpualert_slurm.core.vocab import Action, ActionSpec, Need\n"
        "RecoveryConfig(mode='acton')\n"
        "ActionSpec(Action.REQUEUE, 'rack', Need.JOB, breaker=False, carried_by=None,\n"
        "           default_allowed=True)\n"
        "Action.REBOOT\n")
    p = _mypy(copy)
    assert p.returncode != 0
    out = p.stdout
    assert 'zz_wrong.py:3: error: Argument "mode" to "RecoveryConfig"' in out, out[-3000:]
    assert "zz_wrong.py:4: error: Argument 2 to \"ActionSpec\"" in out, out[-3000:]
    assert 'zz_wrong.py:6: error: "type[Action]" has no attribute "REBOOT"' in out, out[-3000:]


def test_each_type_ignore_left_says_why() -> None:
    """In the checked packages: a bare ignore hides whatever mypy finds there next."""
    bare = []
    for pkg in ("core", "recovery", "notify"):
        for f in sorted((ROOT / "gpualert_slurm" / pkg).rglob("*.py")):
            for i, line in enumerate(f.read_text().splitlines(), 1):
                m = re.search(r"# type: ignore(\[[^\]]*\])?(.*)$", line)
                if m and not m.group(2).strip().startswith("#"):
                    bare.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bare, bare
