"""`gpualert doctor` on the Slurm release (issue 33): inside the tested matrix it says which,
outside it says so (a warning, never a failure); and Slurm's Prolog/Epilog timeouts against
the hooks' own bounds."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gpualert_slurm.commands import doctor

REPO = Path(__file__).resolve().parent.parent


def test_the_doctors_matrix_is_the_version_matrix_tests() -> None:
    src = (REPO / "tests" / "test_version_matrix.py").read_text()
    block = re.search(r"^VERSIONS = \{(.*?)\}", src, re.S | re.M)
    assert block, "VERSIONS not found in tests/test_version_matrix.py"
    cells = re.findall(r'"(\d+\.\d+)-v\d"', block.group(1))
    assert sorted(set(cells)) == sorted(doctor.TESTED_SLURM), (cells, doctor.TESTED_SLURM)


def test_this_hosts_slurm_is_in_the_matrix() -> None:
    """The real `scontrol --version` here (Debian 12's 22.05.8)."""
    out = subprocess.run(["scontrol", "--version"], capture_output=True, text=True,
                         check=True, timeout=30).stdout.split()[-1]
    r = doctor.check_slurm_version()
    assert r.ok and not r.kind and out in r.line() and "tested: 22.05, 24.11, 26.05" in r.line()


def test_a_release_outside_the_matrix_is_said_so() -> None:
    for v in ("23.02.7", "25.05.3", "26.11.0", ""):
        r = doctor.judge_slurm_version(v)
        line = r.line()
        assert r.kind == "warn" and not r.failed, line
        assert "outside the tested matrix (22.05, 24.11, 26.05)" in line, line
        assert "SLURM-VERSIONS.md" in line
    assert doctor.judge_slurm_version("26.05.5").line() == \
        "ok   Slurm version 26.05.5 (tested: 22.05, 24.11, 26.05)"


def test_no_scontrol_is_a_warning(tmp_path: Path) -> None:
    r = doctor.check_slurm_version(str(tmp_path / "no-scontrol"))
    assert r.kind == "warn" and not r.failed and "cannot run" in r.line()


def test_timeouts_below_the_hooks_bounds_are_said(tmp_path: Path) -> None:
    conf = tmp_path / "slurm.conf"
    conf.write_text("PrologEpilogTimeout=5\n")
    lines = [r.line() for r in doctor.check_hook_timeouts(str(conf))]
    assert len(lines) == 2 and lines[0].startswith("warn PrologTimeout (5 s)"), lines
    assert "drains the node" in lines[0]
    # the Prolog shim holds a job at most its wait (8 s): 20 s is enough for it, not the Epilog
    conf.write_text("PrologEpilogTimeout=20\n")
    lines = [r.line() for r in doctor.check_hook_timeouts(str(conf))]
    assert len(lines) == 1 and lines[0].startswith("warn EpilogTimeout (20 s)"), lines
    # the README's PrologEpilogTimeout=60 covers both; unset means no limit at all
    conf.write_text("PrologEpilogTimeout=60\n")
    assert doctor.check_hook_timeouts(str(conf)) == []
    conf.write_text("ClusterName=x\n")
    assert doctor.check_hook_timeouts(str(conf)) == []
    # PrologTimeout/EpilogTimeout (25.05+) win over PrologEpilogTimeout
    conf.write_text("PrologEpilogTimeout=60\nEpilogTimeout=30\n")
    lines = [r.line() for r in doctor.check_hook_timeouts(str(conf))]
    assert len(lines) == 1 and lines[0].startswith("warn EpilogTimeout (30 s)"), lines


def test_a_batch_start_timeout_below_the_prologs_wait_is_said(tmp_path: Path) -> None:
    """slurmctld requeues a batch job its node has not started within BatchStartTimeout
    (default 10 s), the Prolog included: a site that lowers it below the Prolog shim's wait
    would have jobs requeued "missing from batch node" because of gpualert."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("PrologEpilogTimeout=60\nBatchStartTimeout=5\n")
    lines = [r.line() for r in doctor.check_hook_timeouts(str(conf))]
    assert len(lines) == 1 and lines[0].startswith("warn BatchStartTimeout (5 s)"), lines
    assert "missing from batch node" in lines[0] and "GPUALERT_PROLOG_COLD_WAIT" in lines[0]
    for ok in ("BatchStartTimeout=10\n", "BatchStartTimeout=120\n", "ClusterName=x\n"):
        conf.write_text(ok)
        assert doctor.check_hook_timeouts(str(conf)) == [], ok
