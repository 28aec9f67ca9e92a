"""slurmstepd keeps every exit record in the node-local dir (root's); the node Epilog moves those
the spool lacks (no copier wrote them: untapped, a hung spool) into the attempt's tasks/ dir and
lets the rest go (task_records.restore_local_exit_records)."""

import json
import os
from pathlib import Path

import pytest

from gpualert_slurm.core.spool import SpoolError
from gpualert_slurm.core.task_records import restore_local_exit_records


def record(step: str, rank: int) -> bytes:
    return (json.dumps({"node": "n2", "step": step, "rank": rank, "exit_code": 0,
                        "signal": None, "log_gaps": 1, "log_gap_bytes": 4096}) + "\n").encode()


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    local = tmp_path / "run-gpualert"
    local.mkdir(mode=0o700)
    tasks = tmp_path / "spool" / "42" / "tasks"
    tasks.mkdir(parents=True)
    return local, tasks


def restore(local: Path, tasks: Path, attempt: int = 0) -> list[str]:
    fd = os.open(tasks, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return restore_local_exit_records(fd, 42, attempt, 1234, 1234, str(local))
    finally:
        os.close(fd)


def test_records_move_in_with_the_users_owner_and_leave_the_local_dir(dirs):
    local, tasks = dirs
    (local / "42.0.batch.0.exit").write_bytes(record("batch", 0))
    (local / "42.0.0.3.exit").write_bytes(record("0", 3))
    (local / "42.1.0.0.exit").write_bytes(record("0", 0))  # another attempt: stays
    (local / "421.0.0.0.exit").write_bytes(record("0", 0))  # another job: stays
    assert restore(local, tasks) == ["0.3.exit", "batch.0.exit"]
    got = json.loads((tasks / "0.3.exit").read_text())
    assert got["log_gaps"] == 1 and got["rank"] == 3
    st = (tasks / "0.3.exit").stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (1234, 1234, 0o600)
    assert sorted(p.name for p in local.iterdir()) == ["42.1.0.0.exit", "421.0.0.0.exit"]


def test_a_record_the_spool_has_is_not_replaced(dirs):
    local, tasks = dirs
    (tasks / "0.0.exit").write_text("spool's own\n")
    (local / "42.0.0.0.exit").write_bytes(record("0", 0))
    assert restore(local, tasks) == []
    assert (tasks / "0.0.exit").read_text() == "spool's own\n"
    assert list(local.iterdir()) == []


def test_a_record_the_spool_has_is_let_go_unread(dirs):
    """The copier wrote the spool's copy (the usual case): the local one is not even read, so
    a local entry that is no plain root file costs nothing and is still removed."""
    local, tasks = dirs
    (tasks / "0.0.exit").write_text("copier's\n")
    os.mkfifo(local / "42.0.0.0.exit")  # read_bytes_nofollow would refuse it
    assert restore(local, tasks) == []
    assert (tasks / "0.0.exit").read_text() == "copier's\n"
    assert list(local.iterdir()) == []


def test_a_record_another_epilog_took_meanwhile_is_skipped(dirs, monkeypatch):
    """Several slurmd on one host share the local dir: a record listed, then taken by another
    node's Epilog before this one reads it, is skipped, and the others still move in."""
    import gpualert_slurm.core.task_records as task_records

    local, tasks = dirs
    (local / "42.0.0.0.exit").write_bytes(record("0", 0))
    (local / "42.0.0.1.exit").write_bytes(record("0", 1))
    real = task_records.read_bytes_nofollow

    def taken_first(name, dir_fd, **kw):
        if name == "42.0.0.0.exit":
            os.unlink(name, dir_fd=dir_fd)  # the other Epilog's unlink, just before our read
        return real(name, dir_fd, **kw)

    monkeypatch.setattr(task_records, "read_bytes_nofollow", taken_first)
    assert restore(local, tasks) == ["0.1.exit"]
    assert list(local.iterdir()) == []


def test_a_local_dir_others_can_write_is_refused(dirs):
    local, tasks = dirs
    (local / "42.0.0.0.exit").write_bytes(record("0", 0))
    local.chmod(0o777)
    with pytest.raises(SpoolError, match="not root's alone"):
        restore(local, tasks)
    assert not (tasks / "0.0.exit").exists()


def test_a_planted_link_in_the_local_dir_is_not_followed(dirs, tmp_path):
    local, tasks = dirs
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    (local / "42.0.0.0.exit").symlink_to(secret)
    with pytest.raises(OSError):
        restore(local, tasks)
    assert not (tasks / "0.0.exit").exists()


def test_no_local_dir_is_nothing_to_do(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    fd = os.open(tasks, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert restore_local_exit_records(fd, 42, 0, 0, 0, str(tmp_path / "absent")) == []
    finally:
        os.close(fd)


# ---- the run's start, from this node's Prolog to its Epilog (task_records.note_run_start) --

def test_the_prologs_start_reaches_the_epilog_once(tmp_path):
    from gpualert_slurm.core.task_records import note_run_start, take_run_start

    local = str(tmp_path / "run-gpualert")  # made by the Prolog when missing, root's 0700
    note_run_start(42, 1, 1796175125.25, local)
    assert os.stat(local).st_mode & 0o777 == 0o700
    assert take_run_start(42, 0, local) is None  # another attempt's
    assert take_run_start(421, 1, local) is None  # another job's
    assert take_run_start(42, 1, local) == 1796175125.25
    assert take_run_start(42, 1, local) is None  # let go once read


def test_a_start_record_nobody_but_root_could_write_is_the_only_one_taken(tmp_path):
    from gpualert_slurm.core.task_records import note_run_start, take_run_start

    local = tmp_path / "run-gpualert"
    note_run_start(42, 0, 100.0, str(local))
    os.chown(local / "42.0.start", 1234, 1234)  # not root's: refused, Slurm is asked instead
    assert take_run_start(42, 0, str(local)) is None
    (local / "43.0.start").symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_text("200\n")
    assert take_run_start(43, 0, str(local)) is None  # a link is not followed
    note_run_start(44, 0, 300.0, str(local))
    local.chmod(0o777)  # a local dir others can write: nothing in it is taken
    assert take_run_start(44, 0, str(local)) is None
    assert take_run_start("../44", 0, str(local)) is None  # not a job id
