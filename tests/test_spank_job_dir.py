"""The plugin makes the job's spool dir when its Prolog has not (spank/records.c, make_job_dir):
the real plugin, built from spank/, driven by bench/tap_harness.c, which plays slurmstepd's
callbacks in order (init, init_post_opt, user_init, then each task) as root, for a job of the
unprivileged test user. Asserted: the dir the Prolog would make (the user's, 0700, nodes/ and
tasks/, for attempt N in attempt-N/), every task's log in it, no temp dir left, two makers
racing make one; a dir there already is left as it is; a spool another user could write is
refused and said. The real cluster's case (a Prolog held back in a burst) is
tests/test_prolog_cluster.py::test_a_job_whose_prolog_comes_late_keeps_its_logs."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from clusterlib import wait_until

REPO = Path(__file__).resolve().parent.parent
USER = "gpatest"  # made by scripts/install-test-deps.sh
JOB = "4242"      # the harness's job id


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert os.geteuid() == 0, "the plugin's slurmstepd side runs as root"
    subprocess.run(["make", "-s", "-C", str(REPO / "spank")], check=True, timeout=300)
    exe = tmp_path_factory.mktemp("harness") / "tap_harness"
    subprocess.run(["gcc", "-O2", "-rdynamic", "-o", str(exe),
                    str(REPO / "bench" / "tap_harness.c"), "-ldl"], check=True, timeout=120)
    return exe


@pytest.fixture
def tmp() -> Iterator[Path]:
    """A dir the job's user can pass through (pytest's tmp is root's 0700: the copier,
    which runs as the user, could not reach a spool in it)."""
    d = Path(tempfile.mkdtemp(prefix="gpualert-jobdir-"))
    d.chmod(0o755)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _run(exe: Path, spool: Path, tmp: Path, tasks: int = 2, steps: int = 2,
         **env: str) -> subprocess.CompletedProcess[str]:
    pw = pwd.getpwnam(USER)
    local = tmp / "local"
    local.mkdir(mode=0o700, exist_ok=True)
    return subprocess.run(
        [str(exe), str(REPO / "spank" / "gpualert.so"), str(tasks), str(steps), str(spool),
         str(local)],
        env=dict(os.environ, HARNESS_UID=str(pw.pw_uid), HARNESS_GID=str(pw.pw_gid), **env),
        capture_output=True, text=True, timeout=120)


def _spool(tmp: Path, mode: int = 0o755) -> Path:
    spool = tmp / "spool"
    spool.mkdir()
    spool.chmod(mode)
    return spool


def _owned_dir(path: Path, uid: int) -> None:
    st = path.lstat()
    assert stat.S_ISDIR(st.st_mode), path
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (uid, 0o700), \
        f"{path}: uid {st.st_uid} mode {stat.S_IMODE(st.st_mode):04o}"


def test_a_missing_job_dir_is_made_as_the_prolog_makes_it(harness: Path, tmp: Path) -> None:
    spool = _spool(tmp)
    proc = _run(harness, spool, tmp, tasks=3, steps=2)
    assert proc.returncode == 0, proc.stderr
    uid = pwd.getpwnam(USER).pw_uid
    d = spool / JOB
    for p in (d, d / "tasks", d / "nodes"):
        _owned_dir(p, uid)
    # steps 0 and 1, three ranks each: every log, start and exit record is there (the exit
    # records are the copiers', written a moment after their task_exit answers)
    want = {f"{s}.{r}.{k}" for s in (0, 1) for r in range(3) for k in ("log", "start", "exit")}
    wait_until(lambda: want <= {p.name for p in (d / "tasks").iterdir()}, 10,
               "every log, start and exit record",
               diagnose=lambda: str(sorted(want - {p.name for p in (d / "tasks").iterdir()})))
    assert [p.name for p in spool.iterdir()] == [JOB]  # no .tmp-* left behind
    assert "not made" not in proc.stderr


def test_a_requeued_jobs_attempt_gets_its_own_dir(harness: Path, tmp: Path) -> None:
    spool = _spool(tmp)
    proc = _run(harness, spool, tmp, HARNESS_RESTARTS="2")
    assert proc.returncode == 0, proc.stderr
    uid = pwd.getpwnam(USER).pw_uid
    a = spool / JOB / "attempt-2"
    for p in (spool / JOB, a, a / "tasks", a / "nodes"):
        _owned_dir(p, uid)
    wait_until(lambda: {"0.0.log", "0.0.exit", "1.1.log"} <= {p.name for p in
                                                              (a / "tasks").iterdir()},
               10, "the attempt's logs and exit records in attempt-2/tasks")
    assert not (spool / JOB / "tasks").exists()


def test_makers_racing_make_one_dir(harness: Path, tmp: Path) -> None:
    spool = _spool(tmp)
    pw = pwd.getpwnam(USER)
    local = tmp / "local"
    local.mkdir(mode=0o700)
    procs = [subprocess.Popen(
        [str(harness), str(REPO / "spank" / "gpualert.so"), "1", "3", str(spool), str(local)],
        env=dict(os.environ, HARNESS_UID=str(pw.pw_uid), HARNESS_GID=str(pw.pw_gid)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(6)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert [p.name for p in spool.iterdir()] == [JOB]
    _owned_dir(spool / JOB, pw.pw_uid)
    assert not any("not made" in err for _out, err in outs), outs


def test_a_dir_already_there_is_left_as_it_is(harness: Path, tmp: Path) -> None:
    spool = _spool(tmp)
    d = spool / JOB
    d.mkdir()
    d.chmod(0o755)  # root's: not the user's, so nothing of the job goes in
    proc = _run(harness, spool, tmp)
    assert proc.returncode == 0, proc.stderr
    st = d.lstat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o755)
    assert list(d.iterdir()) == []


def test_a_spool_others_can_write_is_refused_and_said(harness: Path, tmp: Path) -> None:
    spool = _spool(tmp, 0o775)
    proc = _run(harness, spool, tmp, steps=1)
    assert proc.returncode == 0, proc.stderr
    assert list(spool.iterdir()) == []
    assert f"spool dir {spool}/{JOB} not made: Operation not permitted" in proc.stderr
    assert "see `gpualert doctor`" in proc.stderr
