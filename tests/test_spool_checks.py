"""The smaller trust fixes of issue 28, each on the real kernel: one check of a job's dirs
(spool.open_attempt), a user's lease does not block root's reading of a log (spool.open_log),
a sparse 1 TB log's tail costs what a small one's does, and `gpualert show` refuses a
verdict.json moved in from another job."""

from __future__ import annotations

import copy
import errno
import fcntl
import os
import time
from pathlib import Path

import pytest
from test_verdict import FULL

from gpualert_slurm.classify.logread import _tail_lines
from gpualert_slurm.commands.show import ShowError, load_verdict
from gpualert_slurm.core import verdict as V
from gpualert_slurm.core.spool import SpoolError, open_attempt, open_log

F_SETLEASE = getattr(fcntl, "F_SETLEASE", 1024)


def _spool(tmp_path: Path) -> Path:
    spool = tmp_path / "spool"
    spool.mkdir(mode=0o755)
    spool.chmod(0o755)
    return spool


def _job(spool: Path, job: str, attempt: int = 0, mode: int = 0o700) -> Path:
    d = spool / job
    d.mkdir(mode=0o700)
    d.chmod(0o700)
    if attempt:
        a = d / f"attempt-{attempt}"
        a.mkdir()
        a.chmod(mode)
        return a
    d.chmod(mode)
    return d


def test_open_attempt_accepts_the_users_0700_dirs(tmp_path: Path) -> None:
    spool = _spool(tmp_path)
    _job(spool, "7", attempt=1)
    d = open_attempt(str(spool), "7", os.getuid(), 1)
    try:
        assert d.attempt == 1 and d.attempt_path.endswith("7/attempt-1")
    finally:
        d.close()


@pytest.mark.parametrize("where", ["job", "attempt"])
def test_open_attempt_refuses_a_dir_others_may_read(tmp_path: Path, where: str) -> None:
    """An attempt dir the user made 0755: the Prolog refused it, and so must every reader."""
    spool = _spool(tmp_path)
    a = _job(spool, "7", attempt=1)
    (a if where == "attempt" else a.parent).chmod(0o755)
    with pytest.raises(SpoolError, match="not 0700: refused"):
        open_attempt(str(spool), "7", os.getuid(), 1)


def test_open_attempt_refuses_a_linked_attempt_dir(tmp_path: Path) -> None:
    spool = _spool(tmp_path)
    _job(spool, "8", attempt=1)
    (spool / "7").mkdir(mode=0o700)
    (spool / "7").chmod(0o700)
    (spool / "7" / "attempt-1").symlink_to(spool / "8" / "attempt-1")
    with pytest.raises(SpoolError, match="not a directory"):
        open_attempt(str(spool), "7", os.getuid(), 1)


def test_open_attempt_refuses_another_users_dir(tmp_path: Path) -> None:
    spool = _spool(tmp_path)
    _job(spool, "7")
    with pytest.raises(SpoolError, match="owned by uid"):
        open_attempt(str(spool), "7", 4242, 0)


def test_a_users_lease_does_not_block_roots_open(tmp_path: Path) -> None:
    """The lease holder's write lease: a plain open() by root would wait lease-break-time
    (45 s); open_log's O_NONBLOCK fails at once (EWOULDBLOCK), which readers handle."""
    log = tmp_path / "0.0.log"
    log.write_bytes(b"x\n")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the lease holder, as the job's process would be
        try:
            fd = os.open(log, os.O_RDONLY)
            fcntl.fcntl(fd, F_SETLEASE, fcntl.F_WRLCK)
            os.write(w, b"1")
            time.sleep(30)
        finally:
            os._exit(0)
    try:
        assert os.read(r, 1) == b"1"
        t0 = time.monotonic()
        with pytest.raises(OSError) as e:
            open_log(str(log))
        assert e.value.errno == errno.EWOULDBLOCK
        assert time.monotonic() - t0 < 1.0
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def test_a_sparse_terabyte_logs_tail_is_read_from_its_end(tmp_path: Path) -> None:
    log = tmp_path / "0.0.log"
    with open(log, "wb") as f:
        end = b"\nlast words of a long run\n"
        f.seek((1 << 40) - len(end))
        f.write(end)
    t0 = time.monotonic()
    tail = _tail_lines(str(log), 3)
    assert time.monotonic() - t0 < 2.0
    assert tail[-1][1] == "last words of a long run" and tail[-1][0] is None  # not counted
    small = tmp_path / "small.log"
    small.write_bytes(b"a\nb\nlast\n")
    assert _tail_lines(str(small), 1) == [(3, "last", "last")]


def test_show_refuses_a_verdict_moved_in_from_another_job(tmp_path: Path) -> None:
    spool = _spool(tmp_path)
    d = _job(spool, "5")
    other = copy.deepcopy(FULL)
    other.update(job_id="4242", attempt=0, array=None)
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        V.write_at(fd, V.VerdictRecord.from_json(other))
    finally:
        os.close(fd)
    with pytest.raises(ShowError, match="not job 5's: refused"):
        load_verdict(str(spool), "5")
    own = copy.deepcopy(other)
    own.update(job_id="5")
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        V.write_at(fd, V.VerdictRecord.from_json(own))
    finally:
        os.close(fd)
    assert str(load_verdict(str(spool), "5").job_id) == "5"
